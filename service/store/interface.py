"""The storage interface: what the store's policy (`service.store.model_store`)
needs of a backend, in two parts that may be swapped apart.

`Blobs` holds bytes: immutable objects by key, below one root (a folder on
this machine, `service.store.local.blobs`; a bucket's prefix,
`service.store.s3.blobs`). Six operations: put a file, read a range, a
local file to open or send, copy one out, list, delete. What the objects
are (a model's uploaded files, summary, catalogue, converted bytes, graph)
and where each model's go is `service.store.content.Content`'s, written once
over any `Blobs`. `Index` holds what changes: the records, which tenant
holds which model, the bytes each takes and in all, the order of last use,
and the lock that serializes changes: an SQLite file beside a folder store
(`service.store.sqlite`), or PostgreSQL for a fleet's
(`service.store.postgres`), with the same queries (`service.store.sql`).

Rules every backend keeps: an object is put whole at a key of its own and
never changes after; a model is stored when the index has its record, which
names the place and is written after the content is in place, and dropped
before it is removed; every change of the index happens under
`Index.locked()`; a call that cannot reach its database or its object
storage raises `StorageUnavailable`.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from service.store.byte_source import ByteSource
from service.store.eviction import TenantCaps
from service.store.records import SourceFile, StoredRecord, TenantRecord


class Blobs(Protocol):
    """Objects of bytes by key: relative, "/"-separated, with no empty, "." or
    ".." segment ("models/<id>/<generation>/summary.json")."""

    @property
    def local(self) -> bool:
        """The objects are files on this machine, on the work area's file
        system: putting one moves a file, they take the free space the store
        keeps a floor of, and a read costs microseconds, not a round trip."""

    def open(self) -> None:
        """Ready the storage."""

    def close(self) -> None: ...

    def check(self) -> None:
        """Raise `StorageUnavailable` if the storage cannot be reached now (readiness)."""

    def put(self, key: str, source: Path) -> None:
        """The file `source` (in the work area) becomes the object `key`,
        durably; the file is taken (moved, or uploaded and removed)."""

    def reader(self, folder: str, item: SourceFile) -> ByteSource:
        """The object `folder/item.path`, to read by range; a local file is
        checked to be the one `item` recorded (TensorSourceGone, TensorSourceChanged)."""

    def local_path(self, key: str) -> Path:
        """The object as a file on this machine, to open, send or query (a
        remote object's copy in a local cache); FileNotFoundError if there is none."""

    def fetch(self, key: str, target: Path) -> None:
        """The object's bytes appended to the file `target`, in the work area
        (made if missing); FileNotFoundError if there is none."""

    def keys(self, folder: str) -> list[str]:
        """The keys of every object below `folder` ("models/<id>/": a key's
        first segments and a "/"; "" for every object)."""

    def delete(self, keys: list[str]) -> None:
        """Remove these objects (one already gone is no error), and what this
        process keeps of them (open files, local copies)."""


class Index(Protocol):
    def open(self) -> None:
        """Ready the index (recount what is a cache; create or migrate a database's schema)."""

    def close(self) -> None:
        """Let go of connections."""

    def check(self) -> None:
        """Raise `StorageUnavailable` if the index cannot be reached now (readiness)."""

    def locked(self) -> AbstractContextManager[None]:
        """Exclusive: every change happens under it (across processes for a shared store)."""

    # --- records, sizes, last use

    def has(self, model_id: str) -> bool: ...

    def record(self, model_id: str) -> StoredRecord | None: ...

    def add_record(self, record: StoredRecord, size: int) -> None:
        """The model is stored: its record, its size (added to the total), used now."""

    def replace_record(self, record: StoredRecord) -> None:
        """The record of a stored model, updated (its sources' identity)."""

    def drop(self, model_id: str, size: int) -> None:
        """The model's content is gone: its record and every tenant's holding;
        `size` comes off the total."""

    def size(self, model_id: str) -> int:
        """Bytes the model takes (0 if it is not stored)."""

    def grow(self, model_id: str, added: int) -> None:
        """The model takes `added` more bytes (its graph)."""

    def usage(self) -> int:
        """Bytes every stored model takes."""

    def count(self) -> int:
        """The number of stored models."""

    def touch(self, model_id: str) -> None:
        """The model was used now."""

    def by_last_use(self) -> list[str]:
        """Stored models, least recently used first."""

    def evictable(self, tenant: str, caps: TenantCaps, *, keep: str, wanted: int) -> list[tuple[str, int]]:
        """(id, size) of the stored models `tenant`'s need for room may evict,
        least recently used first, `keep` left out: those whose every holder is
        the tenant itself or a tenant past one of its `caps` (bytes and models
        of every holding; `service.store.eviction`). Only as many as free
        `wanted` bytes (every one if they do not; none if `wanted` <= 0). Lock held."""

    def tenant_usage(self, tenant: str) -> tuple[int, int]:
        """The bytes and the number of the stored models the tenant holds."""

    def places(self) -> set[str]:
        """The content place every record names (`StoredRecord.place`, else its id)."""

    # --- content in flight: a commit's, uploaded before its record exists, and
    # a removal's, deleted after its record went. These marks are how garbage
    # collection finds what a process killed midway left, without a listing.

    def begin_upload(self, place: str) -> None:
        """Content is in flight at `place`, named by no record: a commit is
        putting it there, or a removal deleting it. Garbage collection leaves
        it alone while the mark is younger than its grace period, and removes
        it once older (unless a record names it by then)."""

    def end_upload(self, place: str) -> None:
        """The commit or removal at `place` ended (recorded, or removed)."""

    def live_uploads(self, grace_seconds: float) -> set[str]:
        """Places marked in flight less than `grace_seconds` ago."""

    def stale_uploads(self, grace_seconds: float) -> set[str]:
        """Places marked in flight `grace_seconds` ago or more (their process died, or is that slow)."""

    def claim_upload(self, place: str) -> None:
        """Garbage collection takes the content at `place` (lock held): its mark
        stays, stale for any grace (a collection cut short is finished by the
        next), and the commit that made it may no longer record it."""

    def upload_open(self, place: str) -> bool:
        """A commit's mark at `place` is there and no collection took it (lock
        held): the commit may record its content."""

    # --- tenants

    def tenant_key(self, tenant: str) -> str:
        """The name a tenant is kept under (never the tenant's own string)."""

    def hold(self, owner: TenantRecord, model_id: str) -> bool:
        """The tenant holds the model; False if it did already."""

    def holding(self, tenant: str, model_id: str) -> TenantRecord | None: ...

    def holds(self, tenant: str, model_id: str) -> bool: ...

    def visible(self, tenant: str, model_id: str) -> bool:
        """The tenant holds the model and it is stored (one lookup where the index can)."""

    def visible_record(self, tenant: str, model_id: str) -> StoredRecord | None:
        """The model's record if the tenant holds it and it is stored (one lookup where the index can)."""

    def let_go(self, tenant: str, model_id: str) -> bool:
        """The tenant no longer holds the model; False if it did not."""

    def held_by_anyone(self, model_id: str) -> bool: ...

    def held_by(self, tenant: str) -> list[str]:
        """The models the tenant holds."""

    def newest(self, tenant: str, before: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
        """(when the tenant took it, in ns; id) of up to `limit` of its models,
        newest first, older than `before`."""

    def graph_rendered(self, tenant: str, model_id: str) -> bool:
        """The model's graph was rendered for this tenant once."""

    def mark_graph_rendered(self, tenant: str, model_id: str) -> None: ...

    def checks(self, tenant: str, model_id: str) -> bytes | None:
        """The tenant's own check runs of the model (a `CheckRuns` document), None if it has none."""

    def keep_checks(self, tenant: str, model_id: str, document: bytes) -> bool:
        """Replace the tenant's check runs of the model (lock held); False if it does not hold it."""
