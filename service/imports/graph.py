"""The graph document of a stored model, rendered on first request.

Owns `graph_document`: an open descriptor of the model's `graph.json`, made once by a
sandboxed worker that imports the stored model again and renders its resolved
graph (`service.sandbox.worker.graph`), then added to the model's folder by the store.
Rendering a 200,000-node graph costs more than importing it, and most clients
never ask for it, so a POST does not wait for it. Renders of one model for one
tenant in one process are shared; the worker runs in an import slot like any
import, and what it adds to the store counts as an import's bytes
(`--max-import-bytes`, the tenant's quota). Each tenant's first request
renders the graph, even when the store has it already for another tenant
(the second render is dropped): its timing tells nothing of others' views.

A model removed while it renders (a DELETE or an eviction racing the request:
its record gone before its files are read, or its objects while they are
copied) is `NotFound` (404), as when it is removed before.

The model's files are the ones recorded at import: the worker reports the
identity of each file it read (size, mtime, inode, from its own descriptor),
and a file that is not the one recorded is `ModelSourceChanged` (409).
"""

from __future__ import annotations

import asyncio
import os
from contextlib import AsyncExitStack

import anyio.to_thread

from service.errors import ModelSourceChanged, NotFound, bounded
from service.imports.flow import run_worker
from service.sandbox.catalog_format import CONVERTED_FILE_KEY, MODEL_FILE_KEY
from service.sandbox.protocol import WorkerHeader
from service.state import Service
from service.store.records import StoredRecord

GONE = "the model was removed from the store meanwhile"


async def graph_document(service: Service, model_id: str, tenant: str) -> int:
    """An open descriptor of the model's graph document (open before anything
    can remove it: a DELETE or an eviction racing the answer cannot cut it).
    Rendered for the tenant's first request even when the store has it (for
    another tenant): how long a first request takes says nothing of others."""
    if not await anyio.to_thread.run_sync(service.store.graph_rendered, tenant, model_id):
        key = (model_id, tenant)
        render = service.graph_renders.get(key)
        if render is None:
            render = asyncio.ensure_future(_render(service, model_id, tenant))
            service.graph_renders[key] = render
            render.add_done_callback(lambda _: service.graph_renders.pop(key, None))
        await asyncio.shield(render)
    try:
        return await anyio.to_thread.run_sync(service.store.open_graph, model_id)
    except FileNotFoundError:
        raise NotFound(GONE) from None


def _check_sources(record: StoredRecord, header: WorkerHeader) -> None:
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


async def _render(service: Service, model_id: str, tenant: str) -> None:
    record = await anyio.to_thread.run_sync(service.store.read_record, model_id)
    held = await anyio.to_thread.run_sync(service.store.holding, tenant, model_id)
    if record is None or held is None:
        raise NotFound(GONE)
    async with service.limiter.admission(), AsyncExitStack() as stack:
        model_item = record.files[MODEL_FILE_KEY]
        if model_item.in_store:  # an upload: its files are in the store (a remote backend's: copied here)
            files = service.store.model_files(model_id)
            try:
                folder = await anyio.to_thread.run_sync(files.__enter__)
            except FileNotFoundError:  # removed since its record was read: by a DELETE, an eviction, another replica
                raise NotFound(GONE) from None
            stack.push_async_callback(anyio.to_thread.run_sync, files.__exit__, None, None, None)
            model_path, external_dir = str(folder.root / model_item.path), str(folder.upload_external)
        elif service.bucket_root is not None:  # a data root in a bucket: the recorded objects, copied here
            from service.imports.object_import import fetch_recorded  # the fleet extra's obstore

            copies = stack.enter_context(service.store.work_folder())
            limit = service.settings.max_upload_total
            await anyio.to_thread.run_sync(fetch_recorded, service.bucket_root, record, copies, limit)
            model_path, external_dir = str(copies.upload_model), str(copies.upload_external)
        else:
            model_path, external_dir = os.path.join(os.path.realpath(service.settings.data_root), model_item.path), None
        work = stack.enter_context(service.store.work_folder())
        job = service.sandbox.job(
            "graph",
            directory=os.path.dirname(model_path),
            model=os.path.basename(model_path),
            display_name=held.input,  # the name this tenant gave it, never another tenant's
            external_dir=external_dir,
            allow_hard_links=service.settings.allow_hard_links,
            model_id=model_id,
        )
        header = await run_worker(service, job, [work.graph], service.settings.max_import_bytes)
        _check_sources(record, header)
        if not await anyio.to_thread.run_sync(service.store.add_graph, model_id, work.graph, tenant):
            raise NotFound(GONE)
