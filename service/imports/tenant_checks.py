"""Each tenant's own check runs of a model, as an import or a recheck leaves them.

Owns `import_runs` (what a worker's stages found, read back from its work
folder's catalogue, as a `CheckRuns`) and `keep_runs` (laid over the
tenant's earlier runs and kept beside its record). The import flow
(`service.imports.flow`) and the recheck (`service.imports.recheck`) use them.

A tenant never sees or reuses another tenant's runs of the same content: a
re-POST of bytes it holds runs what it asks that it has not run
(`service.checks.runs.stages_missing`), and content another tenant imported
first is checked like new.
"""

from __future__ import annotations

from pathlib import Path

import anyio.to_thread

from service.checks.outcome import MAX_FINDINGS_PER_STAGE, STAGES, Finding, results_of
from service.checks.runs import CheckRuns, merged, now_iso, runs_of
from service.errors import NotFound
from service.imports.stored_model import GONE
from service.sandbox.protocol import WorkerHeader, WorkerJob
from service.state import Service
from service.store.catalog import Catalog

FINDINGS_READ = MAX_FINDINGS_PER_STAGE * len(STAGES)


def findings_in(catalog: Path) -> list[Finding]:
    """The findings a work folder's catalogue holds, in order (at most
    MAX_FINDINGS_PER_STAGE of a stage: the stage's counts say how many more)."""
    opened = Catalog(catalog)
    try:
        rows = opened.diagnostics(-1, FINDINGS_READ * 2, None)
    finally:
        opened.close()
    kept: list[Finding] = []
    per_stage: dict[str, int] = {}
    for row in rows:
        finding = Finding.from_dict(row)
        per_stage[finding.stage] = per_stage.get(finding.stage, 0) + 1
        if per_stage[finding.stage] <= MAX_FINDINGS_PER_STAGE:
            kept.append(finding)
    return kept


async def import_runs(job: WorkerJob, header: WorkerHeader, catalog: Path) -> CheckRuns:
    """The stages `job` ran (`complete_checks` done) and their findings, as this tenant's runs."""
    assert header.summary is not None
    findings = await anyio.to_thread.run_sync(findings_in, catalog)
    return runs_of(results_of(header.summary), findings, job.dims, now_iso())


async def keep_runs(service: Service, tenant: str, model_id: str, runs: CheckRuns) -> CheckRuns:
    """`runs` laid over the tenant's earlier runs of the model, and kept; NotFound if the tenant let it go meanwhile."""
    earlier = CheckRuns.from_bytes(await anyio.to_thread.run_sync(service.store.checks, tenant, model_id))
    now = merged(earlier, runs)
    if not await anyio.to_thread.run_sync(service.store.keep_checks, tenant, model_id, now.to_bytes()):
        raise NotFound(GONE)
    return now
