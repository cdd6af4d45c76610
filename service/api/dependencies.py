"""The FastAPI dependencies that hand a route what it needs of the service:
`ImportsDep`, `UploadsDep`, `DiffsDep`, `MetricsDep`, `ServiceDep`, `StartingServiceDep`.

`ImportsDep` is the parts the import use cases take
(`service.imports.parts.ImportParts`), all a route needs that asks the
store and runs use cases; `UploadsDep` the resumable uploads in the making
(`service.store.uploads.ResumableUploads`); `DiffsDep` the comparisons of two
models (`service.imports.diffs.Diffs`); `MetricsDep` the metrics. Each
is the 503 `storage-unavailable` while the store is not open yet
(`service.store.opening`: a replica started before its object storage or
database), and so is `ServiceDep`, the whole service, which only the
callers' authorization takes (`service.access.callers`: the API keys).
`StartingServiceDep` is the whole service (`service.api.state.Service`,
set up by the app's lifespan) either way: for `/readyz`, which says what is
missing, and for the plain read routes, which skip FastAPI's dependencies."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.api.state import Service
from service.imports.diffs import Diffs
from service.imports.parts import ImportParts
from service.observability.metrics import Metrics
from service.store.uploads import ResumableUploads


async def get_starting_service(request: Request) -> Service:  # async: a plain def would cost a thread hop per request
    service: Service = request.app.state.service
    return service


async def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    if not service.opening.opened:
        service.opening.require()  # 503 storage-unavailable, Retry-After
    return service


async def get_imports(request: Request) -> ImportParts:
    return (await get_service(request)).imports


async def get_uploads(request: Request) -> ResumableUploads:
    return (await get_service(request)).partial_uploads


async def get_diffs(request: Request) -> Diffs:
    return (await get_service(request)).diffs


async def get_metrics(request: Request) -> Metrics:
    return (await get_service(request)).metrics


ServiceDep = Annotated[Service, Depends(get_service)]
ImportsDep = Annotated[ImportParts, Depends(get_imports)]
UploadsDep = Annotated[ResumableUploads, Depends(get_uploads)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
DiffsDep = Annotated[Diffs, Depends(get_diffs)]
StartingServiceDep = Annotated[Service, Depends(get_starting_service)]
