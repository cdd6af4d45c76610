"""A stored model's files, for a worker to read again, and the check that they
are the ones recorded.

Owns `held_model` (the record of a model a tenant holds, and the tenant's
own record of it; NotFound if either is gone), `stored_model_files` (the model and its external data as local paths:
an upload's from the store, a remote backend's copied here; a path import's
in place in a data root folder, else its recorded objects copied here) and
`check_sources` (the files the worker read are the ones recorded at import:
`ModelSourceChanged` otherwise). The graph render (`service.imports.graph`)
and the tenant's check runs (`service.imports.tenant_checks`) read a stored
model this way.
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack

import anyio.to_thread

from service.errors import ModelSourceChanged, NotFound, bounded
from service.imports.parts import ImportParts
from service.sandbox.catalog_format import CONVERTED_FILE_KEY, MODEL_FILE_KEY
from service.sandbox.protocol import WorkerHeader
from service.store.data_root import fetch_recorded
from service.store.folder_root import FolderRoot
from service.store.records import StoredRecord, TenantRecord

GONE = "the model was removed from the store meanwhile"


async def held_model(parts: ImportParts, tenant: str, model_id: str) -> tuple[StoredRecord, TenantRecord]:
    """The model's record and the tenant's record of it; NotFound if the model or the holding is gone."""
    record = await anyio.to_thread.run_sync(parts.store.read_record, model_id)
    held = await anyio.to_thread.run_sync(parts.store.holding, tenant, model_id)
    if record is None or held is None:
        raise NotFound(GONE)
    return record, held


async def stored_model_files(parts: ImportParts, model_id: str, record: StoredRecord, stack: AsyncExitStack) -> tuple[str, str | None]:
    """(the model file's path, its external data folder or None) for a worker,
    valid until `stack` closes. NotFound if the model goes meanwhile."""
    model_item = record.files[MODEL_FILE_KEY]
    if model_item.in_store:  # an upload: its files are in the store (a remote backend's: copied here)
        files = parts.store.model_files(model_id)
        try:
            folder = await anyio.to_thread.run_sync(files.__enter__)
        except FileNotFoundError:  # removed since its record was read: by a DELETE, an eviction, another replica
            raise NotFound(GONE) from None
        stack.push_async_callback(anyio.to_thread.run_sync, files.__exit__, None, None, None)
        return str(folder.root / model_item.path), str(folder.upload_external)
    root = parts.data_root
    if isinstance(root, FolderRoot):  # read in place: the worker reports each file's identity (`check_sources`)
        return os.path.join(root.url, model_item.path), None
    copies = stack.enter_context(parts.store.work_folder())  # any other root: its objects, each checked as fetched
    await anyio.to_thread.run_sync(fetch_recorded, root, record, copies, parts.settings.max_upload_total)
    return str(copies.upload_model), str(copies.upload_external)


def check_sources(record: StoredRecord, header: WorkerHeader) -> None:
    """The files the worker read are the ones recorded at import (its own
    fstat of what it read: size, mtime and inode of a data-root file; the size
    of a stored one, immutable content whose local copy a backend may make afresh)."""
    reports = {report.key: report for report in header.sources}
    for key, item in record.files.items():
        if key == CONVERTED_FILE_KEY:
            continue
        report = reports.get(key)
        copied = item.in_store or bool(item.etag)  # a local copy of stored content, or of an object checked as fetched
        seen = (item.size,) if copied else (item.size, item.mtime_ns, item.inode)
        if report is None or (report.size, report.mtime_ns, report.inode)[: len(seen)] != seen:
            raise ModelSourceChanged(f"the model's file {bounded(repr(key), 200)} changed since the import; import it again")
