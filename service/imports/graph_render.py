"""The graph document of a stored model, rendered on first request.

Owns `graph_document`: an open descriptor of the model's `graph.json`, made
once by a sandboxed worker that imports the stored model again and renders
its resolved graph (`service.tasks.graph_document`), through the import
pipeline (`service.imports.pipeline`, source `StoredModel` with `render`),
then added to the model's folder by the store. Rendering a 200,000-node
graph costs more than importing it, and most clients never ask for it, so a
POST does not wait for it. Renders of one model for one tenant in one
process are shared, and a render goes on when the request that started it
leaves (its result is kept for that tenant); the worker runs in an import
place like any import, and what it adds to the store counts as an import's
bytes (`--max-import-bytes`, the tenant's quota). Each tenant's first
request renders the graph, even when the store has it already for another
tenant (the second render is dropped): its timing tells nothing of others' views.

A model removed while it renders (a DELETE or an eviction racing the request:
its record gone before its files are read, or its objects while they are
copied) is `NotFound` (404), as when it is removed before. The model's files
must be the ones recorded at import (`ModelSourceChanged`, 409, otherwise).
"""

from __future__ import annotations

import asyncio

import anyio.to_thread

from service.errors import MODEL_GONE, NotFound
from service.imports import pipeline
from service.imports.parts import ImportParts
from service.imports.sources.stored import StoredModel


async def graph_document(parts: ImportParts, model_id: str, tenant: str) -> int:
    """An open descriptor of the model's graph document (open before anything
    can remove it: a DELETE or an eviction racing the answer cannot cut it).
    Rendered for the tenant's first request even when the store has it (for
    another tenant): how long a first request takes says nothing of others."""
    if not await anyio.to_thread.run_sync(parts.store.graph_rendered, tenant, model_id):
        key = (model_id, tenant)
        render = parts.graph_renders.get(key)
        if render is None:
            render = asyncio.ensure_future(pipeline.run(parts, StoredModel(parts, tenant, model_id, render=True), tenant))
            parts.graph_renders[key] = render
            render.add_done_callback(lambda _: parts.graph_renders.pop(key, None))
        await asyncio.shield(render)
    try:
        return await anyio.to_thread.run_sync(parts.store.open_graph, model_id)
    except FileNotFoundError:
        raise NotFound(MODEL_GONE) from None
