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
    """`runs` laid over the tenant's earlier runs of the model, and kept (one
    change under the store's lock: `Store.update_checks`); NotFound if the tenant let it go meanwhile."""
    kept: list[CheckRuns] = []

    def lay_over(earlier: bytes | None) -> bytes:
        kept.append(merged(CheckRuns.from_bytes(earlier), runs))
        return kept[-1].to_bytes()

    if await anyio.to_thread.run_sync(parts.store.update_checks, tenant, model_id, lay_over) is None:
        raise NotFound(GONE)
    return kept[-1]


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


async def stored_summary(parts: ImportParts, tenant: str, model_id: str, display_name: str | None = None) -> bytes:
    """The stored summary as `tenant` sees it: under the name this request
    gave the model (`display_name`; None: the name the tenant gave it when it
    took it), with the tenant's own check runs (another client's name and
    checks for the same bytes are never shown); marks the model used. A
    holding from before per-tenant runs shows the checks stored with the
    content. One call of the store (`Store.summary_for`)."""
    view = await anyio.to_thread.run_sync(parts.store.summary_for, tenant, model_id)
    if display_name is None:
        display_name = view.holding.input if view.holding is not None else ""
    return tenant_view(json.loads(view.summary), display_name, CheckRuns.from_bytes(view.runs))
