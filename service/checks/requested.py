"""The check stages of one import, in the front end.

Owns `CheckRequest` (the stages a request asks for, and its dimension
bindings), `default_checks` and `complete_checks`: the import's worker
runs `schema` and `security` with the import itself; when `shape`, `runtime`
or `smoke` is asked, a check worker of its own runs them on the same inputs
(`service.imports.workers`: the check worker decides for itself what the
security estimate lets run, and reads no answer of the import worker's).
Its findings are added to the work folder's
catalogue, after the import worker's (`service.checks.findings`), with
the types `shape` inferred for undeclared values (`service.store.catalog_shapes`), and
every stage's result, as the workers reported it (its time too), makes this
run's `CheckRuns`, from which the summary's `checks`, `verdict` and
`diagnostics` are drawn (`service.checks.runs.summary_for`): the worker's
summary is not patched. Fail closed: a check worker that crashes, hits a
limit or breaks the protocol leaves every stage it did not report
`incomplete`, with the reason, and the verdict is then never `pass`; the
import itself stands. A request with `?dim=` bindings runs the check worker
whatever its stages, which reads them against the model: one the model has
no place for is BadInput (400), before anything is stored.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from service.checks.findings import append_findings, findings_in
from service.checks.outcome import STAGES, Stage, StageResult, parse_checks
from service.checks.runs import CheckRuns, SmokeAsked, now_iso, runs_of
from service.sandbox.protocol import WorkerHeader, WorkerJob
from service.settings import Settings
from service.store.catalog_shapes import record_inferred


@dataclass(frozen=True, slots=True)
class CheckRequest:
    """The stages asked for; `dims`, the request's own bindings (one the model
    has no place for is refused); `soft_dims`, bindings a registry gives (its
    setting, a version's tag, the model signature's input shapes): each used
    where the model has a free place for it and no `dims` binding, else left."""

    stages: tuple[Stage, ...]
    dims: tuple[tuple[str, int], ...] = ()
    soft_dims: tuple[tuple[str, int], ...] = ()


def default_checks(settings: Settings) -> CheckRequest:
    """What an import runs when the request names no stage (`--default-checks`)."""
    return CheckRequest(parse_checks(settings.default_checks))


async def complete_checks(job: WorkerJob, header: WorkerHeader, catalog: Path, checked: list[StageResult]) -> CheckRuns:
    """Add the check worker's findings (`checked`, its results of `job`) to
    `catalog`, after the import worker's; every stage `job` ran, with its
    findings, as this run's `CheckRuns`."""
    results = [report.result() for report in header.checks]
    if checked:
        findings = [finding for result in checked for finding in result.findings]
        if findings:
            await anyio.to_thread.run_sync(append_findings, catalog, findings)
        inferred = next((result.inferred for result in checked if result.inferred), "")
        if inferred:
            await anyio.to_thread.run_sync(record_inferred, catalog, inferred)
        results += checked
    results.sort(key=lambda result: STAGES.index(result.stage))
    asked = SmokeAsked(job.dims, job.soft_dims, job.smoke_second_dim)
    return runs_of(results, await anyio.to_thread.run_sync(findings_in, catalog), asked, now_iso())
