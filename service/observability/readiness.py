"""Readiness, checked in the background: `/readyz` only reads the last check.

Owns `ReadinessProbe`. Every `INTERVAL_SECONDS` a task in the front end forks
one probe worker (the fork server is up, and what confines a worker) and
writes and removes a probe file in the store (it is writable), and asks
object storage and the index's database, where the store has them, whether
they answer; `/readyz`
answers from the last result and reads the store's free space itself (one
statvfs), so a call forks nothing and writes nothing, and costs about what
`/healthz` costs, however often it comes.
A result older than `STALE_AFTER_SECONDS` (the check is stuck) counts as not
ready. While the store is not open yet (`service.store.opening`: its object
storage or database did not answer at start), the store is not asked: the
check carries what the opening says is missing, and is made again as soon
as the store opens (`refresh`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Final

import anyio.to_thread

from service.background import every
from service.errors import StorageUnavailable
from service.sandbox.supervisor import Sandbox
from service.store.model_store import Store
from service.store.opening import StoreOpening

log = logging.getLogger("service")
INTERVAL_SECONDS: Final = 5.0
STALE_AFTER_SECONDS: Final = 60.0
PROBE_TIMEOUT_SECONDS: Final = 10.0


@dataclass(frozen=True)
class ReadinessCheck:
    fork_server: bool
    isolation: str
    store_writable: bool
    storage_problem: str  # empty when object storage and the index's database answer (or there are none)
    checked_at: float  # time.monotonic()

    @property
    def stale(self) -> bool:
        return time.monotonic() - self.checked_at > STALE_AFTER_SECONDS


class ReadinessProbe:
    def __init__(self, sandbox: Sandbox, store: Store, opening: StoreOpening | None = None) -> None:
        self._sandbox = sandbox
        self._store = store
        self._opening = opening or StoreOpening.done()
        self.last: ReadinessCheck | None = None

    def check(self, probe: bool = True) -> ReadinessCheck:
        """One check (blocking: run it in a thread); without `probe`, the
        sandbox's own probe at its start stands for the fork server's."""
        isolation, fork_server = self._sandbox.isolation, True
        if probe:
            try:
                isolation = self._sandbox.probe(timeout=PROBE_TIMEOUT_SECONDS)
            except Exception as error:
                log.warning("readiness probe failed: %s", error)
                fork_server = False
        if not self._opening.opened:  # nothing of the store to ask yet
            problem = f"the store is not open yet: {self._opening.problem}"
            return ReadinessCheck(fork_server, isolation, False, problem, time.monotonic())
        try:
            self._store.check()
            storage_problem = ""
        except StorageUnavailable as error:
            storage_problem = error.operator  # naming what is at fault: the bucket, the key, the endpoint, the database
        return ReadinessCheck(fork_server, isolation, self._store.writable(), storage_problem, time.monotonic())

    async def refresh(self) -> None:
        """Check now, without a probe fork (the store has just opened)."""
        self.last = await anyio.to_thread.run_sync(self.check, False)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Check once (the sandbox has just forked its start probe: no second
        fork), then every INTERVAL_SECONDS in the background while the block runs."""
        self.last = await anyio.to_thread.run_sync(self.check, False)

        async def probe() -> None:
            self.last = await anyio.to_thread.run_sync(self.check)

        async with every(INTERVAL_SECONDS, probe, "readiness-probe"):
            yield
