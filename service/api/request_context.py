"""What is known about the request being served, wherever the code is.

Owns `RequestInfo` (request id, tenant, model id, whether the client went
away before its answer) and `current_request()`.
The request-log middleware (`service.observability.request_log`) sets it for each request;
the authentication dependency fills in the tenant, routes the model id; the
problem bodies carry the request id. It is a mutable object in a context
variable, so fields set in a worker thread are seen by the middleware.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass


@dataclass
class RequestInfo:
    request_id: str
    tenant: str | None = None
    model_id: str | None = None
    client_gone: bool = False  # set by service.api.problems.DisconnectMiddleware


_CURRENT: ContextVar[RequestInfo | None] = ContextVar("request_info", default=None)


def current_request() -> RequestInfo | None:
    return _CURRENT.get()


def begin_request(request_id: str) -> RequestInfo:
    info = RequestInfo(request_id)
    _CURRENT.set(info)
    return info
