"""The bounded import queue: at most `workers` worker jobs run, `queue` more
wait, beyond that 503 with a Retry-After estimated from recent job times.

Owns `ImportLimiter`: `admission()` (a place in the queue, or the 503
problem) and `slot()` (one of the running places, waited for in order).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator

from service.problems import ProblemError


class ImportLimiter:
    def __init__(self, workers: int, queue: int) -> None:
        self.workers = workers
        self.capacity = workers + queue
        self.admitted = 0
        self.running = 0
        self.slots = asyncio.Semaphore(workers)
        self.mean_seconds = 0.5

    def retry_after(self) -> int:
        return max(1, min(60, math.ceil(self.mean_seconds * self.capacity / self.workers)))

    @contextlib.asynccontextmanager
    async def admission(self) -> AsyncIterator[None]:
        if self.admitted >= self.capacity:
            raise ProblemError(
                "overloaded",
                f"{self.running} imports are running and {self.admitted - self.running} waiting; try again later",
                headers={"Retry-After": str(self.retry_after())},
            )
        self.admitted += 1
        try:
            yield
        finally:
            self.admitted -= 1

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self.slots:
            self.running += 1
            started = time.monotonic()
            try:
                yield
            finally:
                self.running -= 1
                self.mean_seconds = 0.8 * self.mean_seconds + 0.2 * (time.monotonic() - started)
