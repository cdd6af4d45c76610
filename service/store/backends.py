"""The storage backends the settings name, and the store they make.

Owns `open_store(settings)`: the `Store` over the bytes and the index the
settings describe, over its two seams. Bytes
(`service.store.interface.Blobs`): a folder (`--store PATH`,
`service.store.local.folder_blobs`) or object storage (`--store s3://BUCKET/PREFIX`,
`service.store.s3.bucket_blobs`; a missing bucket is made with `--create-bucket`),
each model's content laid out on them by `service.store.content.Content`;
the SQL index (`service.store.sql.index.SqlIndex`): an SQLite file in the
folder (`service.store.sqlite`), or PostgreSQL (`--database`,
`service.store.postgres`); `--store-backend memory` keeps both in a
temporary folder of the process's, removed at exit. Another backend of
bytes is a module with a `Blobs` class and a branch in `_blobs`. The
object-storage and PostgreSQL clients are the optional `fleet` extra,
imported only when named. `store_over` makes the store of any `Blobs` and
index with the settings' policy (tests give their own). Also
`resumable_uploads_for(settings, store)`: the resumable uploads of that
store (`service.store.uploads`: appended in place in a folder store's
folder, else in parts); and `open_data_root(settings)`: the data root
(`service.store.data_root`), a folder or a bucket.
"""

from __future__ import annotations

import tempfile
import weakref
from pathlib import Path

from service.settings import Settings
from service.settings.kinds import SettingsError
from service.store.content import Content
from service.store.data_root import DataRoot
from service.store.folder_root import FolderRoot
from service.store.interface import Blobs
from service.store.local.folder_blobs import FolderBlobs
from service.store.model_store import Store
from service.store.sql.index import SqlIndex
from service.store.sqlite.sqlite_index import SqliteIndex
from service.store.uploads import ResumableUploads
from service.store.work_area import WorkArea

FLEET_EXTRA = "pip install 'onnx-import-service[fleet]' (obstore, psycopg, psycopg-pool)"


def _blobs(settings: Settings) -> Blobs:
    bucket = settings.store_bucket
    if bucket is None:
        return FolderBlobs(Path(settings.store))
    try:
        from service.store.s3.bucket_blobs import BucketBlobs
        from service.store.s3.local_cache import LocalCache
    except ImportError as error:
        raise SettingsError(f"--store s3://... needs the fleet extra ({error.name} is missing): {FLEET_EXTRA}") from None
    cache = LocalCache(settings.cache_dir / "objects", settings.cache_max_bytes)
    return BucketBlobs(bucket[0], bucket[1], cache, create_bucket=settings.create_bucket)


def _index(settings: Settings) -> SqlIndex:
    if not settings.database:
        return SqliteIndex(Path(settings.store))
    try:
        from service.store.postgres.postgres_index import PostgresIndex
    except ImportError as error:
        raise SettingsError(f"--database needs the fleet extra ({error.name} is missing): {FLEET_EXTRA}") from None
    # workers + 8 connections per replica in all, shared by its front-end processes
    folder = Path(settings.store) if settings.store_bucket is None else None  # a folder store's older layouts, carried over
    return PostgresIndex(settings.database, pool_size=max(2, -(-(settings.workers + 8) // settings.http_workers)), folder=folder)


def open_data_root(settings: Settings) -> DataRoot:
    """The data root the settings name: a folder, or a bucket (`--data-root s3://...`)."""
    bucket = settings.data_root_bucket
    if bucket is None:
        return FolderRoot(settings.data_root)
    try:
        from service.store.s3.bucket_root import BucketRoot
    except ImportError as error:
        raise SettingsError(f"--data-root s3://... needs the fleet extra ({error.name} is missing): {FLEET_EXTRA}") from None
    return BucketRoot(*bucket)


def open_store(settings: Settings) -> Store:
    """The store the settings describe (not opened yet: `Store.open`)."""
    work_area = WorkArea(settings.local_root / "tmp")  # the local work area, on this machine for every backend
    if settings.store_backend != "memory":
        return store_over(settings, _blobs(settings), _index(settings), work_area)
    settings.local_root.mkdir(parents=True, exist_ok=True)  # a folder beside the work area (so puts are renames)
    temporary = tempfile.TemporaryDirectory(prefix="memory-store-", dir=settings.local_root)
    store = store_over(settings, FolderBlobs(Path(temporary.name)), SqliteIndex(Path(temporary.name)), work_area)
    weakref.finalize(store, temporary.cleanup)  # with the store, or at exit
    return store


def store_over(settings: Settings, blobs: Blobs, index: SqlIndex, work_area: WorkArea) -> Store:
    """The store of these bytes and this index, with the settings' caps and quotas."""
    return Store(
        Content(blobs, work_area),
        index,
        work_area,
        settings.store_max_bytes,
        min_free=settings.store_min_free,
        max_import_bytes=settings.max_import_bytes,
        tenant_max_bytes=settings.tenant_max_bytes,
        tenant_max_models=settings.tenant_max_models,
        tenant_max_reserved=settings.tenant_max_reserved,
        local_reads=blobs.local and isinstance(index, SqliteIndex),
    )


def resumable_uploads_for(settings: Settings, store: Store) -> ResumableUploads:
    """The uploads of `store`: in its bytes and its index; appended in place where the bytes are a folder's files."""
    blobs = store.content.blobs
    in_place = blobs.root if isinstance(blobs, FolderBlobs) else None
    return ResumableUploads(store, settings.upload_expiry, settings.max_open_uploads, in_place=in_place)
