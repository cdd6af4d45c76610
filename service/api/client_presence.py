"""Work done for a client only while it waits: `while_client_waits`.

A request whose answer takes a queue place and workers (an import, a
recheck) runs its use case under a cancel scope that ends when its client
goes: a watcher reads the request's ASGI `receive()` once the body is read
(after it, uvicorn's next message is `http.disconnect`, sent when the
connection closes; httpx's ASGI transport sends it once the response is
complete), and cancels the use case when it comes. The use case sees only
the cancellation: a job still queued leaves the queue and takes no place;
a running one has its workers ended (`service.imports.workers`). The
request then ends as a client gone does (`ClientDisconnect`: one INFO line,
the request log's 499).

`body_read` is for a request whose body the use case itself reads (an
upload's, streamed into the pipeline): the watcher starts once it is set,
so it never takes a chunk of the body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from fastapi import Request
from starlette.requests import ClientDisconnect

T = TypeVar("T")


async def while_client_waits(request: Request, work: Callable[[], Awaitable[T]], body_read: anyio.Event | None = None) -> T:
    """`await work()`, cancelled if the client of `request` goes meanwhile (then ClientDisconnect)."""
    gone = False

    async def watch(scope: anyio.CancelScope) -> None:
        nonlocal gone
        if body_read is not None:
            await body_read.wait()
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                gone = True
                scope.cancel()
                return

    with anyio.CancelScope() as scope:
        watcher = asyncio.create_task(watch(scope), name="client-presence")
        try:
            result = await work()
        finally:
            watcher.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait([watcher])
    if gone:
        raise ClientDisconnect()
    return result
