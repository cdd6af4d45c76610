"""The graph document of a stored model, rendered on first request.

Owns `graph_document`: the path of the model's `graph.json`, made once by a
sandboxed worker that imports the stored model again and renders its resolved
graph (`service.graph_json`), then added to the model's folder by the store.
Rendering a 200,000-node graph costs more than importing it, and most clients
never ask for it, so a POST does not wait for it. Renders of one model in one
process are shared; the worker runs in an import slot like any import.

The model's files are the ones recorded at import: each must still have the
identity it had then (size, mtime, inode), else 409 `model-source-changed`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import anyio.to_thread

from service.catalog import MODEL_FILE_KEY
from service.import_flow import run_worker
from service.problems import ProblemError
from service.record import SourceFile, StoredRecord
from service.state import Service
from service.store import ModelFolder


async def graph_document(service: Service, model_id: str) -> Path:
    folder = service.store.folder(model_id)
    if folder.graph.is_file():
        return folder.graph
    render = service.graph_renders.get(model_id)
    if render is None:
        render = asyncio.ensure_future(_render(service, model_id, folder))
        service.graph_renders[model_id] = render
        render.add_done_callback(lambda _: service.graph_renders.pop(model_id, None))
    await asyncio.shield(render)
    return folder.graph


def _source_path(folder: ModelFolder, item: SourceFile) -> str:
    return str(folder.root / item.path) if item.in_store else item.path


def _check_sources(folder: ModelFolder, record: StoredRecord) -> None:
    for key, item in record.files.items():
        try:
            info = os.stat(_source_path(folder, item))
        except FileNotFoundError:
            raise ProblemError("model-source-changed", f"the model's file {key!r} is gone; import the model again") from None
        if (info.st_size, info.st_mtime_ns, info.st_ino) != (item.size, item.mtime_ns, item.inode):
            raise ProblemError("model-source-changed", f"the model's file {key!r} changed since the import; import the model again")


async def _render(service: Service, model_id: str, folder: ModelFolder) -> None:
    record = await anyio.to_thread.run_sync(service.store.read_record, model_id)
    if record is None:
        raise ProblemError("not-found", "the model was removed from the store meanwhile")
    await anyio.to_thread.run_sync(_check_sources, folder, record)
    model_path = _source_path(folder, record.files[MODEL_FILE_KEY])
    external_dir = str(folder.upload_external) if record.files[MODEL_FILE_KEY].in_store else None
    async with service.limiter.admission():
        with service.store.work_folder() as work:
            job = service.sandbox.job(
                "graph",
                directory=os.path.dirname(model_path),
                model=os.path.basename(model_path),
                display_name=record.input,
                external_dir=external_dir,
                model_id=model_id,
            )
            await run_worker(service, job, [work.graph])
            if not await anyio.to_thread.run_sync(service.store.add_graph, model_id, work.graph):
                raise ProblemError("not-found", "the model was removed from the store meanwhile")
