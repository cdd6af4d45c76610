"""The check stages of one import, in the front end.

Owns `CheckRequest` (the stages a request asks for, and its dimension
bindings) and `complete_checks`: the import's worker runs `schema` and
`security` with the import itself; then, when `shape`, `runtime` or `smoke`
is asked, a check worker of its own runs them on the same inputs
(`service.sandbox.check_run`). Its findings are added to the work
folder's catalogue, after the import worker's, and the summary gets
`checks: {stage: {status, errors, warnings[, reason]}}` and one `verdict`.
Fail closed: a check worker that crashes, hits a limit or breaks the
protocol leaves every stage it did not report `incomplete`, with the reason,
and the verdict is then never `pass`; the import itself stands. A request
with `?dim=` bindings runs the check worker whatever its stages, which reads
them against the model: one the model has no place for is BadInput (400),
before anything is stored.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from service.checks.outcome import IN_CHECK_WORKER, STAGES, DimensionBindingError, Finding, Stage, parse_checks, verdict
from service.errors import BadInput, bounded
from service.sandbox.catalog_format import DIAGNOSTIC_COLUMNS, diagnostic_row
from service.sandbox.check_run import check_worker_results
from service.sandbox.protocol import WorkerHeader, WorkerJob
from service.state import Service


@dataclass(frozen=True, slots=True)
class CheckRequest:
    stages: tuple[Stage, ...]
    dims: tuple[tuple[str, int], ...] = ()


def default_checks(service: Service) -> CheckRequest:
    """What an import runs when the request names no stage (`--default-checks`)."""
    return CheckRequest(parse_checks(service.settings.default_checks))


def _append_findings(catalog: Path, findings: list[Finding]) -> None:
    """Add `findings` to the catalogue's diagnostics, after those it holds."""
    connection = sqlite3.connect(catalog)
    try:
        (last,) = connection.execute("SELECT coalesce(max(seq), -1) FROM diagnostics").fetchone()
        rows = (diagnostic_row(last + 1 + index, finding) for index, finding in enumerate(findings))
        connection.executemany(f"INSERT INTO diagnostics ({DIAGNOSTIC_COLUMNS}) VALUES ({', '.join('?' * 10)})", rows)
        connection.commit()
    finally:
        connection.close()


async def complete_checks(service: Service, job: WorkerJob, header: WorkerHeader, catalog: Path) -> None:
    """Run the check worker's stages of `job` (if any), add their findings to
    `catalog`, and give `header.summary` its `checks` and `verdict`."""
    assert header.summary is not None
    results = [report.result() for report in header.checks]
    if any(stage in IN_CHECK_WORKER for stage in job.checks) or job.dims:
        async with service.limiter.slot():
            try:
                checked = await anyio.to_thread.run_sync(check_worker_results, service.sandbox, job)
            except DimensionBindingError as error:
                raise BadInput(bounded(str(error), 400)) from None  # the request's names, which may be long
        findings = [finding for result in checked for finding in result.findings]
        if findings:
            await anyio.to_thread.run_sync(_append_findings, catalog, findings)
        results += checked
        listed = header.summary["diagnostics"]
        listed["errors"] += sum(result.errors for result in checked)
        listed["warnings"] += sum(result.warnings for result in checked)
        room = max(0, job.summary_items - len(listed["items"]))
        listed["items"] += [finding.as_dict() for finding in findings[:room]]
        counts, truncated = header.summary["counts"], header.summary["truncated"]
        counts["diagnostics"] = counts.get("diagnostics", 0) + len(findings)  # as many as the catalogue holds
        if counts["diagnostics"] > len(listed["items"]) and "diagnostics" not in truncated:
            truncated.append("diagnostics")
    results.sort(key=lambda result: STAGES.index(result.stage))
    header.summary["checks"] = {result.stage: result.as_dict() for result in results}
    header.summary["verdict"] = verdict(results)
