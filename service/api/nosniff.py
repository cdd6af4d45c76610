"""`NoSniffMiddleware` (pure ASGI): `X-Content-Type-Options: nosniff` on every
response of the app that lacks it.

It touches only the `http.response.start` message, so streaming bodies and
HEAD are as before. The server's own answers (`service.server.h11_protocol`:
a 400, 408 or 431 written before the app sees a request) carry the same header.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

NOSNIFF_RAW_HEADER = (b"x-content-type-options", b"nosniff")


class NoSniffMiddleware:
    """Adds `X-Content-Type-Options: nosniff` to every HTTP response that lacks it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_nosniff(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                if not any(name.lower() == NOSNIFF_RAW_HEADER[0] for name, _ in headers):
                    message = {**message, "headers": [*headers, NOSNIFF_RAW_HEADER]}
            await send(message)

        await self.app(scope, receive, send_with_nosniff)
