"""Which stored models a tenant's need for room may evict: the rule, and its
plain computation from an index's listings.

Owns `TenantCaps` (--tenant-max-bytes, --tenant-max-models) and
`evictable_in_order`, the computation the local and in-memory indexes use
(`Index.evictable`); the PostgreSQL index computes the same in SQL. A model
may be evicted by tenant T when every tenant holding it is T itself or a
tenant past one of its caps, counting every holding of that tenant in full
(a model nobody holds may go too). Least recently used first; only as many
as free the bytes wanted.
"""

from __future__ import annotations

from collections.abc import Callable
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


def evictable_in_order(
    own: str,
    caps: TenantCaps,
    keep: str,
    wanted: int,
    *,
    holders: Callable[[], dict[str, set[str]]],
    size: Callable[[str], int],
    by_last_use: Callable[[], list[str]],
) -> list[tuple[str, int]]:
    """`Index.evictable` from an index's `holders`, `size` and `by_last_use`;
    `own`: the tenant's key."""
    if wanted <= 0:
        return []
    holding = holders()
    over: set[str] = set()
    if caps.any:
        usage: dict[str, list[int]] = {}
        for model_id, keys in holding.items():
            model_size = size(model_id)
            for key in keys:
                used = usage.setdefault(key, [0, 0])
                used[0] += model_size
                used[1] += 1
        over = {key for key, (used, models) in usage.items() if caps.passed(used, models)}
    found, freed = [], 0
    for model_id in by_last_use():
        if freed >= wanted:
            break
        if model_id != keep and all(key == own or key in over for key in holding.get(model_id, ())):
            model_size = size(model_id)
            found.append((model_id, model_size))
            freed += model_size
    return found
