"""The service's parts, as the routes reach them: `ServiceDep`.

Owns `Service` (settings, store, sandbox, import limiter, API keys, metrics,
readiness, the data root when it is a bucket, and the graph renders under
way in this process) and the FastAPI
dependency that hands it to a route (`ServiceDep`), set up by the app's lifespan.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from service.access.keys import KeyRing
from service.imports.limiter import ImportLimiter
from service.observability.metrics import Metrics
from service.observability.readiness import ReadinessProbe
from service.sandbox.supervisor import Sandbox
from service.settings import Settings
from service.store.model_store import Store

if TYPE_CHECKING:
    from service.store.s3.bucket_root import BucketRoot


@dataclass
class Service:
    settings: Settings
    store: Store
    sandbox: Sandbox
    limiter: ImportLimiter
    keys: KeyRing
    metrics: Metrics
    readiness: ReadinessProbe
    bucket_root: BucketRoot | None = None  # the data root, when it is a bucket (--data-root s3://...)
    graph_renders: dict[tuple[str, str], asyncio.Future[None]] = field(default_factory=dict)  # (model id, tenant)


def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


ServiceDep = Annotated[Service, Depends(get_service)]
