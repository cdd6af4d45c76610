"""Work in the background while a block runs: `running(work, name)`, `every(seconds, work, name)`, `stopped(tasks)`.

Async context managers: a task runs `work` (once, or every `seconds`, first
after one interval) until the block ends, then is cancelled and awaited (a
step under way in a thread finishes first). Used by the app's lifespan for
the readiness probe, the sweep of expired resumable uploads and the store's
opening while its storage does not answer, and by the registries' hooks and
the Harbor scanner, which stop the tasks they started with `stopped`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import Any


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    task = asyncio.create_task(work, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def every(seconds: float, work: Callable[[], Awaitable[None]], name: str) -> contextlib.AbstractAsyncContextManager[None]:
    async def loop() -> None:
        while True:
            await asyncio.sleep(seconds)
            await work()

    return running(loop(), name)


async def stopped(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel every one of `tasks`, then wait for each to end (whatever it ends with: each handles its own end)."""
    stopping = list(tasks)
    for task in stopping:
        task.cancel()
    for task in stopping:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
