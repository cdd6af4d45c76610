"""Liveness and readiness: `/healthz` (the process answers) and `/readyz`
(the fork server forks a limited worker, and the store is writable)."""

from __future__ import annotations

import logging

import anyio.to_thread
from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.models import Health, Readiness
from service.openapi_doc import problem_responses
from service.problems import ProblemError
from service.state import ServiceDep

log = logging.getLogger("service")
router = APIRouter(tags=["health"])


@router.api_route("/healthz", methods=["GET", "HEAD"], response_model=Health, summary="The process is alive")
async def healthz() -> Health:
    return Health(status="ok")


@router.api_route(
    "/readyz",
    methods=["GET", "HEAD"],
    response_model=Readiness,
    summary="Fork server up and store writable",
    responses=problem_responses(503),
)
async def readyz(service: ServiceDep) -> JSONResponse:
    try:
        isolation = await anyio.to_thread.run_sync(service.sandbox.probe)
        fork_server = True
    except Exception as error:
        log.warning("readiness probe failed: %s", error)
        isolation, fork_server = service.sandbox.isolation, False
    writable = await anyio.to_thread.run_sync(service.store.writable)
    if not (fork_server and writable):
        raise ProblemError(
            "not-ready", f"fork server {'up' if fork_server else 'down'}, store {'writable' if writable else 'not writable'}"
        )
    readiness = Readiness(
        status="ready",
        fork_server=fork_server,
        store_writable=writable,
        network_isolation=isolation,
        imports_running=service.limiter.running,
        imports_waiting=service.limiter.admitted - service.limiter.running,
    )
    return JSONResponse(readiness.model_dump())
