"""The pipeline's worker step (`service.imports.workers`): a worker whose
task is cancelled (its client went) is ended at once, and the cancellation
goes on only once its thread is done, so nothing writes into a work folder
being removed. The supervisor's `run` stands in as a function that blocks
until it is ended through its `WorkerControl`."""

from __future__ import annotations

import asyncio
import threading

import pytest

from service.imports.workers import ended_with_its_task
from service.sandbox.supervisor import WorkerControl


def test_a_cancelled_task_ends_its_worker_and_waits_for_its_thread() -> None:
    killed = threading.Event()
    returned = threading.Event()

    def blocking_run(control: WorkerControl) -> str:
        control.attach(killed.set)  # what the supervisor does once the worker is forked
        killed.wait(30)
        returned.set()
        return "ended"

    async def scenario() -> None:
        task = asyncio.create_task(ended_with_its_task(blocking_run))
        await asyncio.sleep(0.05)
        assert not killed.is_set()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert killed.is_set() and returned.is_set()  # ended, and its thread was done before the cancellation went on

    asyncio.run(scenario())


def test_a_worker_ended_before_it_starts_is_killed_as_it_starts() -> None:
    control = WorkerControl()
    control.end()
    killed: list[str] = []
    control.attach(lambda: killed.append("killed"))
    assert killed == ["killed"]


def test_a_task_that_is_not_cancelled_gets_its_answer() -> None:
    assert asyncio.run(ended_with_its_task(lambda control: 42)) == 42
