"""The storage interface: what the store's policy (`service.store.model_store`)
needs of a backend, in two parts that may be swapped apart.

`Content` holds each model's immutable blobs (the uploaded files, the
summary, the catalogue, the converted bytes, the graph), addressed by model
id; `Index` holds what changes: the records, which tenant holds which model,
the bytes each takes and in all, the order of last use, and the lock that
serializes changes. The local backend (`service.store.local`) keeps both in
one folder; the in-memory one (`service.store.memory`) in dictionaries; a
fleet puts content on object storage and the index in a database.

Rules every backend keeps: content is installed whole or not at all and
never changes after (but for the graph, added once); a model is stored when
the index has its record, which is written after its content is installed
and dropped after it is removed; every change of the index happens under
`Index.locked()`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from service.store.layout import ModelFolder
from service.store.records import SourceFile, StoredRecord, TenantRecord


class Content(Protocol):
    def open(self) -> None:
        """Ready the content store."""

    def prepare(self, work: ModelFolder) -> None:
        """Ready a finished work folder to be installed (made durable), outside the index's lock."""

    def install(self, model_id: str, work: ModelFolder) -> None:
        """Take the work folder's files as `model_id`'s content (lock held; none stored yet)."""

    def exists(self, model_id: str) -> bool: ...

    def model_ids(self) -> list[str]:
        """Every model with content, recorded or not (an interrupted commit leaves one unrecorded)."""

    def remove(self, model_id: str) -> Callable[[], None] | None:
        """Make the content unreachable now (lock held); the returned call frees
        its bytes (outside the lock). None if there was none."""

    def has_graph(self, model_id: str) -> bool: ...

    def add_graph(self, model_id: str, rendered: Path) -> None:
        """Take a rendered graph document as the model's (lock held; it has none)."""

    def summary(self, model_id: str) -> bytes:
        """The stored summary's bytes; FileNotFoundError if the model is gone."""

    def folder(self, model_id: str) -> ModelFolder:
        """The model's files as local, readable paths (the catalogue, the graph,
        the files a worker reads again); for a remote backend, a local copy."""

    def open_file(self, model_id: str, item: SourceFile) -> int:
        """An open descriptor of a stored file the record names, checked to be
        the one recorded (TensorSourceGone, TensorSourceChanged otherwise)."""


class Index(Protocol):
    def open(self) -> None:
        """Ready the index (recount what is a cache)."""

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

    # --- tenants

    def tenant_key(self, tenant: str) -> str:
        """The name a tenant is kept under (never the tenant's own string)."""

    def hold(self, owner: TenantRecord, model_id: str) -> bool:
        """The tenant holds the model; False if it did already."""

    def holding(self, tenant: str, model_id: str) -> TenantRecord | None: ...

    def holds(self, tenant: str, model_id: str) -> bool: ...

    def let_go(self, tenant: str, model_id: str) -> bool:
        """The tenant no longer holds the model; False if it did not."""

    def held_by_anyone(self, model_id: str) -> bool: ...

    def held_by(self, tenant: str) -> list[str]:
        """The models the tenant holds."""

    def holders(self) -> dict[str, set[str]]:
        """Model id -> the keys of the tenants that hold it."""

    def newest(self, tenant: str, before: tuple[int, str] | None, limit: int) -> list[tuple[int, str]]:
        """(when the tenant took it, in ns; id) of up to `limit` of its models,
        newest first, older than `before`."""

    def graph_rendered(self, tenant: str, model_id: str) -> bool:
        """The model's graph was rendered for this tenant once."""

    def mark_graph_rendered(self, tenant: str, model_id: str) -> None: ...
