"""The service's parts, as the routes reach them: `ServiceDep`.

Owns `Service` (settings, store, sandbox, import limiter, API keys, metrics, readiness,
the graph renders under way in this process and the catalogues kept open) and the FastAPI dependency that hands it
to a route (`ServiceDep`), set up by the app's lifespan.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from service.api_keys import KeyRing
from service.catalog import OpenCatalogs
from service.limiter import ImportLimiter
from service.metrics import Metrics
from service.readiness import ReadinessProbe
from service.sandbox import Sandbox
from service.settings import Settings
from service.store import Store


@dataclass
class Service:
    settings: Settings
    store: Store
    sandbox: Sandbox
    limiter: ImportLimiter
    keys: KeyRing
    metrics: Metrics
    readiness: ReadinessProbe
    graph_renders: dict[tuple[str, str], asyncio.Future[None]] = field(default_factory=dict)  # (model id, tenant)
    catalogs: OpenCatalogs = field(default_factory=OpenCatalogs)


def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]
