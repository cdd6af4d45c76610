"""Which stored models a tenant's need for room may evict: the rule.

Owns `TenantCaps` (--tenant-max-bytes, --tenant-max-models), which the
index applies (`SqlIndex.evictable`, `service.store.sql.index`). A model
may be evicted by tenant T when every tenant holding it is T itself or a
tenant past one of its caps, counting every holding of that tenant in full
(a model nobody holds may go too). Least recently used first; only as many
as free the bytes wanted.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TenantCaps:
    """Per-tenant caps; 0: no cap."""

    max_bytes: int = 0
    max_models: int = 0

    @property
    def any(self) -> bool:
        return self.max_bytes > 0 or self.max_models > 0

    def passed(self, used: int, models: int) -> bool:
        """`used` bytes in `models` models pass one of the caps."""
        return (self.max_bytes > 0 and used > self.max_bytes) or (self.max_models > 0 and models > self.max_models)
