"""One log line per request, its id on every answer, and the HTTP metrics.

Owns `RequestLogMiddleware` (pure ASGI, the outermost layer): it takes the
client's `X-Request-ID` when it is well formed (1 to 128 of `A-Z a-z 0-9 . _ : -`)
or makes one, keeps it in the request context (`service.api.request_context`, so
problem bodies carry it), echoes it on the response, and when the response is
done logs one line on `service.access` (request id, method, route template,
status, duration, tenant, model id) and counts the request in the metrics by
route template, never by raw path, and by method among a fixed set (the
methods the API routes; any other is `other`), so made-up methods cannot grow
`/metrics`. A request whose client went away before any answer
(`service.api.problems.DisconnectMiddleware`) is logged and counted with
status 499, as nginx does, not as a 500: a resumable upload's PATCH cut
short is routine.
"""

from __future__ import annotations

import logging
import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from service.api.request_context import begin_request
from service.observability.metrics import Metrics

access = logging.getLogger("service.access")
CLIENT_GONE = 499  # nginx's "client closed request": gone before its answer, which is not the service's error
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
ROUTED_METHODS = frozenset({"GET", "HEAD", "POST", "DELETE", "PATCH", "OPTIONS"})  # the metrics' method label: one of these, or "other"


def method_label(method: str) -> str:
    return method if method in ROUTED_METHODS else "other"


def _route_template(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class RequestLogMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = next((value.decode("latin-1") for name, value in scope["headers"] if name == b"x-request-id"), "")
        request_id = offered if REQUEST_ID.fullmatch(offered) else uuid.uuid4().hex
        info = begin_request(request_id)
        started = time.perf_counter()
        status = 500
        started_response = False

        async def send_with_id(message: Message) -> None:
            nonlocal status
            nonlocal started_response
            if message["type"] == "http.response.start":
                started_response = True
                status = int(message["status"])
                headers = [(name, value) for name, value in message.get("headers", []) if name.lower() != b"x-request-id"]
                message = {**message, "headers": [*headers, (b"x-request-id", request_id.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            if info.client_gone and status == 500 and not started_response:
                status = CLIENT_GONE
            seconds = time.perf_counter() - started
            route = _route_template(scope)
            method = str(scope.get("method", ""))
            self.metrics.requests.labels(route, method_label(method), str(status)).inc()
            self.metrics.request_seconds.labels(route).observe(seconds)
            fields = {
                "event": "request",
                "request_id": request_id,
                "method": method,
                "route": route,
                "status": status,
                "duration_ms": round(seconds * 1000, 3),
                "tenant": info.tenant,
                "model_id": info.model_id,
            }
            access.info(
                "%s %s %s %d %.1f ms tenant=%s model=%s", request_id, method, route, status, seconds * 1000, info.tenant, info.model_id,
                extra={"fields": fields},
            )  # fmt: skip
