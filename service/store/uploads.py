"""Resumable uploads in the making (tus 1.0, `/uploads`): what the routes ask of them.

Owns `UploadState` (an upload as HEAD tells it), the two protocols the
routes and the import rely on, `ResumableUploads` (create, find, append,
remove, link into an import's work folder, the sweep of the expired, the
bytes reserved) and `Appending` (one PATCH's hold on an upload: `consume`
each chunk, `end` once). Two kinds implement them
(`service.store.backends.resumable_uploads_for` picks a store's):

- on this machine's disk (`service.store.partial_uploads`), for a store whose
  content or index is on this machine: any front-end process of the replica
  continues any upload;
- in the bucket and the PostgreSQL index (`service.store.fleet_uploads`), for
  the fleet store (`--store s3://...` and `--database`): any replica
  continues any upload.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from service.errors import TenantQuotaExceeded, TooManyUploads
from service.store.model_store import Store

UPLOAD_ID = re.compile(r"[0-9a-f]{32}")
DigestUpdate = Callable[[memoryview], object]  # a hash object's update, or a thread's hashing it


@dataclass(frozen=True, slots=True)
class UploadState:
    upload_id: str
    length: int
    offset: int  # bytes held (durable: what a restart or another replica would find)
    metadata: str
    filename: str
    expires: float  # Unix time, unless written to again

    @property
    def complete(self) -> bool:
        return self.offset == self.length


class Appending(Protocol):
    """One PATCH's hold on an upload (one writer at a time). The caller hands
    each chunk to `consume` (it moves `offset`) and calls `end` once, on every
    path out: what was consumed is kept (as far as it became durable); `end`
    gives the upload's new expiry time, or None if it was removed meanwhile."""

    @property
    def upload_id(self) -> str: ...
    @property
    def length(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def room(self) -> int: ...
    @property
    def digest(self) -> hashlib._Hash | None:
        """The SHA-256 of the bytes before `offset`, when this process has it: the caller
        goes on hashing what it consumes (`consume`'s `digest_update`); else None."""

    @property
    def fd(self) -> int | None:
        """The file the bytes are appended to, for early writeback; None when they go elsewhere."""

    def consume(self, chunk: bytes, digest_update: DigestUpdate | None) -> None: ...
    def end(self) -> float | None: ...


class ResumableUploads(Protocol):
    def open(self) -> None:
        """Ready them (StorageUnavailable while their storage does not answer), sweeping the expired."""

    def create(self, tenant: str, length: int, metadata: str, filename: str) -> UploadState: ...
    def find(self, tenant: str, upload_id: str) -> UploadState: ...
    def append(self, tenant: str, upload_id: str, offset: int) -> Appending: ...
    def remove(self, tenant: str, upload_id: str) -> bool: ...
    def link_into(self, tenant: str, upload_id: str, target: Path) -> tuple[int, str]:
        """The finished upload's bytes at `target` (a path in an import's work folder); their size and SHA-256."""

    def sweep(self) -> int: ...
    def reserved(self) -> int: ...
    def collect_orphans(self) -> list[str]:
        """`gc --full`: remove what no upload names; what was removed."""


def check_creation(store: Store, tenant: str, length: int, max_open: int, *, open_now: int, declared: int, awaited: int, held: int) -> None:
    """A new upload of `length` bytes may be created for `tenant`, who has
    `open_now` uploads open declaring `declared` bytes, beside uploads that
    await `awaited` bytes and hold `held`: TooManyUploads past the tenant's
    count (`--max-open-uploads`); TenantQuotaExceeded if the tenant's stored
    bytes, its open uploads and this one would pass `--tenant-max-bytes`, or
    its share of the store's room; StoreFull (`Store.check_reservation`)."""
    if open_now >= max_open:
        raise TooManyUploads(f"the tenant has {open_now} uploads open, the most it may (--max-open-uploads); finish or DELETE one")
    cap = store.tenant_max_bytes
    if cap and (used := store.tenant_usage(tenant)[0]) + declared + length > cap:  # refused now, not after the bytes came
        raise TenantQuotaExceeded(
            f"the tenant's models take {used} bytes and its open uploads {declared}; {length} more would pass its cap of "
            f"{cap} (--tenant-max-bytes)",
            limit="tenant_max_bytes",
        )
    store.check_reservation(length, awaited=awaited, held=held, tenant_declared=declared)

