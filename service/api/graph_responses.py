"""A stored graph document as an answer: `graph_response`.

The store keeps a graph document gzip-compressed (`service.sandbox.protocol`,
task "graph"), or, rendered by an earlier release, as plain JSON. A client
that takes gzip (`Accept-Encoding`: browsers, httpx, `curl --compressed`) is
sent the stored bytes as they are, with `Content-Encoding: gzip` and their
length; any other is sent the JSON, inflated as it streams (zlib releases
the interpreter lock while it inflates, so that runs in a thread beside the
loop), without a length. Every answer says `Vary: Accept-Encoding`.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import Request
from fastapi.responses import Response, StreamingResponse

from service.api.tensor_responses import stream_range
from service.sandbox.protocol import GZIP_MAGIC, GZIP_WBITS
from service.store.byte_source import FileSource

READ_BYTES = 1 << 20
MEDIA_TYPE = "application/json"


def takes_gzip(request: Request) -> bool:
    """The request's Accept-Encoding names gzip (or `*`) with a weight above 0."""
    for item in request.headers.get("accept-encoding", "").split(","):
        coding, _, parameters = item.strip().partition(";")
        weight = parameters.strip().removeprefix("q=").strip() if parameters.strip().startswith("q=") else "1"
        if coding.strip().lower() in ("gzip", "x-gzip", "*"):
            try:
                return float(weight) > 0
            except ValueError:
                return False
    return False


def graph_response(request: Request, fd: int) -> Response:
    """The graph document open at `fd` (closed by the answer) for `request`."""
    size = os.fstat(fd).st_size
    compressed = os.pread(fd, len(GZIP_MAGIC), 0) == GZIP_MAGIC
    headers = {"Vary": "Accept-Encoding"}
    if compressed and not takes_gzip(request):
        if request.method == "HEAD":
            os.close(fd)
            return Response(status_code=200, headers=headers, media_type=MEDIA_TYPE)
        return StreamingResponse(_inflated(fd), headers=headers, media_type=MEDIA_TYPE)
    headers["Content-Length"] = str(size)
    if compressed:
        headers["Content-Encoding"] = "gzip"
    if request.method == "HEAD" or size == 0:
        os.close(fd)
        return Response(status_code=200, headers=headers, media_type=MEDIA_TYPE)
    return StreamingResponse(stream_range(b"", FileSource(fd), 0, 0, size - 1), headers=headers, media_type=MEDIA_TYPE)


async def _inflated(fd: int) -> AsyncIterator[bytes]:
    """The gzip file at `fd` inflated, a piece at a time; `fd` closed at the end."""
    inflater = zlib.decompressobj(GZIP_WBITS)

    def step(offset: int) -> tuple[bytes, int]:
        data = os.pread(fd, READ_BYTES, offset)
        return (inflater.decompress(data) if data else inflater.flush()), len(data)

    try:
        offset = 0
        while True:
            piece, read = await anyio.to_thread.run_sync(step, offset)
            if piece:
                yield piece
            if not read:
                return
            offset += read
    finally:
        os.close(fd)
