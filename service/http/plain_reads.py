"""Hot read routes without FastAPI's per-request dependency solving.

Owns `plain_read_route(handler)`: a route class for a read route whose
requests are nearly always plain (no query string: a tensor's raw bytes,
say). Such a request goes straight to `handler(request)`, which reads the
path parameters, authorizes the caller (`service.access.callers.authorize`)
and answers; any other request (a query string to validate) takes the
route's full FastAPI handler. Both end in the same function, so the answers
are the same; the plain one skips the dependency solving and parameter
validation that cost more than the read itself (measured: about 40% of a
24-byte tensor GET's time in the app). Errors raised either way reach the
app's problem handlers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute

PlainHandler = Callable[[Request], Awaitable[Response]]


def plain_read_route(handler: PlainHandler) -> type[APIRoute]:
    """An APIRoute class whose requests without a query string go to `handler`."""

    class PlainReadRoute(APIRoute):
        def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
            full = super().get_route_handler()

            async def route_handler(request: Request) -> Response:
                if request.scope.get("query_string"):
                    return await full(request)
                return await handler(request)

            return route_handler

    return PlainReadRoute
