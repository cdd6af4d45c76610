"""The FastAPI dependencies that hand a route the service: `ImportsDep`,
`ServiceDep`, `StartingServiceDep`.

`ImportsDep` is the parts the import use cases take
(`service.imports.parts.ImportParts`), all a route needs that asks the
store and runs use cases; `ServiceDep` is the service's parts (`service.state.Service`, set up by the
app's lifespan), or the 503 `storage-unavailable` while the store is not
open yet (`service.store.opening`: a replica started before its object
storage or database); `StartingServiceDep` is the service either way (for
`/readyz`, which says what is missing)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from service.imports.parts import ImportParts
from service.state import Service


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


ServiceDep = Annotated[Service, Depends(get_service)]
ImportsDep = Annotated[ImportParts, Depends(get_imports)]
StartingServiceDep = Annotated[Service, Depends(get_starting_service)]
