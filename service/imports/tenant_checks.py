"""Each tenant's own check runs of a model, as an import or a recheck leaves them.

Owns `keep_runs`: a run's `CheckRuns` (`service.imports.checks.complete_checks`)
laid over the tenant's earlier runs and kept beside its record. The import flow
(`service.imports.flow`) and the recheck (`service.imports.recheck`) use it.

A tenant never sees or reuses another tenant's runs of the same content: a
re-POST of bytes it holds runs what it asks that it has not run
(`service.checks.runs.stages_missing`), and content another tenant imported
first is checked like new.
"""

from __future__ import annotations

import anyio.to_thread

from service.checks.runs import CheckRuns, merged
from service.errors import NotFound
from service.imports.parts import ImportParts
from service.imports.stored_model import GONE


async def keep_runs(parts: ImportParts, tenant: str, model_id: str, runs: CheckRuns) -> CheckRuns:
    """`runs` laid over the tenant's earlier runs of the model, and kept; NotFound if the tenant let it go meanwhile."""
    earlier = CheckRuns.from_bytes(await anyio.to_thread.run_sync(parts.store.checks, tenant, model_id))
    now = merged(earlier, runs)
    if not await anyio.to_thread.run_sync(parts.store.keep_checks, tenant, model_id, now.to_bytes()):
        raise NotFound(GONE)
    return now
