"""A model the store holds, read again: `StoredModel` (a recheck's stages, or the graph render).

A source of the import pipeline (`service.imports.pipeline`) for a model a
tenant holds already: its record and the tenant's own record of it
(NotFound if either is gone), and its files as local paths for the worker:
an upload's from the store (a remote backend's copied here), a path
import's in place in a data-root folder, else its recorded objects copied
here, each checked as fetched. The worker reports the identity of each file
it read, and a file that is not the one recorded is `ModelSourceChanged`
(`check_sources`: size, mtime and inode of a data-root file; the size of a
stored one, immutable content whose local copy a backend may make afresh).
The display name is the one this tenant gave the model, never another's.
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack

import anyio.to_thread

from service.errors import MODEL_GONE, ModelSourceChanged, NotFound, bounded
from service.imports.parts import ImportParts
from service.imports.staging import Staged, Staging
from service.sandbox.protocol import WorkerHeader
from service.store.data_root import fetch_recorded
from service.store.records import StoredRecord, TenantRecord
from service.tasks.catalog_format import CONVERTED_FILE_KEY, MODEL_FILE_KEY


async def held_model(parts: ImportParts, tenant: str, model_id: str) -> tuple[StoredRecord, TenantRecord]:
    """The model's record and the tenant's record of it; NotFound if the model or the holding is gone."""
    record = await anyio.to_thread.run_sync(parts.store.read_record, model_id)
    held = await anyio.to_thread.run_sync(parts.store.holding, tenant, model_id)
    if record is None or held is None:
        raise NotFound(MODEL_GONE)
    return record, held


class StoredModel:
    sent_by_client = False

    def __init__(self, parts: ImportParts, tenant: str, model_id: str, render: bool = False) -> None:
        self.parts = parts
        self.tenant = tenant
        self.model_id = model_id
        self.render = render  # the graph document, rather than check stages
        self.stack = AsyncExitStack()  # what keeps the files in place until the run has settled

    async def stage(self, staging: Staging) -> Staged:
        parts = self.parts
        record, held = await held_model(parts, self.tenant, self.model_id)
        model_item = record.files[MODEL_FILE_KEY]
        staged = Staged(
            display_name=held.input,  # the name this tenant gave it, never another tenant's
            origin="stored",
            directory="",
            model="",
            allow_hard_links=model_item.in_store or parts.settings.allow_hard_links,  # the store's own files
            model_id=self.model_id,
            record=record,
            model_bytes=sum(item.size for key, item in record.files.items() if key != CONVERTED_FILE_KEY),
        )
        if model_item.in_store:  # an upload: its files are in the store (a remote backend's: copied here)
            files = parts.store.model_files(self.model_id)
            try:
                folder = await anyio.to_thread.run_sync(files.__enter__)
            except FileNotFoundError:  # removed since its record was read: by a DELETE, an eviction, another replica
                raise NotFound(MODEL_GONE) from None
            self.stack.push_async_callback(anyio.to_thread.run_sync, files.__exit__, None, None, None)
            model_path, staged.external_dir = str(folder.root / model_item.path), str(folder.upload_external)
        elif (folder_root := parts.data_root.local_folder) is not None:  # read in place: the worker reports each file's identity
            model_path = os.path.join(folder_root, model_item.path)
        else:  # any other root: its objects, each checked as fetched
            await anyio.to_thread.run_sync(fetch_recorded, parts.data_root, record, staging.area, parts.settings.max_upload_total)
            model_path, staged.external_dir = str(staging.area.upload_model), str(staging.area.upload_external)
        staged.directory, staged.model = os.path.split(model_path)
        return staged

    async def settle(self, error: BaseException | None) -> None:
        await self.stack.aclose()


def check_sources(record: StoredRecord, header: WorkerHeader) -> None:
    """The files the worker read are the ones recorded at import (see the module comment)."""
    reports = {report.key: report for report in header.sources}
    for key, item in record.files.items():
        if key == CONVERTED_FILE_KEY:
            continue
        report = reports.get(key)
        copied = item.in_store or bool(item.etag)  # a local copy of stored content, or of an object checked as fetched
        seen = (item.size,) if copied else (item.size, item.mtime_ns, item.inode)
        if report is None or (report.size, report.mtime_ns, report.inode)[: len(seen)] != seen:
            raise ModelSourceChanged(f"the model's file {bounded(repr(key), 200)} changed since the import; import it again")
