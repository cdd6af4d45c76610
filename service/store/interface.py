"""The storage interface: what the store's policy (`service.store.model_store`)
needs of a backend, in two parts that may be swapped apart.

`Content` holds each model's immutable blobs (the uploaded files, the
summary, the catalogue, the converted bytes, the graph), addressed by
place; `Index` holds what changes: the records, which tenant holds which model,
the bytes each takes and in all, the order of last use, and the lock that
serializes changes. The local backend keeps content in a folder
(`service.store.local`) and the index in an SQLite file beside it
(`service.store.sqlite`); a fleet's puts content on object storage
(`service.store.s3`) and the index in PostgreSQL (`service.store.postgres`),
with the same queries (`service.store.sql`).

Rules every backend keeps: content is put whole at a place of its own and
never changes after (but for the graph, added once); a model is stored when
the index has its record, which names the place and is written after the
content is in place, and dropped before it is removed; every change of the
index happens under `Index.locked()`; an index call that cannot reach its
database, or a content call its object storage, raises `StorageUnavailable`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from service.store.byte_source import ByteSource
from service.store.eviction import TenantCaps
from service.store.layout import ModelFolder
from service.store.records import SourceFile, StoredRecord, TenantRecord


class Content(Protocol):
    """A model's blobs, at a place: the model id for a local backend, a
    generation of it ("id/hex") for a remote one, so a re-import after a
    removal never meets the old one's objects."""

    @property
    def on_local_disk(self) -> bool:
        """The content takes room on the work area's file system (evicting it frees some)."""

    def open(self) -> None:
        """Ready the content store."""

    def close(self) -> None: ...

    def check(self) -> None:
        """Raise `StorageUnavailable` if the content cannot be reached now (readiness)."""

    def new_place(self, model_id: str) -> str:
        """Where a commit of `model_id` puts its content."""

    def prepare(self, place: str, work: ModelFolder) -> None:
        """Make a finished work folder durable at `place`, outside the index's
        lock (an object store uploads it here; it is garbage until recorded)."""

    def install(self, place: str, work: ModelFolder) -> None:
        """Take the prepared content as stored (lock held; no record names `place`)."""

    def discard(self, place: str) -> None:
        """A prepared content that was not installed (the model was stored
        meanwhile, or the commit failed): free what `prepare` put there."""

    def places(self) -> list[str]:
        """Every place with content, recorded or not (an interrupted commit
        leaves one unrecorded). A listing of the whole store (for object
        storage, of every object): only `gc --full` and a local store's start call it."""

    def remove(self, place: str) -> Callable[[], None] | None:
        """Make the content unreachable now (lock held); the returned call frees
        its bytes (outside the lock). None if there was none."""

    def has_graph(self, place: str) -> bool: ...

    def add_graph(self, place: str, rendered: Path) -> None:
        """Take a rendered graph document as the model's (lock held; it has none)."""

    def summary(self, place: str) -> bytes:
        """The stored summary's bytes; FileNotFoundError if the model is gone."""

    def catalog(self, place: str) -> Path:
        """The catalogue as a local file (a remote backend's cached copy); FileNotFoundError if gone."""

    def open_graph(self, place: str) -> int:
        """An open descriptor of the graph document; FileNotFoundError if it has none (or is gone)."""

    def model_files(self, place: str) -> AbstractContextManager[ModelFolder]:
        """The model's uploaded files as a local folder, for a worker to read
        again (a remote backend's copy, removed at the end of the block). A
        copy is FileNotFoundError if the files are gone, or one goes while it
        is copied (a removal's objects are deleted outside the index's lock);
        a folder read in place may go under the worker, whose import then
        finds no file."""

    def forget(self, place: str) -> None:
        """Drop local copies of a removed place's files (a cached catalogue)."""

    def open_file(self, place: str, item: SourceFile) -> ByteSource:
        """A stored file the record names, checked to be the one recorded
        (TensorSourceGone, TensorSourceChanged otherwise), to read by range."""


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
