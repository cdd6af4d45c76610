"""The import flow: an upload or a data-root path -> a worker -> identify -> commit.

Owns `import_upload` and `import_path`, each run inside an admission to the
import queue and a fresh work folder of the store:

1. receive: an upload is streamed into the work folder (`service.uploads`); a
   path is confined to the data root (`service.paths`);
2. import in a sandboxed worker (`service.sandbox`), which answers with the
   bounded summary and sends the tensor catalogue and the converted tensor
   bytes into the work folder;
3. identify: the content-derived id,

       id = SHA-256 of "onnx-import-id/1\\n" + model_sha256 + "\\n"
            + for each external file, sorted by location: location + "\\0" + sha256 + "\\n"

   (SHA-256 hex digests; an upload counts every external_data part, a path
   every external file its tensors use), and each source file's identity;
4. commit the work folder to the store (`Store.commit`) with its record and
   summary, and answer with the summary: 201, or 200 if that id was stored.

The front end never parses model bytes; what it reads of the worker's answer
is bounded (the summary), the rest it copies to files.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

import anyio.to_thread
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from service.catalog import CONVERTED_FILE_KEY, MODEL_FILE_KEY
from service.models import PathRequest
from service.paths import resolve_confined, resolve_under_root
from service.problems import ProblemError, import_problem
from service.record import SourceFile, StoredRecord
from service.sandbox import WorkerOutcome
from service.state import Service
from service.store import ModelFolder, StoreFullError
from service.summary_doc import finish_summary
from service.uploads import receive_upload
from service.worker_protocol import IMPORT_STREAMS, ImportFailure, WorkerHeader, WorkerJob

log = logging.getLogger("service")

MAX_JSON_BODY = 64 << 10
HASH_CHUNK = 1 << 20
SUMMARY_TENSORS = 100  # tensors (and initializers) a summary lists; the rest are paged
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


def source_file(path: str, stored_as: str, in_store: bool) -> SourceFile:
    """`path`'s identity now, recorded under `stored_as`."""
    info = os.stat(path)
    return SourceFile(path=stored_as, in_store=in_store, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino)


def test_hold(request: Request, service: Service) -> tuple[float, bool]:
    """Test hook: `X-Test-Worker-Sleep: 2.5` (sleep) or `spin:2.5` (burn CPU)."""
    header = request.headers.get(TEST_SLEEP_HEADER)
    if header is None:
        return service.settings.debug_worker_sleep, False
    if not service.settings.test_hooks:
        raise ProblemError("bad-request", f"{TEST_SLEEP_HEADER} is a test hook, and test hooks are off")
    spin = header.startswith("spin:")
    try:
        return max(0.0, min(600.0, float(header.removeprefix("spin:")))), spin
    except ValueError:
        raise ProblemError("bad-request", f"{TEST_SLEEP_HEADER} must be a number of seconds, or spin: and one") from None


async def run_worker(service: Service, job: WorkerJob, destinations: list[Path]) -> WorkerHeader:
    """Run `job` in a worker slot; its header if ok, else the problem."""
    async with service.limiter.slot():
        outcome: WorkerOutcome = await anyio.to_thread.run_sync(service.sandbox.run, job, destinations)
    log.info("%s of %r: %s in %.3f s", job.task, job.display_name[:100], outcome.status, outcome.seconds)
    if outcome.status == "ok" and outcome.header is not None:
        return outcome.header
    if outcome.status == "error" and outcome.error is not None:
        raise import_problem(outcome.error)
    if outcome.status == "resource_limit":
        failure = ImportFailure(kind="ResourceLimit", message=outcome.detail, input=job.display_name)
        raise import_problem(failure, limit=outcome.limit)
    raise import_problem(ImportFailure(kind="WorkerCrashed", message=outcome.detail, input=job.display_name))


async def import_upload(request: Request, service: Service, work: ModelFolder) -> Response:
    settings = service.settings
    upload = await receive_upload(
        request, work.upload_model, work.upload_external, settings.max_upload, settings.max_upload_total, settings.max_external_files
    )
    assert upload.model is not None
    model_id = model_id_of(upload.model.sha256, [(e.location, e.sha256) for e in upload.externals])
    if service.store.has(model_id):
        return await stored_summary(service, model_id, 200)
    sleep, spin = test_hold(request, service)
    job = service.sandbox.job(
        "import",
        directory=str(work.files),
        model=work.upload_model.name,
        display_name=upload.display_name,
        external_dir=str(work.upload_external),
        summary_items=SUMMARY_TENSORS,
        sleep=sleep,
        spin=spin,
    )
    header = await run_worker(service, job, [work.catalog, work.converted])
    files = {MODEL_FILE_KEY: source_file(str(work.upload_model), work.relative(work.upload_model), True)}
    real_work = os.path.realpath(work.root)
    for location in header.external_files:
        real = resolve_confined(str(work.upload_external), location)
        if real is None or not os.path.isfile(real):
            raise ProblemError("worker-crashed", "the worker reported an external file that was not uploaded", kind="WorkerCrashed")
        files[location] = source_file(real, os.path.relpath(real, real_work), True)
    return await commit(service, work, model_id, header, files, upload.display_name, upload.model.size, upload.model.sha256)


async def read_path_request(request: Request) -> PathRequest:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_JSON_BODY:
            raise ProblemError("payload-too-large", f"a JSON request body is at most {MAX_JSON_BODY} bytes")
    try:
        return PathRequest.model_validate_json(bytes(body))
    except ValidationError as error:
        raise RequestValidationError(error.errors(include_url=False, include_input=False)) from None


async def import_path(request: Request, service: Service, work: ModelFolder) -> Response:
    wanted = await read_path_request(request)
    resolved = resolve_under_root(str(service.settings.data_root), wanted.path)
    folder, name = os.path.split(resolved.real_path)
    sleep, spin = test_hold(request, service)
    job = service.sandbox.job(
        "import", directory=folder, model=name, display_name=wanted.path, summary_items=SUMMARY_TENSORS, sleep=sleep, spin=spin
    )
    header = await run_worker(service, job, [work.catalog, work.converted])
    paths = {MODEL_FILE_KEY: resolved.real_path}
    for location in header.external_files:
        real = resolve_confined(folder, location)
        if real is None:
            raise ProblemError("worker-crashed", "the worker reported an external file outside the model's folder", kind="WorkerCrashed")
        paths[location] = real

    def identify() -> tuple[dict[str, SourceFile], dict[str, str]]:
        return {key: source_file(path, path, False) for key, path in paths.items()}, {key: file_sha256(path) for key, path in paths.items()}

    files, hashes = await anyio.to_thread.run_sync(identify)
    model_sha = hashes.pop(MODEL_FILE_KEY)
    model_id = model_id_of(model_sha, sorted(hashes.items()))
    if service.store.has(model_id):
        await anyio.to_thread.run_sync(service.store.refresh_sources, model_id, files)
        return await stored_summary(service, model_id, 200)
    return await commit(service, work, model_id, header, files, wanted.path, files[MODEL_FILE_KEY].size, model_sha)


async def commit(
    service: Service,
    work: ModelFolder,
    model_id: str,
    header: WorkerHeader,
    files: dict[str, SourceFile],
    display_name: str,
    model_size: int,
    model_sha256: str,
) -> Response:
    assert header.summary is not None and len(header.streams) == len(IMPORT_STREAMS)
    if header.streams[1]:
        files[CONVERTED_FILE_KEY] = source_file(str(work.converted), work.relative(work.converted), True)
    summary = finish_summary(header.summary, model_id, model_size, model_sha256)
    record = StoredRecord(
        id=model_id,
        input=display_name,
        created_ns=time.time_ns(),
        model_size=model_size,
        model_sha256=model_sha256,
        tensor_count=header.tensor_count,
        files=files,
    )
    body = _json_bytes(summary)
    try:
        created = await anyio.to_thread.run_sync(service.store.commit, work, model_id, record, body)
    except StoreFullError as error:
        raise ProblemError("store-full", str(error)) from None
    return await stored_summary(service, model_id, 201 if created else 200)


def _json_bytes(document: object) -> bytes:
    return json.dumps(document, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()


async def stored_summary(service: Service, model_id: str, status: int) -> Response:
    """The stored summary as the answer to a POST."""
    folder = service.store.folder(model_id)
    try:
        body = await anyio.to_thread.run_sync(folder.summary.read_bytes)
    except FileNotFoundError:
        raise ProblemError("not-found", "the model was evicted from the store meanwhile; post it again") from None
    service.store.touch(model_id)
    return Response(body, status_code=status, media_type="application/json", headers={"Location": f"/models/{model_id}"})
