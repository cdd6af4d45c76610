"""The application factory: assembles the service, nothing more.

Owns `create_app(settings)`: the parts (`service.state.Service`: store,
sandbox, import limiter), their start and stop (lifespan), the problem
handlers, the middleware (`X-Content-Type-Options: nosniff` on every
response; a client gone mid-request logged once at INFO), the routers
(`service.routes`: models, tensors, health) and the OpenAPI document with
problems under `application/problem+json`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import anyio.to_thread
from fastapi import FastAPI

from service.http_protocol import NoSniffMiddleware
from service.limiter import ImportLimiter
from service.openapi_doc import openapi_with_problems
from service.problems import DisconnectMiddleware, install_problem_handlers
from service.routes import health, models, tensors
from service.sandbox import Sandbox
from service.settings import Settings
from service.state import Service
from service.store import Store

log = logging.getLogger("service")


def create_app(settings: Settings) -> FastAPI:
    store = Store(settings.store, settings.store_max_bytes, min_free=settings.store_min_free, max_import_bytes=settings.max_import_bytes)
    sandbox = Sandbox(settings)
    limiter = ImportLimiter(settings.workers, settings.queue, settings.max_receiving)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store.open()
        await anyio.to_thread.run_sync(sandbox.start)
        app.state.service = Service(settings, store, sandbox, limiter)
        log.info(
            "ready: data root %s, store %s, %d workers, queue %d", settings.data_root, settings.store, settings.workers, settings.queue
        )
        try:
            yield
        finally:
            store.close()

    app = FastAPI(
        title="ONNX import service",
        version="0.1.0",
        description="Imports ONNX models in a sandboxed worker; serves their summary, graph and tensors. Errors are RFC 9457 problems.",
        lifespan=lifespan,
    )
    install_problem_handlers(app)
    app.add_middleware(DisconnectMiddleware)
    app.add_middleware(NoSniffMiddleware)  # added last: the outermost of the two
    app.include_router(models.router)
    app.include_router(tensors.router)
    app.include_router(health.router)
    app.openapi = lambda: openapi_with_problems(app)  # type: ignore[method-assign]
    return app
