"""What an import answers: `Imported`, and a stored model's summary as one tenant sees it.

Owns `Imported` (the id, whether the model is new for the tenant, its
summary), `stored_summary` (the stored summary as one tenant is answered
it: under the name its request gave the model and the label its holding
has, with its own check runs, never another tenant's), `rename` (a holding
given the name and label a request gave) and `held_again` (a model the
tenant holds, imported again: this import's runs laid over its earlier
ones, its name and label over the holding's, and its summary). The pipeline (`service.imports.pipeline`) and the routes use them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import anyio.to_thread

from service.checks.runs import CheckRuns
from service.checks.tenant_runs import keep_runs
from service.errors import NotFound
from service.imports.naming import Naming
from service.imports.parts import ImportParts
from service.imports.summary import tenant_view


@dataclass(frozen=True, slots=True)
class Imported:
    model_id: str
    created: bool  # new for this tenant (201), or held already (200)
    summary: bytes  # the stored summary, under the name this request gave the model (empty for a graph render)


async def held_again(parts: ImportParts, tenant: str, model_id: str, display_name: str, runs: CheckRuns, naming: Naming) -> Imported | None:
    """A model the tenant holds, imported again: this import's stages laid over
    its earlier runs, the name and label it gave (if any) over the holding's, and
    its summary (200). None if the tenant does not hold it, or it went meanwhile
    (a DELETE, an eviction): the caller commits it as new."""
    if not await anyio.to_thread.run_sync(parts.store.visible, tenant, model_id):
        return None
    try:
        await keep_runs(parts.store, tenant, model_id, runs)
        await rename(parts, tenant, model_id, naming)
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
    label = view.holding.label if view.holding is not None else ""
    return tenant_view(json.loads(view.summary), display_name, CheckRuns.from_bytes(view.runs), label)


async def rename(parts: ImportParts, tenant: str, model_id: str, naming: Naming) -> None:
    """The tenant's holding of the model takes the name and the label `naming` gives (nothing when it gives neither)."""
    if naming.given:
        await anyio.to_thread.run_sync(parts.store.rename, tenant, model_id, naming.name, naming.label)
