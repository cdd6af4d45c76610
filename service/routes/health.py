"""Liveness and readiness: `/healthz` (the process answers, and which build of
the importer it runs: `importer_build`, compiled or pure) and `/readyz`
(the fork server forks a limited worker, and the store is writable; it also
reports what confines that worker: `network_isolation` and `worker_sandbox`,
read from the worker's own report by `service.sandbox.describe_isolation`)."""

from __future__ import annotations

import logging

import anyio.to_thread
from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from importer import BUILD
from service.models import Health, Readiness
from service.openapi_doc import problem_responses
from service.problems import ProblemError
from service.sandbox import describe_isolation
from service.state import ServiceDep

log = logging.getLogger("service")
router = APIRouter(tags=["health"])


@router.api_route("/healthz", methods=["GET", "HEAD"], response_model=Health, summary="The process is alive")
async def healthz() -> Health:
    return Health(status="ok", importer_build=BUILD)


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
    network_isolation, worker_sandbox = describe_isolation(isolation)
    writable = await anyio.to_thread.run_sync(service.store.writable)
    free = await anyio.to_thread.run_sync(service.store.free_bytes)
    if free < service.settings.store_min_free:
        raise ProblemError("not-ready", f"the store has {free} bytes free, below --store-min-free ({service.settings.store_min_free})")
    if not (fork_server and writable):
        raise ProblemError(
            "not-ready", f"fork server {'up' if fork_server else 'down'}, store {'writable' if writable else 'not writable'}"
        )
    readiness = Readiness(
        status="ready",
        fork_server=fork_server,
        store_writable=writable,
        network_isolation=network_isolation,
        worker_sandbox=worker_sandbox,
        imports_running=service.limiter.running,
        imports_waiting=service.limiter.admitted - service.limiter.running,
        import_capacity=service.limiter.capacity,
        uploads_receiving=service.limiter.receiving_now,
        max_receiving=service.limiter.max_receiving,
        saturated=service.limiter.saturated,
        store_free_bytes=free,
    )
    return JSONResponse(readiness.model_dump())


@router.get("/metrics", summary="Prometheus metrics (text exposition format); no token needed", response_class=Response)
async def metrics(service: ServiceDep) -> Response:
    body, content_type = await anyio.to_thread.run_sync(service.metrics.exposition)
    return Response(body, media_type=content_type)
