"""A check worker's results are given once its answer is whole, not once it has exited; its slot is given back once
it is gone.

A worker that holds gigabytes takes its time to exit (the kernel frees onnxruntime's pre-packed weights: 0.25 s for
3.3 GiB). With an `ExitBeside`, `Sandbox.run` returns the whole answer at once and reaps the worker in a thread;
`run_check_worker` keeps the worker's slot (and a sized worker's memory) until it is gone, so that no more workers
live at once than `--workers` allows. The lingering worker is the test-only fault `linger` (support/fault_worker.py:
it answers at once, whole, then waits before it exits).

Why a process: the point is a worker process's exit, which only a real worker has.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.faults import FaultSandbox
from support.service_harness import SAMPLES, started_sandbox

from service.imports.admission import Admission, Place
from service.imports.parts import ImportParts
from service.imports.workers import run_check_worker
from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import ExitBeside

LINGER = 2.0


@pytest.fixture(scope="module")
def sandbox() -> Iterator[FaultSandbox]:
    with started_sandbox() as started:
        yield started


def _lingering_job(sandbox: FaultSandbox) -> WorkerJob:
    return sandbox.job("checks", directory=str(SAMPLES), model="add.onnx", display_name="add.onnx", checks=("shape",), linger=LINGER)


def test_the_answer_comes_before_the_exit_and_the_exit_is_reaped_beside(sandbox: FaultSandbox) -> None:
    exit_beside = ExitBeside()
    gone = threading.Event()
    started = time.monotonic()
    _, outcome = sandbox.run_checks(_lingering_job(sandbox), None, exit_beside)
    answered = time.monotonic() - started
    exit_beside.then(gone.set)
    assert outcome.status == "ok" and exit_beside.started, outcome
    assert answered < LINGER - 0.5, answered  # not waiting for the exit
    assert not gone.is_set()  # still lingering
    assert gone.wait(LINGER + 10)
    assert time.monotonic() - started >= LINGER - 0.1  # gone only once it has exited
    called: list[str] = []
    exit_beside.then(lambda: called.append("at once"))  # gone already: called at once
    assert called == ["at once"]


def test_without_it_the_answer_waits_for_the_exit(sandbox: FaultSandbox) -> None:
    started = time.monotonic()
    _, outcome = sandbox.run_checks(_lingering_job(sandbox))
    assert outcome.status == "ok" and time.monotonic() - started >= LINGER - 0.1


def test_the_check_workers_slot_is_given_back_once_it_is_gone(sandbox: FaultSandbox, tmp_path: Path) -> None:
    admission = Admission(workers=1, queue=4, max_receiving=4, folder=tmp_path)
    parts = ImportParts(sandbox.settings, None, sandbox, admission, None, None)  # type: ignore[arg-type]
    job = dataclasses.replace(_lingering_job(sandbox), task="import")

    async def scenario() -> tuple[float, int, float]:
        started = time.monotonic()
        async with admission.admitted("tenant") as place:
            assert isinstance(place, Place)
            results = await run_check_worker(parts, place, job)
            answered = time.monotonic() - started
            assert [result.status for result in results] == ["incomplete"]  # it answered no stage
            held = admission.running
            while admission.running:
                await asyncio.sleep(0.02)
            return answered, held, time.monotonic() - started

    answered, held, given_back = asyncio.run(scenario())
    assert answered < LINGER - 0.5, answered
    assert held == 1  # the slot kept while the worker exits
    assert given_back >= LINGER - 0.1, given_back
