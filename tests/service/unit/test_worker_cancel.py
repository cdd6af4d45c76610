"""A task cancelled before its worker's thread began ends at once
(`service.imports.workers.ended_with_its_task`): anyio never runs a thread's
call whose task was cancelled before the thread took it, so waiting for that
call to end waited forever, holding the import's place (a client that left
early, under load)."""

from __future__ import annotations

import threading

import anyio

from service.imports.workers import ended_with_its_task
from service.sandbox.supervisor import WorkerControl


def test_a_task_cancelled_before_its_thread_began_ends_at_once() -> None:
    ran: list[WorkerControl] = []
    ended = threading.Event()

    async def cancelled_first() -> None:
        with anyio.CancelScope() as scope:
            scope.cancel()  # delivered at run_sync's first checkpoint: the call is never handed to a thread
            await ended_with_its_task(ran.append)
        ended.set()

    thread = threading.Thread(target=anyio.run, args=(cancelled_first,), daemon=True)  # a hang must fail the test, not stall it
    thread.start()
    thread.join(10)
    assert ended.is_set(), "the cancelled task waited for a call that never ran"
    assert not ran


def test_a_task_cancelled_while_its_worker_runs_ends_the_worker_and_waits_for_it() -> None:
    killed = threading.Event()

    def work(control: WorkerControl) -> None:
        control.attach(killed.set)
        killed.wait(10)  # the worker runs until it is killed

    async def cancelled_later() -> None:
        with anyio.move_on_after(0.2):
            await ended_with_its_task(work)

    anyio.run(cancelled_later)
    assert killed.is_set()
