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
and a file that is not the one recorded is `ModelSourceChanged` (409)
(`service.imports.stored_model`).
"""

from __future__ import annotations

import asyncio
import os
from contextlib import AsyncExitStack

import anyio.to_thread

from service.errors import NotFound
from service.imports.flow import run_worker
from service.imports.parts import ImportParts
from service.imports.stored_model import GONE, check_sources, held_model, stored_model_files


async def graph_document(parts: ImportParts, model_id: str, tenant: str) -> int:
    """An open descriptor of the model's graph document (open before anything
    can remove it: a DELETE or an eviction racing the answer cannot cut it).
    Rendered for the tenant's first request even when the store has it (for
    another tenant): how long a first request takes says nothing of others."""
    if not await anyio.to_thread.run_sync(parts.store.graph_rendered, tenant, model_id):
        key = (model_id, tenant)
        render = parts.graph_renders.get(key)
        if render is None:
            render = asyncio.ensure_future(_render(parts, model_id, tenant))
            parts.graph_renders[key] = render
            render.add_done_callback(lambda _: parts.graph_renders.pop(key, None))
        await asyncio.shield(render)
    try:
        return await anyio.to_thread.run_sync(parts.store.open_graph, model_id)
    except FileNotFoundError:
        raise NotFound(GONE) from None


async def _render(parts: ImportParts, model_id: str, tenant: str) -> None:
    record, held = await held_model(parts, tenant, model_id)
    async with parts.limiter.admission(), AsyncExitStack() as stack:
        model_path, external_dir = await stored_model_files(parts, model_id, record, stack)
        work = stack.enter_context(parts.store.work_folder())
        job = parts.sandbox.job(
            "graph",
            directory=os.path.dirname(model_path),
            model=os.path.basename(model_path),
            display_name=held.input,  # the name this tenant gave it, never another tenant's
            external_dir=external_dir,
            allow_hard_links=parts.settings.allow_hard_links,
            model_id=model_id,
        )
        header = await run_worker(parts, job, [work.graph], parts.settings.max_import_bytes)
        check_sources(record, header)
        if not await anyio.to_thread.run_sync(parts.store.add_graph, model_id, work.graph, tenant):
            raise NotFound(GONE)
