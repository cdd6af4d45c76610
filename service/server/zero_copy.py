"""Zero-copy file responses, the server's end: the kernel sends a file's bytes
(`sendfile`), never Python.

Owns `offer_zero_copy(cycle, loop)`, the server's end of ASGI's zero-copy
send extension (`http.response.zerocopy`,
https://asgi.readthedocs.io/en/latest/extensions.html#zero-copy-send), which
the hardened protocol (`service.server.h11_protocol`) calls for each request
cycle of a plain-TCP connection: the scope lists the extension, and the
cycle's `send` takes a `{"type": "http.response.zerocopy", "file", "offset",
"count", "more_body"}` message, framing the bytes with h11 (a placeholder of
the right length goes through `send_with_data_passthrough`, as h11's own
documentation suggests for sendfile) and sending them with `loop.sendfile`
(`os.sendfile` on Linux). The app's end is
`service.api.file_range_response.FileRangeResponse`.

A file found shorter than the range while sending (truncated since it was
checked) ends the connection: the client sees a short body (shorter than
its Content-Length), never another response's bytes. The kernel may have
sent zeros for the part cut off before it noticed (measured on ext4), which
the short body, or the next request's 409, tells apart.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import h11
from starlette.types import Message

from service.api.file_range_response import ZERO_COPY


class _Span:
    """Stands for `count` bytes of a file in h11's output (h11 needs only their length)."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count


def offer_zero_copy(cycle: Any, loop: asyncio.AbstractEventLoop) -> None:
    """List the extension in `cycle`'s scope and teach its `send` the message
    (`cycle`: uvicorn's h11 RequestResponseCycle, before its app runs)."""
    cycle.scope.setdefault("extensions", {})[ZERO_COPY] = {}
    cycle.send = _ZeroCopySend(weakref.ref(cycle), loop)


class _ZeroCopySend:
    """A cycle's `send` that also takes the zero-copy message. It holds its
    cycle weakly: a closure over it, kept as the cycle's own attribute, made
    each request's objects a reference cycle, left for the cyclic collector
    (whose passes over them kept `/healthz` waiting under load)."""

    __slots__ = ("cycle", "loop")

    def __init__(self, cycle: weakref.ReferenceType[Any], loop: asyncio.AbstractEventLoop) -> None:
        self.cycle = cycle
        self.loop = loop

    async def __call__(self, message: Message) -> None:
        cycle = self.cycle()
        if cycle is None:
            return  # the request is over: nobody reads
        if message["type"] != ZERO_COPY:
            await type(cycle).send(cycle, message)
            return
        await _send_file(cycle, self.loop, message)


async def _send_file(cycle: Any, loop: asyncio.AbstractEventLoop, message: Message) -> None:
    """Frame the message's file range with h11 and send it with `loop.sendfile`."""
    if cycle.flow.write_paused and not cycle.disconnected:
        await cycle.flow.drain()
    if cycle.disconnected:
        return
    if not cycle.response_started or cycle.response_complete:
        raise RuntimeError(f"{ZERO_COPY} must come after http.response.start and before the response's end")
    count = int(message["count"])
    if cycle.scope["method"] != "HEAD" and count > 0:
        span = _Span(count)
        for piece in cycle.conn.send_with_data_passthrough(h11.Data(data=span)):  # type: ignore[arg-type]  # h11 needs its len() only
            if piece is not span:
                cycle.transport.write(piece)
                continue
            try:
                sent = await loop.sendfile(cycle.transport, message["file"], int(message.get("offset", 0)), count)
            except (ConnectionError, RuntimeError):  # the client went away (RuntimeError: the transport is closing)
                sent = -1
            if sent != count:  # gone, or the file came up short: h11 counted bytes that were not sent
                cycle.disconnected = True
                cycle.transport.close()
                return
    if not message.get("more_body", False):
        await type(cycle).send(cycle, {"type": "http.response.body", "body": b"", "more_body": False})
