"""Zero-copy file responses, the app's end: `FileRangeResponse`, a byte range
of an open local file.

Sent with ASGI's zero-copy send extension (`http.response.zerocopy`,
https://asgi.readthedocs.io/en/latest/extensions.html#zero-copy-send) where
the server offers it (the service's own server does on plain TCP:
`service.server.zero_copy`), else in chunks read by the source
(`ByteSource.chunks`); memory bounded either way.
"""

from __future__ import annotations

import os

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from service.store.byte_source import FileSource

ZERO_COPY = "http.response.zerocopy"  # the extension's name, in a scope's "extensions" and a message's "type"


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
