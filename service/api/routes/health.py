"""Liveness, readiness and metrics: `/healthz`, `/readyz` and `/metrics`.

`/healthz`: the process answers, and which build of the importer it runs
(`importer_build`: compiled or pure). `/readyz`: the last background check of
`service.observability.readiness` (the fork server forks a limited worker,
the store is open (a replica started before its object storage or database
opens it in the background: until then 503 `not-ready` naming what does not
answer), writable, and its object storage and database answer); it also reports what confines that worker:
`network_isolation`, `worker_sandbox` and `landlock_abi`, read from the
worker's own report by `service.sandbox.supervisor.describe_isolation`.
`/metrics`: Prometheus text (with API keys, only for a key with the `metrics`
scope: its store totals span every tenant)."""

from __future__ import annotations

import json
import logging
import time

import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response

from importer import BUILD
from service.access.callers import MetricsCaller
from service.api.dependencies import MetricsDep, StartingServiceDep
from service.api.openapi import problem_responses
from service.api.problems import ProblemError
from service.api.schemas import Health, Readiness
from service.sandbox.supervisor import describe_isolation

log = logging.getLogger("service")
router = APIRouter(tags=["health"])


@router.api_route("/healthz", methods=["GET", "HEAD"], response_model=Health, summary="The process is alive")
async def healthz() -> Health:
    return Health(status="ok", importer_build=BUILD)


@router.api_route(
    "/readyz",
    methods=["GET", "HEAD"],
    response_model=Readiness,
    summary="Fork server up and store writable (checked in the background)",
    responses=problem_responses(503),
)
async def readyz(request: Request, service: StartingServiceDep) -> Response:
    if not service.opening.opened:  # nothing of the store to read yet (not even its free space)
        raise ProblemError("not-ready", f"the store is not open yet: {service.opening.problem}")
    check = service.readiness.last
    if check is None or check.stale:
        raise ProblemError("not-ready", "the readiness check has not run for a while")
    network_isolation, worker_sandbox, landlock_abi = describe_isolation(check.isolation)
    free = service.store.free_bytes()  # one statvfs: as of now
    if free < service.settings.store_min_free:
        raise ProblemError("not-ready", f"the store has {free} bytes free, below --store-min-free ({service.settings.store_min_free})")
    if not (check.fork_server and check.store_writable):
        raise ProblemError(
            "not-ready",
            f"fork server {'up' if check.fork_server else 'down'}, store {'writable' if check.store_writable else 'not writable'}",
        )
    if check.storage_problem:
        raise ProblemError("not-ready", check.storage_problem)
    admission = service.admission
    readiness = {  # the fields of `Readiness`, as a plain dict: this answer costs about what /healthz's does
        "status": "ready",
        "fork_server": check.fork_server,
        "store_writable": check.store_writable,
        "network_isolation": network_isolation,
        "worker_sandbox": worker_sandbox,
        "landlock_abi": landlock_abi,
        "checked_seconds_ago": round(time.monotonic() - check.checked_at, 3),
        "imports_running": admission.running,
        "imports_waiting": admission.waiting,
        "import_capacity": admission.capacity,
        "uploads_receiving": admission.receiving_now,
        "max_receiving": admission.max_receiving,
        "saturated": admission.saturated,
        "tenant_import_places": admission.tenant_limit(admission.capacity),
        "tenant_receiving_places": admission.tenant_limit(admission.max_receiving),
        "tenants_busy": len(admission.busy_tenants()),
        "store_free_bytes": free,
        "signing_key": attester.key.fingerprint if (attester := service.imports.attester) is not None else None,
        "verify_keys": attester.verify_fingerprints if attester is not None else [],
    }
    readiness["worker_memory_budget_bytes"], readiness["worker_memory_reserved_bytes"] = admission.memory_in_bytes
    principal = service.keys.principal(request.headers.get("authorization"))
    if principal is not None:  # the caller's own places; never another tenant's
        own = admission.for_tenant(principal.tenant)
        readiness["yours"] = {"running": own.running, "waiting": own.waiting, "receiving": own.receiving}
    return Response(json.dumps(readiness, separators=(",", ":")).encode(), media_type="application/json")


@router.api_route(
    "/metrics",
    methods=["GET", "HEAD"],
    summary="Prometheus metrics (text exposition format); with API keys, a key with the metrics scope",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}, **problem_responses(401, 403)},
)
async def metrics(exposed: MetricsDep, caller: MetricsCaller) -> Response:
    body, content_type = await anyio.to_thread.run_sync(exposed.exposition)
    return Response(body, media_type=content_type)
