"""The storage interface: the two seams the store's policy
(`service.store.model_store`) stands on, which may be swapped apart.

`Blobs` holds bytes: immutable objects by key, below one root (a folder on
this machine, `service.store.local.folder_blobs`; a bucket's prefix,
`service.store.s3.bucket_blobs`). Its operations: put a file, read a range, a
local file to open or send, copy one out, list, delete. What the objects
are (a model's uploaded files, summary, catalogue, converted bytes, graph;
a resumable upload's parts) and where each goes is `service.store.content`'s
and `service.store.uploads`', written once over any `Blobs`. The other seam
is the SQL index (`service.store.sql.index.SqlIndex`): what changes (the
records, which tenant holds which model, the bytes each takes and in all,
the order of last use, the uploads' rows, and the lock that serializes
changes), one set of queries and one schema over a database, an SQLite
file beside a folder store (`service.store.sqlite`) or PostgreSQL for a
fleet's (`service.store.postgres`).

Rules every backend keeps: an object is put whole at a key of its own and
never changes after; a model is stored when the index has its record, which
names the place and is written after the content is in place, and dropped
before it is removed; every change of the index happens under
`SqlIndex.locked()`; a call that cannot reach its database or its object
storage raises `StorageUnavailable`, saying what is at fault.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from service.store.byte_source import ByteSource
from service.store.records import SourceFile


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
