"""The application factory: assembles the service, nothing more.

Owns `create_app(settings, sandbox, steps)`: the parts (`service.api.state.Service`: store,
sandbox, the import admission, API keys, metrics), their start and stop (lifespan;
SIGHUP reloads the key file; a store over object storage or PostgreSQL
opens in the background, retried while they do not answer, so a replica
started before them stays up, not ready: `service.store.opening`), the
problem handlers, the middleware (the request log and request id,
outermost; `X-Content-Type-Options: nosniff` on every response;
`Tus-Resumable` on those under `/uploads`; a client gone mid-request logged
once at INFO), the routers
(`service.api.routes`: models, tensors, diagnostics, diffs, report links,
resumable uploads, health, hooks (the MLflow registry's webhook and an
OCI registry's notifications, `service.registry`), Harbor's scanner adapter, and ui: the explorer at `/` and the offline `/docs`
and `/redoc`), the report links' key read when the store opens,
the attestations' signing key (`--signing-key`, read once as the app is
made, before its sandbox starts: `service.attestation.attester`),
the sweep of expired resumable uploads, and the OpenAPI document with
problems under `application/problem+json`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import shutil
import signal
import tempfile
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI

from service.access.keys import KeyFileError, KeyRing
from service.api.nosniff import NoSniffMiddleware
from service.api.openapi import openapi_with_problems
from service.api.problems import DisconnectMiddleware, install_problem_handlers
from service.api.routes import (
    attestations,
    diagnostics,
    diff,
    harbor,
    health,
    links,
    models,
    resumable_uploads,
    shapes,
    tensors,
    ui,
    webhooks,
)
from service.api.state import Service
from service.api.tus import TusHeaderMiddleware
from service.attestation.attester import load_attester
from service.background import every
from service.errors import StorageUnavailable
from service.imports.admission import Admission
from service.imports.diffs import Diffs
from service.imports.parts import ImportParts, ImportSteps
from service.imports.report_links import ReportLinks
from service.observability.metrics import Metrics
from service.observability.readiness import ReadinessProbe
from service.observability.request_log import RequestLogMiddleware
from service.registry.harbor_scanner import HarborScanner, harbor_token
from service.registry.hook import RegistryHook
from service.registry.oci_hook import OciHook
from service.sandbox.supervisor import Sandbox
from service.settings import Settings
from service.store.backends import open_data_root, open_store
from service.store.opening import StoreOpening

log = logging.getLogger("service")


def create_app(
    settings: Settings, sandbox: Sandbox | None = None, steps: ImportSteps | None = None, *, shared_dir: Path | None = None
) -> FastAPI:
    """The service for `settings`; `sandbox` replaces the one made here (the service's own
    worker entry); `steps`, awaited at the import pipeline's steps (none in the service);
    `shared_dir`, the folder every front-end process of the service shares (the import
    admission's places in `imports/`), else a private one removed at the end."""
    store = open_store(settings)
    data_root = open_data_root(settings)
    sandbox = sandbox or Sandbox(settings)
    keys = KeyRing(settings.api_keys)  # a broken key file refuses the start (KeyFileError)
    report_links = ReportLinks.for_settings(settings, store)  # a link key file without a fit key refuses the start (SettingsError)
    attester = load_attester(settings)  # --signing-key, read once here (before the fork server starts); SettingsError if it cannot sign
    if shared_dir is None:
        private_dir = places_dir = Path(tempfile.mkdtemp(prefix="onnx-import-places-"))
    else:
        private_dir, places_dir = None, shared_dir / "imports"
        places_dir.mkdir(exist_ok=True)
    admission = Admission(
        settings.workers, settings.queue, settings.max_receiving, places_dir, settings.tenant_share, sandbox.memory_bound.bytes or 0
    )
    metrics = Metrics(store, lambda: admission)

    def share_places() -> None:  # the share holds between the tenants that may import (and the registry hooks')
        hooks = {settings.mlflow_tenant} if settings.mlflow_url else set()
        admission.share_between(len(keys.importing_tenants() | hooks | ({settings.oci_tenant} if settings.oci_registry else set())))

    share_places()

    def reload_keys() -> None:
        if keys.anonymous:
            log.info("SIGHUP: no key file to reload (anonymous access)")
            return
        try:
            keys.reload()
        except KeyFileError as error:
            log.warning("SIGHUP: the key file was not reloaded, the keys in force stay: %s", error)
        else:
            share_places()
            log.info("SIGHUP: %d API keys loaded from %s", len(keys.keys), keys.path)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        def open_storage() -> None:  # blocking
            store.open()
            app.state.service.partial_uploads.open()  # removes the uploads that expired while stopped
            report_links.load()  # the report links' key, kept in the index

        # A store on this machine opens before serving: any error of it refuses the start. One over
        # object storage or PostgreSQL opens in the background, again while they do not answer
        # (service.store.opening): a replica started before them stays up, not ready.
        remote = store_is_remote(settings)
        opening = StoreOpening(open_storage, store.close) if remote else StoreOpening.done()
        readiness = ReadinessProbe(sandbox, store, opening)
        parts = ImportParts(settings, store, sandbox, admission, data_root, report_links, steps, attester)
        diffs = Diffs(settings.local_root / "diffs")
        app.state.service = Service(parts, diffs, keys, metrics, readiness, opening=opening)
        if not remote:
            await anyio.to_thread.run_sync(open_storage)
        try:
            async with opening.in_background(readiness.refresh):  # a remote store: tried from now on, while the sandbox starts
                await anyio.to_thread.run_sync(sandbox.start)
                await opening.first_try()  # a store that answers is open before the first request
                if threading.current_thread() is threading.main_thread():  # an in-process test's loop is not
                    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_keys)
                # Tail latency: what start-up made lives as long as the process, so no
                # collection scans it again; and collections come 30x less often (a
                # request makes a few hundred objects). Measured: /healthz p99 under
                # 40 connections of tensor GETs, 57 ms before, about 25 ms after.
                gc.freeze()
                gc.set_threshold(20_000, 20, 20)
                log.info(
                    "ready: data root %s, store %s, %d workers, queue %d, %s",
                    settings.data_root, settings.store, settings.workers, settings.queue,
                    f"{len(keys.keys)} API keys" if not keys.anonymous else "anonymous (no API keys)",
                )  # fmt: skip
                hook = app.state.registry_hook = RegistryHook(parts, diffs) if settings.mlflow_url else None
                oci_hook = app.state.oci_hook = OciHook(parts) if settings.oci_registry else None
                scanner = app.state.harbor_scanner = HarborScanner(parts) if harbor_token(settings) else None
                async with (
                    readiness.running(),
                    sweeping(app.state.service, min(60.0, settings.upload_expiry / 4)),
                    hook.running() if hook is not None else contextlib.nullcontext(),
                    oci_hook.running() if oci_hook is not None else contextlib.nullcontext(),
                    scanner.running() if scanner is not None else contextlib.nullcontext(),
                ):
                    yield
        finally:  # the opening has ended: nothing opens the store any more
            data_root.close()
            store.close()
            admission.close()
            if private_dir is not None:
                shutil.rmtree(private_dir, ignore_errors=True)

    app = FastAPI(
        title="ONNX import service",
        version="0.1.0",
        description="Imports ONNX models in a sandboxed worker; serves their summary, graph and tensors. Errors are RFC 9457 problems.",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc are served offline by service.routes.ui (service.docs_assets)
        redoc_url=None,
    )
    install_problem_handlers(app)
    app.add_middleware(DisconnectMiddleware)
    app.add_middleware(NoSniffMiddleware)
    app.add_middleware(TusHeaderMiddleware)
    app.add_middleware(RequestLogMiddleware, metrics=metrics)  # added last: the outermost
    app.include_router(tensors.router)  # first: a request is matched against the routes in order, and tensor GETs are the most frequent
    app.include_router(models.router)
    app.include_router(diagnostics.router)
    app.include_router(attestations.router)
    app.include_router(diff.router)
    app.include_router(links.router)
    app.include_router(shapes.router)
    app.include_router(resumable_uploads.router)
    app.include_router(health.router)
    app.include_router(webhooks.router)
    app.include_router(harbor.router)
    app.include_router(ui.router)
    app.openapi = lambda: openapi_with_problems(app)  # type: ignore[method-assign]
    return app


def store_is_remote(settings: Settings) -> bool:
    """The store is on object storage or indexed in PostgreSQL (else a folder, or memory)."""
    return settings.store_bucket is not None or bool(settings.database)


def sweeping(service: Service, interval: float) -> contextlib.AbstractAsyncContextManager[None]:
    """Remove expired resumable uploads every `interval` seconds while the block runs,
    once the store is open (every front-end process sweeps: a removal is one rename,
    whoever makes it)."""

    async def sweep() -> None:
        if not service.opening.opened:
            return
        try:
            await anyio.to_thread.run_sync(service.partial_uploads.sweep)
        except (OSError, StorageUnavailable) as error:
            log.warning("the sweep of expired uploads failed: %s", error)

    return every(interval, sweep, "upload-sweep")
