"""Zero-copy file responses: the kernel sends a file's bytes (`sendfile`),
never Python.

Owns both ends of ASGI's zero-copy send extension (`http.response.zerocopy`,
https://asgi.readthedocs.io/en/latest/extensions.html#zero-copy-send):

- the server's, `offer_zero_copy(cycle, loop)`, which the hardened protocol
  (`service.http.protocol`) calls for each request cycle of a plain-TCP
  connection: the scope lists the extension, and the cycle's `send` takes a
  `{"type": "http.response.zerocopy", "file", "offset", "count",
  "more_body"}` message, framing the bytes with h11 (a placeholder of the
  right length goes through `send_with_data_passthrough`, as h11's own
  documentation suggests for sendfile) and sending them with
  `loop.sendfile` (`os.sendfile` on Linux);
- the app's, `FileRangeResponse`: a byte range of an open local file, sent
  that way where the server offers it, else in chunks read by the source
  (`ByteSource.chunks`), memory bounded either way.

A file found shorter than the range while sending (truncated since it was
checked) ends the connection: the client sees a short body (shorter than
its Content-Length), never another response's bytes. The kernel may have
sent zeros for the part cut off before it noticed (measured on ext4), which
the short body, or the next request's 409, tells apart.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from typing import Any

import h11
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from service.store.byte_source import FileSource

ZERO_COPY = "http.response.zerocopy"


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


class FileRangeResponse(Response):
    """`prefix` (a .npy header, say) then bytes [first, first + count) of the
    open local file `source`, which the response closes. Status and headers
    (Content-Length among them) are the caller's."""

    def __init__(
        self, prefix: bytes, source: FileSource, first: int, count: int, status_code: int, headers: dict[str, str], media_type: str
    ) -> None:
        super().__init__(None, status_code, headers, media_type)
        self.prefix, self.source, self.first, self.count = prefix, source, first, count

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            if self.prefix:
                await send({"type": "http.response.body", "body": self.prefix, "more_body": True})
            if ZERO_COPY in scope.get("extensions", {}):
                with os.fdopen(self.source.fd, "rb", buffering=0, closefd=False) as file:
                    await send({"type": ZERO_COPY, "file": file, "offset": self.first, "count": self.count, "more_body": False})
                return
            async for chunk in self.source.chunks(self.first, self.count):
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.source.close()
