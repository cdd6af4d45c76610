"""Which stage runs where, inside a worker: `import_stages` and `send_checks`.

The import's worker runs `schema` (the importer's operator check) and
`security` (our own code) on the model it has opened; their findings go into
the catalogue it sends. A check worker of its own (task "checks") runs
`shape`, `runtime` and `smoke`, the stages that hand the model to onnx and
onnxruntime: once the model and its external files are open and mapped, the
worker has narrowed its file policy to the code alone
(`confinement.narrow_to_code`, before it leaves root), so onnxruntime can
open no input of its own; this sends one `StageReport` per
stage as it ends. A stage that breaks (a bug, MemoryError) is `incomplete`,
never `pass`; a worker killed midway has delivered the stages it finished.
Every stage's module is imported here, in the fork server (a worker that has
left root for its own identity may no longer read the code's folders).
No stage of the check worker is given a model whose calls of its own
functions would expand, once inlined, past `--max-inlined-nodes` (onnx's
inference and onnxruntime each inline every call: a 3 KB model can be 2^40
nodes): `shape`, `runtime` and `smoke` are skipped, and `security` fails.
The smoke run (and the runtime load, which folds constants) is refused when
the security estimate finds an output past `--max-static-output`: such a
model is flagged and never run; the smoke run alone when a declared input
is past it (the run would have to be given that much), or when a Loop's
constant trip count is past `--max-loop-trips` and nothing ends it sooner
(the `loop-trip-count` error). Each run the smoke stage makes (at 1, then
at `--smoke-second-dim` when dimensions are left unbound) has its own CPU
budget, `--smoke-cpu-seconds`, below the worker's limits (`smoke.smoke_stage`).
Before any stage, the request's dimension bindings (`job.dims`) are placed in the model
(`dim_bindings.resolve_bindings`): one the model has no place for is sent as
an `error` header of kind DIMENSION_BINDING and no stage runs (a usage
error: the front end answers 400, `onnx-import check` exits 64).
A signature worker (task "signature") runs `signature` alone, on the files of
the model's folder its job lists, opened through the file broker
(`service.checks.stages.model_signature`), and reads no model: `send_signature`.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

from importer import OnnxModel, check_model
from importer.source import ConfinedOpener
from service.checks.outcome import DIMENSION_BINDING, IN_CHECK_WORKER, DimensionBindingError, Finding, Stage, StageResult, incomplete
from service.checks.stages.dim_bindings import resolve_bindings
from service.checks.stages.model_signature import signature_stage
from service.checks.stages.runtime import runtime_stage
from service.checks.stages.security import (
    LOOP_TRIP_COUNT,
    STATIC_INPUT_TOO_LARGE,
    STATIC_OUTPUT_TOO_LARGE,
    SecurityBounds,
    expansion_findings,
    security_stage,
    static_findings,
)
from service.checks.stages.shape import shape_stage
from service.checks.stages.smoke import smoke_stage
from service.sandbox.protocol import ImportFailure, StageReport, WorkerHeader, WorkerJob
from service.tasks.steps import Steps


def _guarded(stage: Stage, run: Callable[[], StageResult]) -> StageResult:
    """`run()`, timed; a stage that raises is incomplete (fail closed)."""
    started = time.monotonic()
    try:
        result = run()
    except MemoryError:
        gc.collect()
        result = incomplete(stage, "the stage ran out of memory (the worker's memory limit)")
    except Exception as error:
        result = incomplete(stage, f"the {stage} check did not complete: {type(error).__name__}: {str(error)[:300]}")
    result.seconds = time.monotonic() - started
    return result


def _schema(model: OnnxModel, findings: list[Finding]) -> StageResult:
    result = StageResult("schema")
    for diagnostic in check_model(model):
        finding = Finding.from_diagnostic(diagnostic)
        findings.append(finding)  # every one goes in the catalogue; the result lists only the first
        result.add(finding)
    return result.finish()


def import_stages(model: OnnxModel, job: WorkerJob) -> tuple[list[Finding], list[StageResult]]:
    """The stages the import's worker runs (`schema`, `security`, as asked):
    every finding, in stage order, and each stage's result."""
    findings: list[Finding] = []
    results: list[StageResult] = []
    if "schema" in job.checks:
        schema_findings: list[Finding] = []
        results.append(_guarded("schema", lambda: _schema(model, schema_findings)))
        findings += schema_findings
    if "security" in job.checks:
        bounds = _security_bounds(job)
        result = _guarded("security", lambda: security_stage(model, bounds))
        results.append(result)
        findings += result.findings
    return findings, results


def _security_bounds(job: WorkerJob) -> SecurityBounds:
    return SecurityBounds(
        max_static_output=job.max_static_output, max_inlined_nodes=job.max_inlined_nodes, max_loop_trips=job.max_loop_trips
    )


def _refusals(model: OnnxModel, job: WorkerJob, stages: list[Stage]) -> dict[str, StageResult]:
    """The stages of `stages` that must not run, as their results: none of
    them for a model whose calls of its functions expand past
    --max-inlined-nodes; neither the load (onnxruntime folds constants as it
    loads) nor the run of a model with an output past --max-static-output; not
    the run of one whose declared inputs are past it, nor of one with a Loop
    past --max-loop-trips that nothing ends sooner. Fail closed: without the
    count, none runs; without the estimate, neither runtime stage."""
    try:
        expanding = expansion_findings(model, job.max_inlined_nodes)
    except Exception as error:
        reason = f"not run: the count of the functions' expansion did not complete ({type(error).__name__})"
        return {stage: incomplete(stage, reason) for stage in stages}
    if expanding:
        finding = expanding[0]
        reason = (
            f"not run: the security check counts the model's function calls past --max-inlined-nodes at {finding.field_path}: "
            f"{finding.message}"
        )
        return {stage: StageResult.ended(stage, "skipped", reason) for stage in stages}
    if "runtime" not in stages and "smoke" not in stages:
        return {}
    try:
        flagged = static_findings(model, _security_bounds(job))
    except Exception as error:
        reason = f"not run: the security estimate did not complete ({type(error).__name__})"
        return {stage: incomplete(stage, reason) for stage in ("runtime", "smoke")}
    refused: dict[str, StageResult] = {}
    for finding in flagged:
        for stage in _refused_by(finding):
            refused.setdefault(stage, StageResult.ended(stage, "skipped", f"not run: {_refusal_reason(finding)}"))
    return refused


def _refused_by(finding: Finding) -> tuple[Stage, ...]:
    """The check worker's stages a finding of the security estimate keeps from running."""
    if finding.code == STATIC_OUTPUT_TOO_LARGE:
        return ("runtime", "smoke")
    if finding.code == STATIC_INPUT_TOO_LARGE or (finding.code == LOOP_TRIP_COUNT and finding.severity == "error"):
        return ("smoke",)
    return ()


def _refusal_reason(finding: Finding) -> str:
    """Why a stage is not run, naming the finding, its place and the setting it is past."""
    if finding.code == LOOP_TRIP_COUNT:
        where = f"({finding.code}) at {finding.field_path}"
        return f"the security check finds a Loop past --max-loop-trips that nothing ends sooner {where}: {finding.message}"
    what = "an output" if finding.code == STATIC_OUTPUT_TOO_LARGE else "an input"
    return f"the security check estimates {what} past --max-static-output at {finding.field_path}: {finding.message}"


def _stage_runner(
    stage: Stage, model: OnnxModel, job: WorkerJob, session: list[object | None], mapped: frozenset[str] | None
) -> Callable[[], StageResult]:
    """The function that runs `stage`; `session` passes the runtime stage's session to the smoke run;
    `mapped`: where the model file is bound for onnxruntime, the external locations bound beside it."""
    if stage == "shape":
        return lambda: shape_stage(model)
    if stage == "runtime":

        def load() -> StageResult:
            result, session[0] = runtime_stage(model, mapped)
            return result

        return load

    def run() -> StageResult:
        result: StageResult = smoke_stage(
            session[0], model, dict(job.dims), cpu_seconds=job.smoke_cpu_seconds, soft_dims=dict(job.soft_dims),
            second_dim=job.smoke_second_dim,
        )  # fmt: skip
        return result

    return run


def _no_run(loaded: StageResult) -> StageResult:
    """The smoke run of a model the runtime stage did not load."""
    if loaded.status == "fail":
        return StageResult.ended("smoke", "skipped", "not run: onnxruntime does not load the model (the runtime stage's findings)")
    return incomplete("smoke", f"not run: the runtime stage did not finish ({loaded.reason})")


def send_checks(
    connection: Connection,
    model: OnnxModel,
    job: WorkerJob,
    isolation: str,
    steps: Steps | None = None,
    mapped: frozenset[str] | None = None,
) -> None:
    """Run the check worker's stages of `job`, sending each result as it ends
    (the worker has narrowed its file policy already: `confinement.narrow_to_code`),
    then the header with `steps`, the worker's profile, each stage a step.
    `mapped`: where the model file is bound for onnxruntime, the external locations bound beside it
    (the runtime stage's session over those files); None where nothing is bound."""
    stages = [stage for stage in job.checks if stage in IN_CHECK_WORKER]
    steps = steps or Steps()
    try:
        resolve_bindings(model, dict(job.dims))
    except DimensionBindingError as error:
        failure = ImportFailure(kind=DIMENSION_BINDING, message=str(error), input=job.display_name)
        refusal = WorkerHeader(status="error", isolation=isolation, error=failure)
        connection.send_bytes(refusal.model_dump_json(exclude_defaults=True).encode())
        return

    def send(result: StageResult) -> None:
        connection.send_bytes(StageReport.of(result).model_dump_json().encode())

    refused = _refusals(model, job, stages) if stages else {}
    steps.done("refusals")
    session: list[object | None] = [None]  # the runtime stage's session, for the smoke run
    loaded: StageResult | None = None
    for stage in stages:
        if stage in refused:
            result = refused[stage]
        elif stage == "smoke" and loaded is not None and loaded.status != "pass":
            result = _no_run(loaded)
        else:
            result = _guarded(stage, _stage_runner(stage, model, job, session, mapped))
        if stage == "runtime":
            loaded = result
        send(result)
        steps.done(stage)
    header = WorkerHeader(status="ok", isolation=isolation, steps=steps.taken)
    connection.send_bytes(header.model_dump_json(exclude_defaults=True).encode())


def send_signature(connection: Connection, job: WorkerJob, isolation: str, opener: ConfinedOpener, steps: Steps) -> None:
    """The `signature` stage's report (a frame as a check worker sends it), then the header with `steps`;
    `opener` opens the folder's files (the file broker)."""
    result = _guarded("signature", lambda: signature_stage(job, opener))
    connection.send_bytes(StageReport.of(result).model_dump_json().encode())
    steps.done("signature")
    header = WorkerHeader(status="ok", isolation=isolation, steps=steps.taken)
    connection.send_bytes(header.model_dump_json(exclude_defaults=True).encode())
