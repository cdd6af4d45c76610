"""Each tenant's own view of a model: its check runs and its summary.

Owns `keep_runs` (a run's `CheckRuns`, from `service.imports.checks.complete_checks`,
laid over the tenant's earlier runs and kept beside its record),
`stored_summary` (the stored summary as one tenant is answered it: under the
name its request gave the model, with its own runs) and `held_again` (a
model the tenant holds, imported again: this import's runs laid over its
earlier ones, and its summary). The pipeline (`service.imports.pipeline`)
and the routes use them.

A tenant never sees or reuses another tenant's runs of the same content: a
re-POST of bytes it holds runs what it asks that it has not run
(`service.checks.runs.stages_missing`), and content another tenant imported
first is checked like new.
"""

from __future__ import annotations

import json

import anyio.to_thread

from service.checks.runs import CheckRuns, merged
from service.errors import NotFound
from service.imports.parts import ImportParts
from service.imports.results import Imported
from service.imports.sources.stored import GONE
from service.imports.summary import tenant_view


async def keep_runs(parts: ImportParts, tenant: str, model_id: str, runs: CheckRuns) -> CheckRuns:
    """`runs` laid over the tenant's earlier runs of the model, and kept; NotFound if the tenant let it go meanwhile."""
    earlier = CheckRuns.from_bytes(await anyio.to_thread.run_sync(parts.store.checks, tenant, model_id))
    now = merged(earlier, runs)
    if not await anyio.to_thread.run_sync(parts.store.keep_checks, tenant, model_id, now.to_bytes()):
        raise NotFound(GONE)
    return now


async def held_again(parts: ImportParts, tenant: str, model_id: str, display_name: str, runs: CheckRuns) -> Imported | None:
    """A model the tenant holds, imported again: this import's stages laid over
    its earlier runs, and its summary (200). None if the tenant does not hold
    it, or it went meanwhile (a DELETE, an eviction): the caller commits it as new."""
    if not await anyio.to_thread.run_sync(parts.store.visible, tenant, model_id):
        return None
    try:
        await keep_runs(parts, tenant, model_id, runs)
        return Imported(model_id, False, await stored_summary(parts, tenant, model_id, display_name))
    except NotFound:
        return None


async def stored_summary(parts: ImportParts, tenant: str, model_id: str, display_name: str) -> bytes:
    """The stored summary as `tenant` sees it: under the name this request
    gave the model, with the tenant's own check runs (another client's name
    and checks for the same bytes are never shown); marks the model used. A
    holding from before per-tenant runs shows the checks stored with the content."""
    try:
        body = await anyio.to_thread.run_sync(parts.store.summary, model_id)
    except FileNotFoundError:
        raise NotFound("the model was evicted from the store meanwhile; post it again") from None
    runs = CheckRuns.from_bytes(await anyio.to_thread.run_sync(parts.store.checks, tenant, model_id))
    await anyio.to_thread.run_sync(parts.store.touch, model_id)
    return tenant_view(json.loads(body), display_name, runs)
