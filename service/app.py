"""The FastAPI application: routes, the import flow and the service's state.

Owns `create_app(settings)`. `POST /models` takes a multipart upload
(`service.uploads`) or a JSON path under the data root (`service.paths`),
admits the request into the bounded import queue (`ImportLimiter`: at most
`workers` imports run, `queue` more wait, beyond that 503 with Retry-After),
imports in a sandboxed worker (`service.sandbox`), and commits the result to
the store (`service.store`) under its content-derived id:

    id = SHA-256 of "onnx-import-id/1\\n" + model_sha256 + "\\n"
         + for each external file, sorted by location: location + "\\0" + sha256 + "\\n"

(the SHA-256 hex digests of the files; for an upload: every external_data
part; for a server-side path: every external file the model uses). The
front end never parses model bytes. Errors are problems (`service.problems`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import ValidationError

from service.models import GraphDocument, Health, ModelSummary, PathRequest, Problem, Readiness
from service.paths import ResolvedPath, resolve_confined, resolve_under_root
from service.problems import PROBLEM_MEDIA_TYPE, ProblemError, bounded, import_problem, install_problem_handlers
from service.sandbox import ImportJob, Sandbox, WorkerOutcome
from service.settings import Settings
from service.store import Store, StoreFullError
from service.tensors import tensor_response
from service.uploads import EXTERNAL_FOLDER, MODEL_FILE, receive_upload

log = logging.getLogger("service")

MAX_JSON_BODY = 64 << 10
HASH_CHUNK = 1 << 20
TEST_SLEEP_HEADER = "x-test-worker-sleep"


def model_id_of(model_sha256: str, externals: list[tuple[str, str]]) -> str:
    """The content-derived id (see the module comment)."""
    digest = hashlib.sha256(b"onnx-import-id/1\n" + model_sha256.encode() + b"\n")
    for location, sha256 in sorted(externals):
        digest.update(location.encode() + b"\0" + sha256.encode() + b"\n")
    return digest.hexdigest()


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        while chunk := os.read(fd, HASH_CHUNK):
            digest.update(chunk)
    finally:
        os.close(fd)
    return digest.hexdigest()


def identity_of(path: str) -> dict[str, Any]:
    info = os.stat(path)
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns, "inode": info.st_ino}


class ImportLimiter:
    """At most `workers` imports at once, `queue` more waiting, then 503."""

    def __init__(self, workers: int, queue: int) -> None:
        self.workers = workers
        self.capacity = workers + queue
        self.admitted = 0
        self.running = 0
        self.slots = asyncio.Semaphore(workers)
        self.mean_seconds = 0.5

    def retry_after(self) -> int:
        return max(1, min(60, math.ceil(self.mean_seconds * self.capacity / self.workers)))

    @contextlib.asynccontextmanager
    async def admission(self) -> AsyncIterator[None]:
        if self.admitted >= self.capacity:
            raise ProblemError(
                "overloaded",
                f"{self.running} imports are running and {self.admitted - self.running} waiting; try again later",
                headers={"Retry-After": str(self.retry_after())},
            )
        self.admitted += 1
        try:
            yield
        finally:
            self.admitted -= 1

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self.slots:
            self.running += 1
            started = time.monotonic()
            try:
                yield
            finally:
                self.running -= 1
                self.mean_seconds = 0.8 * self.mean_seconds + 0.2 * (time.monotonic() - started)


@dataclass
class Service:
    settings: Settings
    store: Store
    sandbox: Sandbox
    limiter: ImportLimiter


def _service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


# --- the import flow


async def _read_json(request: Request) -> PathRequest:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_JSON_BODY:
            raise ProblemError("payload-too-large", f"a JSON request body is at most {MAX_JSON_BODY} bytes")
    try:
        return PathRequest.model_validate_json(bytes(body))
    except ValidationError as error:
        raise RequestValidationError(error.errors(include_url=False, include_input=False)) from None


def _test_hold(request: Request, settings: Settings) -> tuple[float, bool]:
    """Test hook: `X-Test-Worker-Sleep: 2.5` (sleep) or `spin:2.5` (burn CPU)."""
    header = request.headers.get(TEST_SLEEP_HEADER)
    if header is None:
        return settings.debug_worker_sleep, False
    if not settings.test_hooks:
        raise ProblemError("bad-request", f"{TEST_SLEEP_HEADER} is a test hook, and test hooks are off")
    spin = header.startswith("spin:")
    try:
        return max(0.0, min(600.0, float(header.removeprefix("spin:")))), spin
    except ValueError:
        raise ProblemError("bad-request", f"{TEST_SLEEP_HEADER} must be a number of seconds, or spin: and one") from None


async def _run_worker(service: Service, job: ImportJob, work: Path) -> WorkerOutcome:
    async with service.limiter.slot():
        outcome = await anyio.to_thread.run_sync(service.sandbox.run, job, work)
    log.info("import of %r: %s in %.3f s", job.display_name[:100], outcome.status, outcome.seconds)
    if outcome.status == "ok":
        return outcome
    if outcome.status == "error":
        raise import_problem(outcome.error)
    kind = "ResourceLimit" if outcome.status == "resource_limit" else "WorkerCrashed"
    raise import_problem(
        {"kind": kind, "message": outcome.detail, "input": job.display_name, "offset": None, "field_path": None},
        limit=outcome.limit if kind == "ResourceLimit" else None,
    )


def _summary_document(model_id: str, outcome: WorkerOutcome, model_file: dict[str, Any]) -> dict[str, Any]:
    header = outcome.header
    summary: dict[str, Any] = {"id": model_id, **header["summary"], "model_file": model_file}
    tensors = header["tensors"]
    by_path = {t["field_path"]: t["name"] for t in tensors}
    graph = summary["graph"]
    for index, item in enumerate(graph["initializers"]):
        item["tensor"] = by_path.get(f"ModelProto.graph.initializer[{index}]")
    for index, sparse in enumerate(graph["sparse_initializers"]):
        for part in ("values", "indices"):
            sparse[part]["tensor"] = by_path.get(f"ModelProto.graph.sparse_initializer[{index}].{part}")
    keys = ("name", "tensor_name", "field_path", "role", "elem_type", "dims", "byte_length", "source")
    summary["tensors"] = [{**{k: t[k] for k in keys}, "href": f"/models/{model_id}/tensors/{t['name']}"} for t in tensors]
    summary["links"] = {"self": f"/models/{model_id}", "graph": f"/models/{model_id}/graph"}
    return summary


def _record(model_id: str, outcome: WorkerOutcome, files: dict[str, dict[str, Any]], work: Path) -> dict[str, Any]:
    tensors: dict[str, Any] = {}
    for t in outcome.header["tensors"]:
        entry = {k: t[k] for k in ("name", "elem_type", "dims", "length")}
        if "file" in t:
            if t["file"] not in files:
                raise ProblemError("worker-crashed", "the worker reported a tensor in a file it did not name", kind="WorkerCrashed")
            entry["file"], entry["offset"] = t["file"], int(t["offset"])
        elif "blob" in t:
            entry["file"], entry["offset"] = f"blob:{int(t['blob'])}", 0
        tensors[t["name"]] = entry
    for index, path in enumerate(outcome.blob_files):
        files[f"blob:{index}"] = {"path": str(path.relative_to(work)), "in_store": True, **identity_of(str(path))}
    return {"id": model_id, "format": "onnx-service-record/1", "tensors": tensors, "files": files}


async def _import_upload(request: Request, service: Service, work: Path) -> Response:
    settings = service.settings
    files = work / "files"
    files.mkdir()
    upload = await receive_upload(request, files, settings.max_upload, settings.max_upload_total, settings.max_external_files)
    assert upload.model is not None
    model_id = model_id_of(upload.model.sha256, [(e.location, e.sha256) for e in upload.externals])
    if service.store.has(model_id):
        return await _stored_summary(service, model_id, 200)
    job = ImportJob(str(files), MODEL_FILE, upload.display_name, EXTERNAL_FOLDER, *_test_hold(request, settings))
    outcome = await _run_worker(service, job, work)
    stored: dict[str, dict[str, Any]] = {"model": {"path": f"files/{MODEL_FILE}", "in_store": True, **identity_of(str(upload.model.path))}}
    for location in outcome.header["external_files"]:
        real = resolve_confined(str(files / EXTERNAL_FOLDER), location)
        if real is None or not os.path.isfile(real):
            raise ProblemError("worker-crashed", "the worker reported an external file that was not uploaded", kind="WorkerCrashed")
        stored[location] = {"path": os.path.relpath(real, os.path.realpath(work)), "in_store": True, **identity_of(real)}
    model_file = {"size": upload.model.size, "sha256": upload.model.sha256}
    return await _commit(service, model_id, outcome, stored, model_file, work)


async def _import_path(request: Request, service: Service, work: Path) -> Response:
    settings = service.settings
    wanted = await _read_json(request)
    resolved: ResolvedPath = resolve_under_root(str(settings.data_root), wanted.path)
    folder, name = os.path.split(resolved.real_path)
    job = ImportJob(folder, name, wanted.path, None, *_test_hold(request, settings))
    outcome = await _run_worker(service, job, work)
    files: dict[str, dict[str, Any]] = {"model": {"path": resolved.real_path, "in_store": False}}
    for location in outcome.header["external_files"]:
        real = resolve_confined(folder, location)
        if real is None:
            raise ProblemError("worker-crashed", "the worker reported an external file outside the model's folder", kind="WorkerCrashed")
        files[location] = {"path": real, "in_store": False}

    def identify() -> list[tuple[str, str]]:
        hashes = []
        for key, item in files.items():
            item.update(identity_of(item["path"]))
            hashes.append((key, file_sha256(item["path"])))
        return hashes

    hashes = dict(await anyio.to_thread.run_sync(identify))
    model_sha = hashes.pop("model")
    model_id = model_id_of(model_sha, sorted(hashes.items()))
    model_file = {"size": files["model"]["size"], "sha256": model_sha}
    if service.store.has(model_id):
        await anyio.to_thread.run_sync(_refresh_sources, service.store, model_id, files)
        return await _stored_summary(service, model_id, 200)
    return await _commit(service, model_id, outcome, files, model_file, work)


def _refresh_sources(store: Store, model_id: str, files: dict[str, dict[str, Any]]) -> None:
    """The same content was imported before: point its data-root files at
    what is there now, so its tensors stay servable after a touch or copy."""
    record = store.read_record(model_id)
    if record is None:
        return
    changed = False
    for key, item in files.items():
        old = record["files"].get(key)
        if old is not None and not old.get("in_store") and old != item:
            record["files"][key] = item
            changed = True
    if changed:
        store.replace_record(model_id, record)


async def _commit(
    service: Service, model_id: str, outcome: WorkerOutcome, files: dict[str, dict[str, Any]], model_file: dict[str, Any], work: Path
) -> Response:
    summary = _summary_document(model_id, outcome, model_file)
    record = _record(model_id, outcome, files, work)
    try:
        created = await anyio.to_thread.run_sync(service.store.commit, work, model_id, record, json.dumps(summary).encode())
    except StoreFullError as error:
        raise ProblemError("store-full", str(error)) from None
    return await _stored_summary(service, model_id, 201 if created else 200)


async def _stored_summary(service: Service, model_id: str, status: int) -> Response:
    folder = service.store.folder(model_id)
    try:
        body = await anyio.to_thread.run_sync((folder / "summary.json").read_bytes)
    except FileNotFoundError:
        raise ProblemError("not-found", "the model was evicted from the store meanwhile; post it again") from None
    service.store.touch(model_id)
    return Response(body, status_code=status, media_type="application/json", headers={"Location": f"/models/{model_id}"})


# --- OpenAPI


def _problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    responses: dict[int | str, dict[str, Any]] = {status: {"model": Problem, "description": "a problem"} for status in statuses}
    responses["default"] = {"model": Problem, "description": "any other error, as a problem"}
    return responses


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The generated document, with problems under application/problem+json."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        for path in schema.get("paths", {}).values():
            for operation in path.values():
                for status, response in operation.get("responses", {}).items():
                    content = response.get("content", {})
                    if (status == "default" or status.startswith(("4", "5"))) and "application/json" in content:
                        content[PROBLEM_MEDIA_TYPE] = content.pop("application/json")
        app.openapi_schema = schema
    return app.openapi_schema


# --- the application

UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["model"],
                    "properties": {
                        "model": {"type": "string", "format": "binary", "description": "the .onnx file"},
                        "external_data": {
                            "type": "array",
                            "items": {"type": "string", "format": "binary"},
                            "description": "external data files; each part's file name is the location the model names",
                        },
                    },
                }
            },
            "application/json": {"schema": PathRequest.model_json_schema()},
        },
    }
}


def create_app(settings: Settings) -> FastAPI:
    store = Store(settings.store, settings.store_max_bytes)
    sandbox = Sandbox(settings)
    limiter = ImportLimiter(settings.workers, settings.queue)

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
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]

    @app.post(
        "/models",
        status_code=201,
        response_model=ModelSummary,
        summary="Import a model (multipart upload, or JSON path under the data root)",
        openapi_extra=UPLOAD_BODY,
        responses={
            200: {"model": ModelSummary, "description": "the same model was imported before (same id)"},
            201: {"description": "imported; Location: /models/{id}"},
            **_problems(400, 403, 404, 413, 415, 422, 500, 503, 507),
        },
    )
    async def post_model(request: Request) -> Response:
        service = _service(request)
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if media_type not in ("multipart/form-data", "application/json"):
            raise ProblemError("unsupported-media-type", 'send multipart/form-data (an upload) or application/json ({"path": ...})')
        async with service.limiter.admission():
            with service.store.work_folder() as work:
                if media_type == "multipart/form-data":
                    return await _import_upload(request, service, work)
                return await _import_path(request, service, work)

    def not_found(model_id: str) -> ProblemError:
        return ProblemError("not-found", f"no model {bounded(repr(model_id), 80)}")

    def stored_record(service: Service, model_id: str) -> dict[str, Any]:
        record = service.store.read_record(model_id)
        if record is None:
            raise not_found(model_id)
        return record

    def require_stored(service: Service, model_id: str) -> None:
        """404 unless stored; a stat, not a parse of the record (which may be large)."""
        if not service.store.has(model_id):
            raise not_found(model_id)

    @app.get("/models/{model_id}", response_model=ModelSummary, summary="The summary of an imported model", responses=_problems(404))
    async def get_model(request: Request, model_id: str) -> Response:
        service = _service(request)
        require_stored(service, model_id)
        return await _stored_summary(service, model_id, 200)

    @app.get("/models/{model_id}/graph", response_model=GraphDocument, summary="The full resolved graph", responses=_problems(404))
    async def get_graph(request: Request, model_id: str) -> Response:
        service = _service(request)
        require_stored(service, model_id)
        service.store.touch(model_id)
        return FileResponse(service.store.folder(model_id) / "graph.json", media_type="application/json")

    @app.get(
        "/models/{model_id}/tensors/{name}",
        summary="A tensor's values (raw layout, or .npy with format=npy); Range supported",
        response_class=Response,
        responses={
            200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}, "description": "the bytes"},
            206: {"description": "the requested range"},
            304: {"description": "not modified (If-None-Match)"},
            **_problems(404, 409, 410, 415, 416, 422),
        },
    )
    async def get_tensor(request: Request, model_id: str, name: str, format: Literal["raw", "npy"] = Query("raw")) -> Response:
        service = _service(request)
        record = stored_record(service, model_id)
        entry = record["tensors"].get(name)
        if entry is None:
            raise ProblemError("not-found", f"model {model_id[:12]}... has no tensor {bounded(repr(name), 120)}")
        source = None
        if entry["length"]:
            item = record["files"][entry["file"]]
            path = str(service.store.folder(model_id) / item["path"]) if item["in_store"] else item["path"]
            source = (path, item, int(entry["offset"]))
        return tensor_response(request, model_id, entry, source or ("", {}, 0), format)

    @app.get("/healthz", response_model=Health, summary="The process is alive")
    async def healthz() -> Health:
        return Health(status="ok")

    @app.get("/readyz", response_model=Readiness, summary="Fork server up and store writable", responses=_problems(503))
    async def readyz(request: Request) -> JSONResponse:
        service = _service(request)
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

    return app
