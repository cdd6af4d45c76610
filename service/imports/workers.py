"""The pipeline's worker step: a job's import worker and its check worker, each in a worker slot of its place.

Owns `run_worker` (one sandboxed worker in a slot of the import's `Place`;
its header, or the typed error of how it ended) and `run_workers` (the
import's worker and, when `shape`, `runtime` or `smoke` is asked or
dimensions are bound, a check worker of its own on the same inputs
(`service.checks.check_worker`), and when `signature` is asked, a signature
worker on the model's folder (`service.checks.signature_worker`), side by
side: none reads another's answer, so on two cores an import waits for the
longest, not their sum; the import's error, if any, is raised first, once
all have ended, then the check worker's; a binding the model has no place for is
BadInput). A check worker sized above `--worker-memory` reserves its cap
from the admission's memory budget while it runs (`Place.slot`). A check
worker's results are given as soon as its answer is whole; its exit (the
kernel freeing what onnxruntime held) goes on beside
(`service.sandbox.supervisor.ExitBeside`), and its slot and memory are
given back once it is gone.

A worker runs in a thread (the supervisor's `run` blocks). When the task
awaiting it is cancelled (its client went, `service.api.client_presence`),
the worker is killed at once (`WorkerControl`) and the cancellation goes on
once its thread has ended: a client that leaves frees the slot, and no
worker writes into a work folder being removed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from service.checks.check_worker import check_worker_memory, check_worker_results
from service.checks.outcome import IN_CHECK_WORKER, IN_SIGNATURE_WORKER, DimensionBindingError, StageResult
from service.checks.signature_worker import SignaturePolicy, SignedFolder, signature_results
from service.errors import BadInput, bounded
from service.imports.admission import Place
from service.imports.parts import ImportParts
from service.sandbox.protocol import WorkerHeader, WorkerJob
from service.sandbox.supervisor import ExitBeside, WorkerControl

log = logging.getLogger("service")
T = TypeVar("T")


async def ended_with_its_task(work: Callable[[WorkerControl], T]) -> T:
    """`work(control)` in a thread; if this task is cancelled meanwhile, the
    worker it runs is ended and the cancellation raised once the thread is done."""
    control = WorkerControl()
    started, done = threading.Event(), threading.Event()

    def call() -> T:
        started.set()
        try:
            return work(control)
        finally:
            done.set()

    try:
        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    except anyio.get_cancelled_exc_class():
        control.end()  # a worker started is killed; one starting later is killed as it starts
        if started.is_set():  # cancelled before its thread began, `call` never runs: nothing to wait for
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(done.wait)
        raise


async def run_worker(parts: ImportParts, place: Place, job: WorkerJob, destinations: list[Path], max_bytes: int | None) -> WorkerHeader:
    """Run `job` in a worker slot of `place`; its header, or the typed error of how it ended."""
    async with place.slot():
        outcome = await ended_with_its_task(lambda control: parts.sandbox.run(job, destinations, max_bytes, control=control))
    log.info("%s", outcome.logged(job.task, job.display_name))
    return outcome.result(job.display_name)


async def run_check_worker(parts: ImportParts, place: Place, job: WorkerJob, listed: tuple[str, ...] | None = None) -> list[StageResult]:
    """The check worker's stages of `job`, if it asks any (or binds dimensions),
    in a worker slot of their own (`listed`: the external locations the model
    names, where a worker has listed them already); BadInput for a binding the model has no place for."""
    if not any(stage in IN_CHECK_WORKER for stage in job.checks) and not job.dims:
        return []
    memory = await anyio.to_thread.run_sync(check_worker_memory, parts.sandbox, job)
    exit_beside = ExitBeside()
    async with place.slot(memory.cap if memory.sized and memory.fits else 0) as slot:
        try:
            return await ended_with_its_task(lambda control: check_worker_results(parts.sandbox, job, control, listed, exit_beside))
        except DimensionBindingError as error:
            raise BadInput(bounded(str(error), 400)) from None  # the request's names, which may be long
        finally:
            if exit_beside.started:
                slot.given_back_by(exit_beside.then)  # answered before its exit: the slot and memory kept until it is gone


async def run_signature_worker(parts: ImportParts, place: Place, job: WorkerJob, folder: SignedFolder | None) -> list[StageResult]:
    """The `signature` stage of `job`, if it asks it, on the model's `folder`, in a worker slot of its own."""
    if not any(stage in IN_SIGNATURE_WORKER for stage in job.checks):
        return []
    policy = SignaturePolicy.of(parts.settings)
    async with place.slot():
        return await ended_with_its_task(lambda control: signature_results(parts.sandbox, job, folder, policy, control))


async def run_workers(
    parts: ImportParts,
    place: Place,
    job: WorkerJob,
    destinations: list[Path],
    max_bytes: int | None,
    listed: tuple[str, ...] | None = None,
    signed_folder: SignedFolder | None = None,
) -> tuple[WorkerHeader, list[StageResult]]:
    """The import worker, the check worker and the signature worker of `job`, side by side (see the module comment;
    `listed`: run_check_worker's; `signed_folder`: the model's folder, which the `signature` stage verifies)."""
    ended: dict[str, Any] = {}

    async def run(key: str, work: Callable[[], Awaitable[Any]]) -> None:
        try:
            ended[key] = await work()
        except Exception as error:  # raised below, once both have ended
            ended[key] = error

    async with anyio.create_task_group() as group:
        group.start_soon(run, "checks", lambda: run_check_worker(parts, place, job, listed))
        group.start_soon(run, "signature", lambda: run_signature_worker(parts, place, job, signed_folder))
        await run("import", lambda: run_worker(parts, place, job, destinations, max_bytes))
    for key in ("import", "checks", "signature"):
        if isinstance(ended[key], Exception):
            raise ended[key]
    header: WorkerHeader = ended["import"]
    checked: list[StageResult] = ended["signature"] + ended["checks"]
    return header, checked
