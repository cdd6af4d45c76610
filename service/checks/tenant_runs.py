"""Each tenant's own check runs of a model, as an import or a recheck leaves them: `keep_runs`.

A run's `CheckRuns` (`service.checks.requested.complete_checks`) laid over
the tenant's earlier runs and kept beside its record in the store's index.
A tenant never sees or reuses another tenant's runs of the same content: a
re-POST of bytes it holds runs what it asks that it has not run
(`service.checks.runs.stages_missing`), and content another tenant imported
first is checked like new.
"""

from __future__ import annotations

import anyio.to_thread

from service.checks.runs import CheckRuns, merged
from service.errors import MODEL_GONE, NotFound
from service.store.model_store import Store


async def keep_runs(store: Store, tenant: str, model_id: str, runs: CheckRuns) -> CheckRuns:
    """`runs` laid over the tenant's earlier runs of the model, and kept (one
    change under the store's lock: `Store.update_checks`); NotFound if the tenant let it go meanwhile."""
    kept: list[CheckRuns] = []

    def lay_over(earlier: bytes | None) -> bytes:
        kept.append(merged(CheckRuns.from_bytes(earlier), runs))
        return kept[-1].to_bytes()

    if await anyio.to_thread.run_sync(store.update_checks, tenant, model_id, lay_over) is None:
        raise NotFound(MODEL_GONE)
    return kept[-1]
