"""A check worker's run, as stage results: `check_worker_results`.

Runs the stages of a job that need onnx or onnxruntime (`shape`, `runtime`,
`smoke`) in a check worker of their own (`Sandbox.run_checks`), and gives one
`StageResult` per stage asked, in order: the one the worker reported, or,
fail closed, `incomplete` with the reason the worker did not deliver it (it
crashed, ran out of memory, CPU or time, or could not read the model).
Where `runtime` or `smoke` is asked, a worker of task "externals" first
reads which external data files the model names (the model file alone), and
the check worker binds those for onnxruntime (`WorkerJob.mapped_files`,
`service.sandbox.worker.bound_files`).
A job with dimension bindings runs the worker even when it asks for none of
those stages: the bindings are read against the model there, and one the
model has no place for raises DimensionBindingError (a usage error).
Shared by the service's imports and the `onnx-import` command.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from service.checks.outcome import DIMENSION_BINDING, IN_CHECK_WORKER, DimensionBindingError, Stage, StageResult, incomplete
from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import Sandbox, WorkerControl
from service.sandbox.worker.confinement import MINIMAL_ROOT

log = logging.getLogger("service.sandbox")


def check_worker_results(sandbox: Sandbox, job: WorkerJob, control: WorkerControl | None = None) -> list[StageResult]:
    """Run `job`'s check-worker stages (blocking; call from a thread); raise
    DimensionBindingError for a binding of `job.dims` the model has no place for."""
    wanted = [stage for stage in job.checks if stage in IN_CHECK_WORKER]
    if not wanted and not job.dims:
        return []
    check_job = replace(job, task="checks", hash_sources=False, mapped_files=_external_files(sandbox, job, wanted, control))
    reports, outcome = sandbox.run_checks(check_job, control)
    log.info("%s", outcome.logged("checks", job.display_name))
    if outcome.error is not None and outcome.error.kind == DIMENSION_BINDING:
        raise DimensionBindingError(outcome.error.message)
    delivered: dict[str, StageResult] = {}
    for report in reports:
        try:
            delivered[report.stage] = report.result()
        except (ValueError, KeyError, TypeError):
            continue  # a broken report: the stage stays incomplete
    if outcome.status == "ok":
        why = "the check worker did not report this stage"
    elif outcome.error is not None:
        why = f"the check worker could not read the model: {outcome.error.message}"
    else:
        why = outcome.detail.replace("the import worker", "the check worker").replace("the import", "the check worker") or outcome.status
    return [delivered.get(stage) or incomplete(stage, why) for stage in wanted]


def _external_files(sandbox: Sandbox, job: WorkerJob, wanted: list[Stage], control: WorkerControl | None) -> tuple[str, ...]:
    """The external files the model names, as a sandboxed worker reads them
    (task "externals": the model file only), for the check worker to bind for
    onnxruntime; none where no stage hands the model to onnxruntime, where
    the workers have no minimal root to bind them in, or where that worker
    could not tell (the check worker then hands the weights over)."""
    if ("runtime" not in wanted and "smoke" not in wanted) or MINIMAL_ROOT not in sandbox.worker_sandbox:
        return ()  # no stage for onnxruntime, or no mount namespace to bind files in (the last probe's walls)
    outcome = sandbox.run(replace(job, task="externals", hash_sources=False), [], control=control)
    log.info("%s", outcome.logged("externals", job.display_name))
    if outcome.status != "ok" or outcome.header is None:
        return ()
    return tuple(outcome.header.external_files)
