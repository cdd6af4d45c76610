"""Who may do what: the FastAPI dependencies that turn a request into a
`Principal` with the scope a route needs.

Owns `ImportCaller`, `ReadCaller`, `DeleteCaller` and `MetricsCaller` (route
parameters), `authorize` (the same, for a route that solves no dependencies:
the tensor GET, `service.api.routes.tensors`), the 401 (no or unknown credentials:
`WWW-Authenticate: Bearer` and a problem) and 403 (a scope missing) answers, and the audit line of every
refusal (never the secret). `/metrics` needs the `metrics` scope when the
service has API keys (its store totals span every tenant; without keys the
anonymous caller has every scope). `/healthz`, `/readyz`, the explorer and the
API documents take no caller, so they need no token.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Annotated

from fastapi import Depends, Request

from service.access.keys import METRICS_SCOPE, Principal
from service.api.dependencies import ServiceDep
from service.api.problems import ProblemError
from service.api.request_context import current_request
from service.api.state import Service

audit = logging.getLogger("service.audit")


async def authorize(request: Request, service: Service, scope: str) -> Principal:
    """The caller of `request` if its key has `scope`; else 401 or 403 (audited)."""
    authorization = request.headers.get("authorization")
    principal = service.keys.principal(authorization)
    info = current_request()
    if principal is None:
        reason = "no credentials" if authorization is None else "unknown or malformed credentials"
        audit.info("credentials refused: %s", reason, extra={"fields": {"event": "auth-refused", "reason": reason}})
        raise ProblemError(
            "unauthorized", f"{reason}: send Authorization: Bearer <secret>", headers={"WWW-Authenticate": 'Bearer realm="onnx-import"'}
        )
    if info is not None:
        info.tenant = principal.tenant
    if scope not in principal.scopes:
        audit.info(
            "scope refused: %s lacks %s", principal.tenant, scope,
            extra={"fields": {"event": "scope-refused", "tenant": principal.tenant, "scope": scope}},
        )  # fmt: skip
        raise ProblemError("forbidden", f"this key's scopes do not include {scope!r}")
    return principal


def _caller(scope: str) -> Callable[[Request, ServiceDep], Coroutine[None, None, Principal]]:
    async def caller(request: Request, service: ServiceDep) -> Principal:  # async: a plain def costs a thread hop per request
        return await authorize(request, service, scope)

    return caller


ImportCaller = Annotated[Principal, Depends(_caller("import"))]
ReadCaller = Annotated[Principal, Depends(_caller("read"))]
DeleteCaller = Annotated[Principal, Depends(_caller("delete"))]
MetricsCaller = Annotated[Principal, Depends(_caller(METRICS_SCOPE))]
