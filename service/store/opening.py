"""Opening a store whose dependencies may not answer yet: `StoreOpening`.

A replica over object storage or PostgreSQL (`--store s3://...`,
`--database`) may start before them (a cold start of a compose stack or a
cluster; SeaweedFS's S3 port open before its filer is ready). It does not
exit: `run` begins as the service starts (beside the sandbox's start),
the lifespan serves once its first try has ended (at most
`FIRST_WAIT_SECONDS`: `/healthz` answers), and it goes on in the
background, trying again after each `StorageUnavailable` (a dependency that
does not answer), waiting `backoff_delays` between tries
(0.5 s doubling to 10 s, each jittered down by up to half, so a fleet's
replicas do not knock in step). Until it succeeds, `problem` names what is
missing, for the operator (`/readyz`: the endpoint that refuses, the bucket
that does not exist, the access key refused, the database and user), and
`require` is the 503 `storage-unavailable`, with `Retry-After` and what is
missing in kind, of every request that needs the store
(`service.api.dependencies.get_service`). Any other error (no dependency to wait for:
a bug, a cache folder that cannot be written) ends the retries: logged with
its traceback, it stays the store's `problem`, and the replica stays up and
never ready until restarted. A store entirely on this machine (a folder, or
memory) is not opened here: the lifespan opens it before serving, and any
error of it refuses the start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

from service.background import running
from service.errors import StorageUnavailable

log = logging.getLogger("service.store")

FIRST_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 10.0
# The lifespan waits for the first try to end, at most this long, before
# serving: a store that answers is open before the first request however
# busy the machine; one that does not says so within its clients' timeouts
# (PostgreSQL's 3 s, object storage's retries: about 1 s if refused, up to
# 3 x its 3 s connection timeout if nothing answers at all).
FIRST_WAIT_SECONDS = 10.0


def backoff_delays(first: float = FIRST_DELAY_SECONDS, cap: float = MAX_DELAY_SECONDS, rng: random.Random | None = None) -> Iterator[float]:
    """Seconds to wait before each next try: `first` doubling up to `cap`,
    each a random point of its upper half (jitter: replicas started together
    spread their tries)."""
    rng = rng or random.Random()
    delay = first
    while True:
        yield delay * rng.uniform(0.5, 1.0)
        delay = min(cap, delay * 2)


class StoreOpening:
    def __init__(self, attempt: Callable[[], None], undo: Callable[[], None], *, delays: Iterator[float] | None = None) -> None:
        """`attempt`: open the store and what needs it (blocking); `undo`:
        close what a failed attempt opened, so the next starts afresh."""
        self._attempt = attempt
        self._undo = undo
        self._delays = delays if delays is not None else backoff_delays()
        self.opened = False
        self.problem = "the store is being opened"  # what is missing, while not opened (the operator's words)
        self.client_problem = self.problem  # the same, as a client is told it
        self.failed = False  # an error no retry mends: the retries have ended
        self.attempts = 0
        self.first_try_ended = asyncio.Event()
        self._next_try = time.monotonic()  # when the next attempt starts (monotonic)

    @classmethod
    def done(cls) -> StoreOpening:
        """An opening that has succeeded already (the store was opened before serving)."""
        opening = cls(lambda: None, lambda: None)
        opening.opened, opening.problem, opening.client_problem = True, "", ""
        return opening

    def require(self) -> None:
        """StorageUnavailable (503, Retry-After: until the next try) while the store is not open."""
        if not self.opened:
            until_next_try = math.ceil(self._next_try - time.monotonic())
            raise StorageUnavailable(f"the store is not open yet: {self.client_problem}", retry_after=max(1, until_next_try))

    def try_once(self) -> bool:
        """One attempt (blocking): True once the store is open. Raises what is no
        unreachable dependency (after `undo`)."""
        self.attempts += 1
        try:
            self._attempt()
        except StorageUnavailable as error:
            self.problem, self.client_problem = error.operator, error.detail
            self._undo()
            return False
        except BaseException:
            self._undo()
            raise
        self.opened, self.problem, self.client_problem = True, "", ""
        return True

    async def run(self, when_open: Callable[[], Awaitable[None]]) -> None:
        """Try until the store opens, then await `when_open()`; cancelled with the lifespan.
        `first_try_ended` is set once the first try has failed, or the store is open and
        `when_open` done."""
        try:
            while True:
                try:
                    opened = await self._try_to_the_end()
                except Exception as error:
                    self.failed = True
                    self.problem = self.client_problem = (
                        f"the store could not be opened ({type(error).__name__}: {error}); restart the service once this is mended"
                    )
                    log.exception("the store could not be opened; no more tries")
                    return
                if opened:
                    if self.attempts > 1:
                        log.info("the store is open, after %d tries", self.attempts)
                    await when_open()
                    return
                self.first_try_ended.set()
                delay = next(self._delays)
                self._next_try = time.monotonic() + delay
                log.warning("the store could not be opened (try %d): %s; again in %.1f s", self.attempts, self.problem, delay)
                await asyncio.sleep(delay)
        finally:
            self.first_try_ended.set()

    async def _try_to_the_end(self) -> bool:
        """`try_once` in a thread; a cancellation waits for it to end (then the
        lifespan may close the store: no try opens it behind its back)."""
        attempt = asyncio.ensure_future(asyncio.to_thread(self.try_once))
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await attempt
            raise

    @contextlib.asynccontextmanager
    async def in_background(self, when_open: Callable[[], Awaitable[None]]) -> AsyncIterator[None]:
        """`run` as a task while the block runs (nothing, if the store is open
        already); at its end the task is cancelled, and a try under way
        finishes first (it runs in a thread)."""
        if self.opened:
            yield
            return
        async with running(self.run(when_open), "store-opening"):
            yield

    async def first_try(self) -> None:
        """Until the first try has ended, at most `FIRST_WAIT_SECONDS`: a store
        that answers is open before the first request, however busy the
        machine; one that does not is no reason to wait longer."""
        if not self.opened:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.first_try_ended.wait(), FIRST_WAIT_SECONDS)
