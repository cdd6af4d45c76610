"""Admission control (`service.imports.limiter.ImportLimiter`): receiving
places, the import queue and worker slots, shared by the processes that use
one folder. Two limiters on one folder in one process stand for two
processes (each is a member of the folder, on open file descriptions of its
own); real child processes hold places and are killed, or race for them."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.errors import Overloaded
from service.imports import limiter as limiter_module
from service.imports.limiter import ImportLimiter
from service.imports.place_locks import Marks

REPO = Path(__file__).resolve().parents[3]


def test_receiving_places_are_bounded_apart_from_the_queue(tmp_path: Path) -> None:
    async def scenario() -> None:
        limiter = ImportLimiter(workers=1, queue=0, max_receiving=1, folder=tmp_path)
        async with limiter.receiving():
            assert limiter.saturated
            with pytest.raises(Overloaded) as refused:
                async with limiter.receiving():
                    pass
            assert 1 <= refused.value.retry_after <= 60
            async with limiter.admission():  # receiving holds no import place
                assert limiter.admitted == 1
        assert limiter.receiving_now == 0 and limiter.admitted == 0

    asyncio.run(scenario())


def test_the_queue_admits_workers_plus_queue_then_refuses(tmp_path: Path) -> None:
    async def scenario() -> None:
        limiter = ImportLimiter(workers=2, queue=1, max_receiving=8, folder=tmp_path)
        async with limiter.admission(), limiter.admission(), limiter.admission():
            with pytest.raises(Overloaded, match="imports are running"):
                async with limiter.admission():
                    pass
        async with limiter.admission():  # places come back
            pass

    asyncio.run(scenario())


def test_slots_run_at_most_workers_at_once_in_order(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        limiter = ImportLimiter(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        order: list[int] = []
        most = 0

        async def job(number: int) -> None:
            nonlocal most
            async with limiter.admission(), limiter.slot():
                most = max(most, limiter.running)
                order.append(number)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(job(n) for n in range(4)))
        assert most == 1
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3]


def test_a_waiter_cancelled_takes_no_place_and_keeps_the_order(tmp_path: Path) -> None:
    async def scenario() -> list[int]:
        limiter = ImportLimiter(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        order: list[int] = []

        async def job(number: int) -> None:
            async with limiter.slot():
                order.append(number)
                await asyncio.sleep(0.01)

        async with limiter.slot():
            jobs = [asyncio.create_task(job(n)) for n in range(4)]
            await asyncio.sleep(0.05)  # all four wait, 0 first in line
            jobs[0].cancel()  # the first in line
            jobs[2].cancel()  # one behind it
            await asyncio.sleep(0.05)
        await asyncio.gather(*jobs, return_exceptions=True)
        assert limiter.running == 0 and not limiter.waiters
        marks = Marks(tmp_path / "waiting")
        assert not marks.any_before(2**62)  # nobody left in line
        marks.close()
        limiter.close()
        return order

    assert asyncio.run(scenario()) == [1, 3]


def test_an_older_waiter_of_another_process_goes_first(tmp_path: Path) -> None:
    async def scenario() -> list[str]:
        here = ImportLimiter(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        there = ImportLimiter(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        order: list[str] = []

        async def job(limiter: ImportLimiter, name: str) -> None:
            async with limiter.slot():
                order.append(name)

        async with here.slot():
            older = asyncio.create_task(job(there, "older, there"))
            await asyncio.sleep(0.03)
            younger = asyncio.create_task(job(here, "younger, here"))
            await asyncio.sleep(0.03)
        # The slot freed here wakes this process's waiter at once; it leaves the place to the older one.
        await asyncio.gather(older, younger)
        return order

    assert asyncio.run(scenario()) == ["older, there", "younger, here"]


def test_a_free_place_is_left_to_an_older_waiter_only_so_long(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limiter_module, "LEAVE_SECONDS", 0.2)
    stopped = Marks(tmp_path / "waiting")
    stopped.mark(1)  # an older waiter whose process never looks again

    async def scenario() -> float:
        limiter = ImportLimiter(workers=1, queue=4, max_receiving=8, folder=tmp_path)
        started = asyncio.get_running_loop().time()
        async with limiter.slot():
            return asyncio.get_running_loop().time() - started

    assert 0.2 <= asyncio.run(scenario()) < 1.0
    stopped.close()


HOLDER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from service.imports.limiter import ImportLimiter

    async def main() -> None:
        limiter = ImportLimiter(workers=2, queue=1, max_receiving=1, folder=Path(sys.argv[1]))
        async with limiter.receiving(), limiter.admission(), limiter.admission(), limiter.slot(), limiter.slot():
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
        limiter = ImportLimiter(workers=2, queue=1, max_receiving=1, folder=tmp_path)
        assert (limiter.running, limiter.admitted, limiter.receiving_now) == (2, 2, 1)
        assert limiter.saturated
        with pytest.raises(Overloaded, match="being received"):
            async with limiter.receiving():
                pass
        async with limiter.admission():  # the third place of workers + queue
            assert limiter.admitted == 3
            with pytest.raises(Overloaded, match="2 imports are running and 1 waiting"):
                async with limiter.admission():
                    pass
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2), limiter.slot():
                    pass
        assert not limiter.waiters and limiter.running == 2

    asyncio.run(scenario())


def test_a_killed_process_places_come_free(tmp_path: Path, holder: subprocess.Popen[str]) -> None:
    async def scenario() -> None:
        limiter = ImportLimiter(workers=2, queue=1, max_receiving=1, folder=tmp_path)
        async with limiter.admission():
            waiting = asyncio.create_task(asyncio.wait_for(_run_in_slot(limiter), timeout=2))
            await asyncio.sleep(0.1)
            assert not waiting.done()
            os.kill(holder.pid, signal.SIGKILL)
            await asyncio.to_thread(holder.wait)
            assert await waiting == 1  # it got a place, the killed process's are free
        assert (limiter.running, limiter.admitted, limiter.receiving_now) == (0, 0, 0)
        async with limiter.receiving():
            pass

    asyncio.run(scenario())


async def _run_in_slot(limiter: ImportLimiter) -> int:
    async with limiter.slot():
        return limiter.running


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
