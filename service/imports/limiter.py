"""The bounded import queue: at most `workers` worker jobs run, `queue` more
wait, beyond that 503 with a Retry-After estimated from recent job times.
Uploads whose bodies are still arriving are bounded apart (`max_receiving`):
a request joins the import queue only once its body is on disk, so slow
clients hold receiving places, never import places.

The places are shared by every front-end process of one service: they are
locks on files in one folder (`service.imports.place_locks`), which the
kernel frees when a process dies. Owns `ImportLimiter`:
`receiving()` (a place to receive a body, or `Overloaded`), `admission()` (a
place in the queue, or `Overloaded`) and `slot()` (one of the running
places: waited for in order within a process, the oldest waiter of all the
processes first), and the figures `/readyz` and the metrics report (every
process's places). The Retry-After estimate is per process.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import random
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path

from service.errors import Overloaded
from service.imports.place_locks import Marks, Membership, SharedCount

POLL_SECONDS = (0.01, 0.02)  # a process's first waiter looks for a running place freed elsewhere this often
LEAVE_SECONDS = 1.0  # how long a free running place is left to an older waiter elsewhere (a stopped process's)


class ImportLimiter:
    def __init__(self, workers: int, queue: int, max_receiving: int, folder: Path) -> None:
        self.workers = workers
        self.capacity = workers + queue
        self.max_receiving = max_receiving
        self.mean_seconds = 0.5
        self.member = Membership(folder)
        self.places = {kind: SharedCount(folder / kind, self.member.index) for kind in ("receiving", "admitted", "running")}
        self.first_waiters = Marks(folder / "waiting")  # each process's first waiter, at its arrival time
        self.waiters: deque[asyncio.Event] = deque()  # this process's waiters for a slot, first in line first

    def close(self) -> None:
        for places in self.places.values():
            places.close()
        self.first_waiters.close()
        self.member.close()

    @property
    def receiving_now(self) -> int:
        return self.places["receiving"].total()

    @property
    def admitted(self) -> int:
        return self.places["admitted"].total()

    @property
    def running(self) -> int:
        return self.places["running"].total()

    @property
    def waiting(self) -> int:
        """Imports admitted, not running (never below 0: the two counts are read
        apart, and other processes take and free places meanwhile)."""
        running = self.running
        return max(0, self.admitted - running)

    def retry_after(self) -> int:
        return max(1, min(60, math.ceil(self.mean_seconds * self.capacity / self.workers)))

    @property
    def saturated(self) -> bool:
        """A new import would be refused now (queue full, or no place to receive)."""
        return self.admitted >= self.capacity or self.receiving_now >= self.max_receiving

    @contextlib.asynccontextmanager
    async def receiving(self) -> AsyncIterator[None]:
        if not self.places["receiving"].take(self.max_receiving):
            raise Overloaded(f"{self.receiving_now} uploads are being received; try again later", self.retry_after())
        try:
            yield
        finally:
            self.places["receiving"].release()

    @contextlib.asynccontextmanager
    async def admission(self) -> AsyncIterator[None]:
        if not self.places["admitted"].take(self.capacity):
            raise Overloaded(f"{self.running} imports are running and {self.waiting} waiting; try again later", self.retry_after())
        try:
            yield
        finally:
            self.places["admitted"].release()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        await self._wait_for_slot()
        started = time.monotonic()
        try:
            yield
        finally:
            self.places["running"].release()
            if self.waiters:
                self.waiters[0].set()  # this process's first waiter tries at once
            self.mean_seconds = 0.8 * self.mean_seconds + 0.2 * (time.monotonic() - started)

    async def _wait_for_slot(self) -> None:
        """Take a running place. The first waiter in line marks its arrival
        time (nanoseconds) in `waiting`: a free running place is left to an
        older waiter of another process, for at most `LEAVE_SECONDS` (a stopped
        process's waiter never takes it)."""
        arrived = time.monotonic_ns()  # CLOCK_MONOTONIC: one clock for every process
        turn = asyncio.Event()
        self.waiters.append(turn)
        mark: int | None = None
        left_since: float | None = None  # since when a free place is left to an older waiter
        try:
            while True:
                first = self.waiters[0] is turn
                if first:
                    mark = self.first_waiters.mark(arrived) if mark is None else mark
                    older = self.first_waiters.any_before(arrived)
                    if older and left_since is not None and time.monotonic() - left_since > LEAVE_SECONDS:
                        older = False  # waited on long enough: this waiter no longer defers
                    else:
                        left_since = (left_since or time.monotonic()) if older and self.running < self.workers else None
                    if not older and self.places["running"].take(self.workers):
                        return
                turn.clear()
                await _woken(turn, random.uniform(*POLL_SECONDS) if first else None)
        finally:
            if mark is not None:
                self.first_waiters.unmark(mark)
            if self.waiters[0] is turn:
                self.waiters.popleft()
                if self.waiters:
                    self.waiters[0].set()  # the next in line tries at once
            else:
                self.waiters.remove(turn)


async def _woken(turn: asyncio.Event, seconds: float | None) -> None:
    """Until `turn` is set, or `seconds` have passed."""
    timer = None if seconds is None else asyncio.get_running_loop().call_later(seconds, turn.set)
    try:
        await turn.wait()
    finally:
        if timer is not None:
            timer.cancel()
