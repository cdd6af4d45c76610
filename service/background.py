"""Work repeated in the background while a block runs: `every(seconds, work, name)`.

An async context manager: a task runs `work` every `seconds` (first after
one interval) until the block ends, then is cancelled and awaited. Used by
the app's lifespan for the readiness probe and the sweep of expired
resumable uploads.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable


@contextlib.asynccontextmanager
async def every(seconds: float, work: Callable[[], Awaitable[None]], name: str) -> AsyncIterator[None]:
    async def loop() -> None:
        while True:
            await asyncio.sleep(seconds)
            await work()

    task = asyncio.create_task(loop(), name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
