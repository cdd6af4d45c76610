"""The bounded import queue: at most `workers` worker jobs run, `queue` more
wait, beyond that 503 with a Retry-After estimated from recent job times.
Uploads whose bodies are still arriving are bounded apart (`max_receiving`):
a request joins the import queue only once its body is on disk, so slow
clients hold receiving places, never import places.

Owns `ImportLimiter`: `receiving()` (a place to receive a body, or `Overloaded`),
`admission()` (a place in the queue, or `Overloaded`) and `slot()` (one of
the running places, waited for in order), and the figures `/readyz` reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator

from service.errors import Overloaded


class ImportLimiter:
    def __init__(self, workers: int, queue: int, max_receiving: int) -> None:
        self.workers = workers
        self.capacity = workers + queue
        self.max_receiving = max_receiving
        self.receiving_now = 0
        self.admitted = 0
        self.running = 0
        self.slots = asyncio.Semaphore(workers)
        self.mean_seconds = 0.5

    def retry_after(self) -> int:
        return max(1, min(60, math.ceil(self.mean_seconds * self.capacity / self.workers)))

    @property
    def saturated(self) -> bool:
        """A new import would be refused now (queue full, or no place to receive)."""
        return self.admitted >= self.capacity or self.receiving_now >= self.max_receiving

    @contextlib.asynccontextmanager
    async def receiving(self) -> AsyncIterator[None]:
        if self.receiving_now >= self.max_receiving:
            raise Overloaded(f"{self.receiving_now} uploads are being received; try again later", self.retry_after())
        self.receiving_now += 1
        try:
            yield
        finally:
            self.receiving_now -= 1

    @contextlib.asynccontextmanager
    async def admission(self) -> AsyncIterator[None]:
        if self.admitted >= self.capacity:
            waiting = self.admitted - self.running
            raise Overloaded(f"{self.running} imports are running and {waiting} waiting; try again later", self.retry_after())
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
