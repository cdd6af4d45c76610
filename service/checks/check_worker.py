"""A check worker's run, as stage results: `check_worker_results`.

Runs the stages of a job that need onnx or onnxruntime (`shape`, `runtime`,
`smoke`) in a check worker of their own (`Sandbox.run_checks`), and gives one
`StageResult` per stage asked, in order: the one the worker reported, or,
fail closed, `incomplete` with the reason the worker did not deliver it (it
crashed, ran out of memory, CPU or time, or could not read the model).
Where `runtime` or `smoke` is asked, a worker of task "externals" first
reads which external data files the model names (the model file alone;
unless the caller has such a listing already, or a byte search finds that
it names none: `names_no_external_file`), and the check worker binds
the model file and those for onnxruntime (`WorkerJob.bind_for_runtime`,
`WorkerJob.mapped_files`, `service.sandbox.worker.bound_files`); a model
whose weights are inline has its file alone bound.
A job with dimension bindings runs the worker even when it asks for none of
those stages: the bindings are read against the model there, and one the
model has no place for raises DimensionBindingError (a usage error).
The worker's memory cap is sized to the job's `model_bytes`
(`check_worker_memory`, by `Sandbox.worker_memory`; `model_and_external_bytes`
counts them for a model whose external files a worker has listed), its
external data counted as mapped where the workers have a minimal root to
bind the files in: a model that would need more than a worker may
take is `incomplete` without a worker, its reason naming the memory it needs
and the settings; a stage that ran out of memory says the cap it ran under.
Shared by the service's imports and the `onnx-import` command.
"""

from __future__ import annotations

import logging
import mmap
import os
from collections.abc import Iterable
from dataclasses import replace
from typing import Final

from service.checks.outcome import DIMENSION_BINDING, IN_CHECK_WORKER, DimensionBindingError, Stage, StageResult, incomplete
from service.sandbox.memory_sizing import WorkerMemory, shown_size
from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import ExitBeside, Sandbox, WorkerControl
from service.sandbox.worker.confinement import MINIMAL_ROOT

log = logging.getLogger("service.sandbox")


QUICK_LOOK_BYTES: Final = 64 << 20  # the largest model file `names_no_external_file` reads
_LOCATION_KEY: Final = b"location"


def names_no_external_file(path: str) -> bool:
    """Whether the model file at `path` certainly names no external data file:
    every external tensor names its file in an entry whose key, `location`,
    protobuf keeps verbatim, and these bytes are nowhere in the file. A byte
    search, not a parse (the front end never parses model bytes), of a file
    of at most QUICK_LOOK_BYTES: False for a larger one, one that cannot be
    read, or one that holds the word anywhere (a sandboxed worker lists those)."""
    try:
        with open(path, "rb") as file:
            if os.fstat(file.fileno()).st_size > QUICK_LOOK_BYTES:
                return False
            with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
                return mapped.find(_LOCATION_KEY) < 0
    except (OSError, ValueError):  # ValueError: an empty file cannot be mapped
        return False


def model_and_external_bytes(directory: str, model: str, external_dir: str | None, locations: Iterable[str]) -> int:
    """The bytes of the model file and of its external files at `locations` (in `external_dir`, else beside it), as
    they are now: what sizes its check worker. A file that cannot be read counts 0 (the import's worker refuses it)."""
    folder = external_dir or directory
    total = 0
    for path in [os.path.join(directory, model), *(os.path.join(folder, location) for location in locations)]:
        try:
            total += os.stat(path).st_size
        except OSError:
            continue
    return total


def check_worker_memory(sandbox: Sandbox, job: WorkerJob) -> WorkerMemory:
    """The check worker's memory for `job`: where the workers have a minimal root, the bytes of `job.model_bytes`
    past its model file's are external data it binds for onnxruntime to map (elsewhere they are handed over)."""
    mapped = 0
    if MINIMAL_ROOT in sandbox.worker_sandbox:
        try:
            mapped = job.model_bytes - os.stat(os.path.join(job.directory, job.model)).st_size
        except OSError:
            mapped = 0  # the import's worker refuses it
    return sandbox.worker_memory(job.model_bytes, mapped)


def check_worker_results(
    sandbox: Sandbox,
    job: WorkerJob,
    control: WorkerControl | None = None,
    listed: tuple[str, ...] | None = None,
    exit_beside: ExitBeside | None = None,
) -> list[StageResult]:
    """Run `job`'s check-worker stages (blocking; call from a thread); raise
    DimensionBindingError for a binding of `job.dims` the model has no place for.
    `listed`: the external locations the model names, where a worker listed them already;
    `exit_beside`: the results given before the check worker has exited (`Sandbox.run`)."""
    wanted = [stage for stage in job.checks if stage in IN_CHECK_WORKER]
    if not wanted and not job.dims:
        return []
    memory = check_worker_memory(sandbox, job)
    if not memory.fits:
        log.info("checks of %r: not run, %s", job.display_name[:100], memory.reason())
        return [incomplete(stage, memory.reason()) for stage in wanted]
    if memory.sized:
        log.info(
            "checks of %r: memory cap %s (sized to its %s)", job.display_name[:100], shown_size(memory.cap), shown_size(job.model_bytes)
        )
    bind = _binds_for_runtime(sandbox, wanted)
    external = _external_files(sandbox, job, control, listed) if bind else ()
    check_job = replace(job, task="checks", hash_sources=False, memory=memory.cap, bind_for_runtime=bind, mapped_files=external)
    reports, outcome = sandbox.run_checks(check_job, control, exit_beside)
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
    results = [delivered.get(stage) or incomplete(stage, why) for stage in wanted]
    return [replace(result, reason=memory.out_of_memory_reason(result.reason)) if result.status == "incomplete" else result
            for result in results]  # fmt: skip


def _binds_for_runtime(sandbox: Sandbox, wanted: list[Stage]) -> bool:
    """Whether the check worker binds its files for onnxruntime: not where no
    stage hands the model to onnxruntime, nor where the workers have no
    minimal root to bind them in (the last probe's walls)."""
    return ("runtime" in wanted or "smoke" in wanted) and MINIMAL_ROOT in sandbox.worker_sandbox


def _external_files(sandbox: Sandbox, job: WorkerJob, control: WorkerControl | None, listed: tuple[str, ...] | None) -> tuple[str, ...]:
    """The external files the model names, as a sandboxed worker reads them
    (task "externals": the model file only; `listed`, where one did already),
    for the check worker to bind for onnxruntime; none where that worker
    could not tell (the check worker then hands the weights over)."""
    if listed is not None:
        return listed
    if names_no_external_file(os.path.join(job.directory, job.model)):
        return ()
    outcome = sandbox.run(replace(job, task="externals", hash_sources=False), [], control=control)
    log.info("%s", outcome.logged("externals", job.display_name))
    if outcome.status != "ok" or outcome.header is None:
        return ()
    return tuple(outcome.header.external_files)
