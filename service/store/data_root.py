"""The data root: where server-side models are read from, read-only (`--data-root`).

Owns `DataRoot`, the one interface a data root implements (a folder on this
machine, `service.store.folder_root.FolderRoot`; a bucket,
`service.store.s3.bucket_root.BucketRoot`), and what every implementation
shares: `key_of` (the key a client's path names, under a folder's rules),
`beside` (the key of an external data file next to its model's), `Entry`
(one item of a listing), `FetchedObject` (a file copied out, with its
identity) and `fetch_recorded` (a path import's files copied again, each
checked to be the one recorded). No route or use case asks which kind a
root is: they call these methods. A root that is a folder on this machine
says so (`local_folder`): its files are read in place by the worker rather
than fetched (`service.imports.sources.under_data_root` for an import,
`service.imports.sources.stored` for a later read).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from service.errors import ImportTooLarge, ModelSourceChanged
from service.store.byte_source import ByteSource
from service.store.client_paths import check_relative_path
from service.store.layout import ModelFolder
from service.store.records import SourceFile, StoredRecord
from service.tasks.catalog_format import CONVERTED_FILE_KEY, MODEL_FILE_KEY


@dataclass(frozen=True, slots=True)
class Entry:
    name: str  # the last segment
    is_dir: bool
    size: int  # 0 for a folder


@dataclass(frozen=True, slots=True)
class FetchedObject:
    key: str  # below the data root
    etag: str  # the bucket's ETag; empty for a folder's file
    version: str
    size: int
    sha256: str

    def source(self) -> SourceFile:
        """The record's entry of this object."""
        return SourceFile(
            path=self.key, in_store=False, size=self.size, mtime_ns=0, inode=0, etag=self.etag, version=self.version, sha256=self.sha256
        )


class DataRoot(Protocol):
    @property
    def url(self) -> str: ...  # for people and for matching artifact URIs: the folder's path, or s3://BUCKET/PREFIX

    @property
    def local_reads(self) -> bool: ...  # a read costs microseconds (a local folder), not a round trip

    @property
    def local_folder(self) -> str | None:
        """The folder on this machine the root is, whose files a worker may
        read in place (links resolved: what records' paths are below); None
        for a root whose files are only fetched."""

    def open(self, item: SourceFile) -> ByteSource:
        """The recorded file's bytes, for as long as it is the one recorded
        (TensorSourceChanged otherwise, TensorSourceGone if it went)."""

    def fetch(self, key: str, target: Path, max_bytes: int, expected: SourceFile | None = None) -> FetchedObject:
        """Copy `key` to `target` (ImportTooLarge past `max_bytes`, NotFound if
        absent); with `expected`, only that very file (else ModelSourceChanged)."""

    def list(self, prefix: str) -> list[Entry]:
        """The entries directly below the folder `prefix` (empty if there is none)."""

    def close(self) -> None: ...


def key_of(path: str) -> str:
    """The key a client's path names (PathRefused where a folder's path would be refused)."""
    return posixpath.normpath(check_relative_path(path))


def beside(model_key: str, location: str) -> str:
    """The key of an external data file (its location checked by the importer: relative, no `..`)."""
    return posixpath.normpath(posixpath.join(posixpath.dirname(model_key), location))


def fetch_recorded(root: DataRoot, record: StoredRecord, folder: ModelFolder, max_bytes: int) -> None:
    """Copy the model's recorded objects into `folder` (the model as files/model.onnx, its
    external data below files/external), each only if it is still the one recorded."""
    left = max_bytes
    for name, item in record.files.items():
        if name == CONVERTED_FILE_KEY:
            continue
        target = folder.upload_model if name == MODEL_FILE_KEY else folder.upload_external / name
        fetched = root.fetch(item.path, target, left, expected=item)
        if fetched.sha256 != item.sha256:
            raise ModelSourceChanged(f"the object {item.path!r} changed since the import; import it again")
        left -= fetched.size
        if left < 0:
            raise ImportTooLarge("the model's objects take more than the bytes one import may read")
