"""Admission (`service.imports.admission.Admission`): receiving places, the
import queue and worker slots, fair between tenants, shared by the processes
that use one folder. Two admissions on one folder in one process stand for
two processes (each is a member of the folder, on open file descriptions of
its own); real child processes hold places and are killed, or race for them
(the kernel's locks and a process's death are the point)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.errors import Overloaded
from service.imports import admission as admission_module
from service.imports.admission import Admission, Place
from service.imports.place_locks import Marks

REPO = Path(__file__).resolve().parents[3]


def test_receiving_places_are_bounded_apart_from_the_queue(tmp_path: Path) -> None:
    async def scenario() -> None:
        admission = Admission(workers=1, queue=0, max_receiving=1, folder=tmp_path)
        async with admission.receiving("alice"):
            assert admission.saturated
            with pytest.raises(Overloaded) as refused:
                async with admission.receiving("alice"):
                    pass
            assert 1 <= refused.value.retry_after <= 60
            async with admission.admitted("alice"):  # receiving holds no import place
                assert admission.admitted_now == 1
        assert admission.receiving_now == 0 and admission.admitted_now == 0

    asyncio.run(scenario())


def test_the_queue_admits_workers_plus_queue_then_refuses(tmp_path: Path) -> None:
    async def scenario() -> None:
        admission = Admission(workers=2, queue=1, max_receiving=8, folder=tmp_path)
        async with admission.admitted("alice"), admission.admitted("alice"), admission.admitted("alice"):
            with pytest.raises(Overloaded, match="imports are running"):
                async with admission.admitted("bob"):
                    pass
        async with admission.admitted("alice"):  # places come back
            pass

    asyncio.run(scenario())


def test_one_tenant_holds_at_most_its_share_and_the_others_are_admitted(tmp_path: Path) -> None:
    """Half of 2 + 6 places: alice's fifth import is refused, with a wait from her own
    jobs still to run; bob is admitted, and so are alice's receiving places up to her share."""

    async def scenario() -> None:
        admission = Admission(workers=2, queue=6, max_receiving=4, folder=tmp_path, tenant_share=0.5)
        admission.pace.seconds = 10.0  # imports hold their place 10 s once they run
        async with contextlib.AsyncExitStack() as held:
            for _ in range(4):
                await held.enter_async_context(admission.admitted("alice"))
            waits = []
            for _ in range(3):  # a herd of her clients refused at once: each told a later turn, as her places free
                with pytest.raises(Overloaded, match="its share") as refused:
                    async with admission.admitted("alice"):
                        pass
                waits.append(refused.value.retry_after)
            assert 9 <= waits[0] <= 11 and 19 <= waits[1] <= 21 and 29 <= waits[2] <= 31, waits
            async with admission.admitted("bob"):
                assert admission.for_tenant("bob").admitted == 1 and admission.for_tenant("alice").admitted == 4
                assert len(admission.busy_tenants()) == 2
            await held.enter_async_context(admission.receiving("alice"))
            await held.enter_async_context(admission.receiving("alice"))
            with pytest.raises(Overloaded, match="its share"):
                async with admission.receiving("alice"):
                    pass
            async with admission.receiving("bob"):
                pass

    asyncio.run(scenario())


async def _run_jobs(admission: Admission, jobs: list[tuple[str, float]], order: list[str], hold: float = 0.02) -> None:
    """Each (tenant, delay) job waits `delay`, takes a place and a slot, notes its tenant, holds the slot `hold` s."""

    async def job(tenant: str, delay: float) -> None:
        await asyncio.sleep(delay)
        async with admission.admitted(tenant) as place, place.slot():
            order.append(tenant)
            await asyncio.sleep(hold)

    await asyncio.gather(*(job(tenant, delay) for tenant, delay in jobs))


def test_two_busy_tenants_take_turns_whatever_either_has_queued(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        admission = Admission(workers=1, queue=20, max_receiving=8, folder=tmp_path)
        order: list[str] = []
        jobs = [("alice", 0.0)] * 6 + [("bob", 0.005)] * 3  # bob's arrive after all of alice's
        await _run_jobs(admission, jobs, order)
        return order

    order = asyncio.run(scenario())
    assert order[:7] == ["alice", "bob", "alice", "bob", "alice", "bob", "alice"]


def test_an_import_that_runs_a_worker_gets_its_second_slot_first(tmp_path: Path) -> None:
    """An import's check worker, beside its running import worker, goes before an older import of the same tenant
    that has not started: an import started is finished first."""

    async def scenario() -> list[str]:
        admission = Admission(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        order: list[str] = []

        async def worker(place: Place, name: str, hold: float) -> None:
            async with place.slot():
                order.append(name)
                await asyncio.sleep(hold)

        async def an_import(name: str, delay: float, staging: float) -> None:
            await asyncio.sleep(delay)
            async with admission.admitted("alice") as place:
                await asyncio.sleep(staging)  # staging its files before its workers ask for slots
                await asyncio.gather(worker(place, f"{name} import", 0.05), worker(place, f"{name} checks", 0.01))

        await asyncio.gather(an_import("older", 0.0, 0.02), an_import("younger", 0.01, 0.0))
        return order

    assert asyncio.run(scenario()) == ["younger import", "younger checks", "older import", "older checks"]


def test_a_waiter_cancelled_takes_no_place_and_keeps_the_order(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        admission = Admission(workers=1, queue=8, max_receiving=8, folder=tmp_path)
        order: list[int] = []

        async def job(number: int) -> None:
            async with admission.admitted("alice") as place, place.slot():
                order.append(number)
                await asyncio.sleep(0.01)

        async with admission.admitted("alice") as first, first.slot():
            jobs = [asyncio.create_task(job(n)) for n in range(4)]
            await asyncio.sleep(0.05)  # all four wait, 0 first in line
            jobs[0].cancel()  # the first in line
            jobs[2].cancel()  # one behind it
            await asyncio.sleep(0.05)
            assert admission.admitted_now == 3  # the cancelled left the queue too
        await asyncio.gather(*jobs, return_exceptions=True)
        assert admission.running == 0 and admission.admitted_now == 0 and not admission.waiters
        marks = Marks(tmp_path / "waiting")
        assert not marks.any_before(2**62)  # nobody left in line
        marks.close()
        admission.close()
        return order

    assert asyncio.run(scenario()) == [1, 3]


def test_a_better_claim_of_another_process_goes_first(tmp_path: Path) -> None:
    """Here alice runs a worker and waits for another; there bob, who runs none, arrives later: bob's goes first."""

    async def scenario() -> list[str]:
        here = Admission(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        there = Admission(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        order: list[str] = []

        async def job(admission: Admission, tenant: str) -> None:
            async with admission.admitted(tenant) as place, place.slot():
                order.append(tenant)

        async with here.admitted("alice") as running, running.slot():
            alice = asyncio.create_task(job(here, "alice"))
            await asyncio.sleep(0.03)
            bob = asyncio.create_task(job(there, "bob"))
            await asyncio.sleep(0.03)
        # The slot freed here wakes this process's waiter at once; it leaves the slot to bob's better claim.
        await asyncio.gather(alice, bob)
        return order

    assert asyncio.run(scenario()) == ["bob", "alice"]


def test_an_older_waiter_of_another_process_goes_first(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        here = Admission(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        there = Admission(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        order: list[str] = []

        async def job(admission: Admission, name: str) -> None:
            async with admission.admitted("alice") as place, place.slot():
                order.append(name)

        async with here.admitted("bob") as running, running.slot():
            older = asyncio.create_task(job(there, "older, there"))
            await asyncio.sleep(0.03)
            younger = asyncio.create_task(job(here, "younger, here"))
            await asyncio.sleep(0.03)
        await asyncio.gather(older, younger)
        return order

    assert asyncio.run(scenario()) == ["older, there", "younger, here"]


def test_a_free_place_is_left_to_a_better_claim_only_so_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(admission_module, "LEAVE_SECONDS", 0.2)
    stopped = Marks(tmp_path / "waiting")
    stopped.mark(1)  # a better claim whose process never looks again

    async def scenario() -> float:
        admission = Admission(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        started = asyncio.get_running_loop().time()
        async with admission.admitted("alice") as place, place.slot():
            return asyncio.get_running_loop().time() - started

    assert 0.2 <= asyncio.run(scenario()) < 1.0
    stopped.close()


HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from service.imports.admission import Admission

    async def main() -> None:
        admission = Admission(workers=2, queue=1, max_receiving=1, folder=Path(sys.argv[1]))
        async with admission.receiving("alice"), admission.admitted("alice") as first, admission.admitted("alice"):
            async with first.slot(), first.slot():
                print("holding", flush=True)
                await asyncio.sleep(60)

    asyncio.run(main())
    """
)


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A process holding both running places, two of the three queue places and the receiving place."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "holding"
        yield process
    finally:
        process.kill()
        process.communicate()


def test_the_capacity_holds_across_processes(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    async def scenario() -> None:
        admission = Admission(workers=2, queue=1, max_receiving=1, folder=tmp_path)
        assert (admission.running, admission.admitted_now, admission.receiving_now) == (2, 2, 1)
        assert admission.saturated
        with pytest.raises(Overloaded, match="being received"):
            async with admission.receiving("bob"):
                pass
        async with admission.admitted("bob") as place:  # the third place of workers + queue
            assert admission.admitted_now == 3
            with pytest.raises(Overloaded, match="2 imports are running and 1 waiting"):
                async with admission.admitted("carol"):
                    pass
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2), place.slot():
                    pass
        assert not admission.waiters and admission.running == 2

    asyncio.run(scenario())


def test_a_killed_process_places_come_free(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    async def scenario() -> None:
        admission = Admission(workers=2, queue=1, max_receiving=1, folder=tmp_path)
        async with admission.admitted("bob") as place:
            waiting = asyncio.create_task(asyncio.wait_for(_run_in_slot(admission, place), timeout=2))
            await asyncio.sleep(0.1)
            assert not waiting.done()
            os.kill(holder.pid, signal.SIGKILL)
            await asyncio.to_thread(holder.wait)
            assert await waiting == 1  # it got a place, the killed process's are free
            assert admission.for_tenant("alice").admitted == 0
        assert (admission.running, admission.admitted_now, admission.receiving_now) == (0, 0, 0)
        async with admission.receiving("alice"):
            pass

    asyncio.run(scenario())


async def _run_in_slot(admission: Admission, place: Place) -> int:
    async with place.slot():
        return admission.running


RACER = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    from service.imports.place_locks import Membership, SharedCount

    folder, log, wanted = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    places = SharedCount(folder / "running", Membership(folder).index)
    out = os.open(log, os.O_WRONLY | os.O_APPEND)
    print("ready", flush=True)
    sys.stdin.readline()
    refused = 0
    for _ in range(wanted):
        while not places.take(2):
            refused += 1
            time.sleep(0.0001)
        os.write(out, b"+")  # after the take, before the release: held all along
        time.sleep(0.0002)
        os.write(out, b"-")
        places.release()
    print(refused, flush=True)
    """
)


def test_processes_racing_for_places_never_hold_more_than_the_limit(tmp_path: Path) -> None:
    log = tmp_path / "log"
    log.touch()
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, str(tmp_path), str(log), "300"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            cwd=REPO,
        )
        for _ in range(4)
    ]
    for racer in racers:
        assert racer.stdout is not None and racer.stdout.readline().strip() == "ready"
    for racer in racers:  # all at once
        assert racer.stdin is not None
        racer.stdin.write("go\n")
        racer.stdin.flush()
    refusals = [int(racer.communicate(timeout=60)[0]) for racer in racers]
    assert sum(refusals) > 0  # they did race
    holding, most = 0, 0
    for step in log.read_bytes():
        holding += 1 if step == ord("+") else -1
        most = max(most, holding)
    assert most == 2  # two at once, never three
