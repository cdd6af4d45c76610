"""The import flow: an upload or a data-root path -> a worker -> identify -> commit.

Owns `import_upload` and `import_path`, each run in a fresh work folder of
the store:

1. receive: an upload is streamed into the work folder (`service.http.uploads`)
   while it holds a receiving place; only then does it join the import queue
   (`service.imports.limiter`). A path is confined to the data root (`service.paths`);
2. import in a sandboxed worker (`service.sandbox.supervisor`), which answers with the
   bounded summary, the identity and SHA-256 of every file it read (the model
   and the external files its tensors use), and sends the tensor catalogue
   and the converted tensor bytes into the work folder;
3. identify, from what the worker read, never from a second look at a path:
   the content-derived id,

       id = SHA-256 of "onnx-import-id/2\\n" + origin + "\\n" + model_sha256 + "\\n"
            + for each external file, sorted by location: location + "\\0" + sha256 + "\\n"

   where origin is "upload" or "path" (an upload is always stored and served
   from the store, never from a data-root record with the same bytes), and
   the SHA-256 digests are hex (an upload counts every external_data part,
   which must all be used; a path counts the external files its tensors
   use); and each source file's identity (size, mtime, inode);
4. commit the work folder to the store (`Store.commit`) with its record and
   summary, and give the caller's tenant its record of the model; answer
   with the summary: 201, or 200 if this tenant held that id already (content
   another tenant holds is imported like new: a worker runs and the answer is
   201, so nothing tells a tenant what others imported). The summary's
   `input` is the name this request gave the model.

The front end never parses model bytes; what it reads of the worker's answer
is bounded (the summary), the rest it copies to files. A full store file
system is a 507, as is a store below its free-space floor with nothing left
to evict; more bytes for one import than `--max-import-bytes` is a 413.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import anyio.to_thread
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import ValidationError

from service.http.problems import ProblemError, bounded, import_problem
from service.http.request_body import body_chunks
from service.http.request_context import current_request
from service.http.schemas import PathRequest
from service.http.uploads import Upload, receive_upload
from service.imports.summary import finish_summary
from service.paths import relative_below, resolve_under_root
from service.sandbox.catalog_format import CONVERTED_FILE_KEY, MODEL_FILE_KEY
from service.sandbox.protocol import IMPORT_STREAMS, ImportFailure, SourceReport, WorkerHeader, WorkerJob
from service.sandbox.supervisor import WorkerOutcome
from service.state import Service
from service.store.files import is_full
from service.store.model_store import ImportTooLargeError, ModelFolder, StoreFullError, TenantQuotaError
from service.store.records import SourceFile, StoredRecord
from service.store.tenants import TenantRecord

log = logging.getLogger("service")

MAX_JSON_BODY = 64 << 10
SUMMARY_TENSORS = 100  # tensors (and initializers) a summary lists; the rest are paged
TEST_SLEEP_HEADER = "x-test-worker-sleep"
TEST_PAUSE_HEADER = "x-test-pause-before-commit"


def model_id_of(origin: str, model_sha256: str, externals: list[tuple[str, str]]) -> str:
    """The content-derived id (see the module comment)."""
    digest = hashlib.sha256(f"onnx-import-id/2\n{origin}\n{model_sha256}\n".encode())
    for location, sha256 in sorted(externals):
        digest.update(location.encode() + b"\0" + sha256.encode() + b"\n")
    return digest.hexdigest()


@contextlib.contextmanager
def store_space() -> Iterator[None]:
    """A full file system or a store without room, anywhere in an import: 507."""
    try:
        yield
    except StoreFullError as error:
        raise ProblemError("store-full", str(error)) from None
    except ImportTooLargeError as error:
        raise ProblemError("payload-too-large", str(error), limit="max_import_bytes") from None
    except TenantQuotaError as error:
        raise ProblemError("tenant-quota-exceeded", str(error), limit=error.limit) from None
    except OSError as error:
        if is_full(error):
            raise ProblemError("store-full", "the store's file system is full") from None
        raise


def _test_header(request: Request, service: Service, name: str) -> str | None:
    value = request.headers.get(name)
    if value is not None and not service.settings.test_hooks:
        raise ProblemError("bad-request", f"{name} is a test hook, and test hooks are off")
    return value


def test_hold(request: Request, service: Service) -> tuple[float, bool]:
    """Test hook: `X-Test-Worker-Sleep: 2.5` (sleep) or `spin:2.5` (burn CPU)."""
    header = _test_header(request, service, TEST_SLEEP_HEADER)
    if header is None:
        return service.settings.debug_worker_sleep, False
    spin = header.startswith("spin:")
    try:
        return max(0.0, min(600.0, float(header.removeprefix("spin:")))), spin
    except ValueError:
        raise ProblemError("bad-request", f"{TEST_SLEEP_HEADER} must be a number of seconds, or spin: and one") from None


async def test_pause(request: Request, service: Service) -> None:
    """Test hook: `X-Test-Pause-Before-Commit: 2` waits between the worker's
    answer and the commit (to swap links under a running import)."""
    header = _test_header(request, service, TEST_PAUSE_HEADER)
    if header is not None:
        try:
            await asyncio.sleep(max(0.0, min(60.0, float(header))))
        except ValueError:
            raise ProblemError("bad-request", f"{TEST_PAUSE_HEADER} must be a number of seconds") from None


async def run_worker(service: Service, job: WorkerJob, destinations: list[Path], max_bytes: int | None = None) -> WorkerHeader:
    """Run `job` in a worker slot; its header if ok, else the problem."""
    async with service.limiter.slot():
        outcome: WorkerOutcome = await anyio.to_thread.run_sync(service.sandbox.run, job, destinations, max_bytes)
    log.info("%s of %r: %s in %.3f s", job.task, job.display_name[:100], outcome.status, outcome.seconds)
    if outcome.status == "ok" and outcome.header is not None:
        return outcome.header
    if outcome.status == "error" and outcome.error is not None:
        raise import_problem(outcome.error)
    if outcome.status == "store_full":
        raise StoreFullError(outcome.detail)
    if outcome.status == "too_large":
        raise ImportTooLargeError(outcome.detail)
    if outcome.status == "resource_limit":
        failure = ImportFailure(kind="ResourceLimit", message=outcome.detail, input=job.display_name)
        raise import_problem(failure, limit=outcome.limit)
    raise import_problem(ImportFailure(kind="WorkerCrashed", message=outcome.detail, input=job.display_name))


def _worker_broke(detail: str) -> ProblemError:
    return ProblemError("worker-crashed", detail, kind="WorkerCrashed")


def _source(report: SourceReport, path: str, in_store: bool) -> SourceFile:
    return SourceFile(path=path, in_store=in_store, size=report.size, mtime_ns=report.mtime_ns, inode=report.inode)


async def make_room(service: Service, tenant: str) -> None:
    """Before an import: the store's free-space floor, evicting (what the tenant may evict) if need be; else 507."""
    if not await anyio.to_thread.run_sync(service.store.make_room, tenant):
        floor = service.settings.store_min_free
        raise StoreFullError(f"the store's file system has less than {floor} bytes free and no model left to evict")


async def receive(request: Request, service: Service, work: ModelFolder, tenant: str) -> Upload:
    """An upload's body onto disk, holding a receiving place (not an import place)."""
    async with service.limiter.receiving():
        await make_room(service, tenant)
        upload = await receive_upload(request, work.upload_model, work.upload_external, service.settings)
    if upload.size > service.settings.max_import_bytes:
        limit = service.settings.max_import_bytes
        raise ImportTooLargeError(f"the upload has {upload.size} bytes, more than the {limit} one import may add")
    return upload


async def import_upload(request: Request, service: Service, work: ModelFolder, tenant: str) -> Response:
    upload = await receive(request, service, work, tenant)
    assert upload.model is not None
    async with service.limiter.admission():
        model_id = model_id_of("upload", upload.model.sha256, [(e.location, e.sha256) for e in upload.externals])
        if service.store.visible(tenant, model_id):  # this tenant's own, again
            return await stored_summary(service, model_id, 200, upload.display_name)
        # Content another tenant holds is imported like new (a worker runs, the
        # answer is 201): neither the status nor the time says it existed.
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
        header = await run_worker(service, job, [work.catalog, work.converted], service.settings.max_import_bytes - upload.size)
        unused = sorted({staged.location for staged in upload.externals} - set(header.external_files))
        if unused:
            names = ", ".join(repr(location) for location in unused[:10])
            raise ProblemError("bad-request", f"{len(unused)} external_data parts are not used by any tensor: {bounded(names, 300)}")
        reports = {report.key: report for report in header.sources}
        if set(reports) != {MODEL_FILE_KEY, *header.external_files}:
            raise _worker_broke("the worker's report of the files it read does not match its tensors")
        files = {MODEL_FILE_KEY: _source(reports[MODEL_FILE_KEY], work.relative(work.upload_model), True)}
        for location in header.external_files:
            files[location] = _source(reports[location], work.relative(work.upload_external / location), True)
        await test_pause(request, service)
        owner = TenantRecord(tenant=tenant, input=upload.display_name, created_ns=time.time_ns())
        return await commit(service, work, model_id, header, files, owner, upload.model.size, upload.model.sha256)


async def read_path_request(request: Request, service: Service) -> PathRequest:
    body = bytearray()
    async for chunk in body_chunks(request, service.settings.body_timeout, 0):
        body += chunk
        if len(body) > MAX_JSON_BODY:
            raise ProblemError("payload-too-large", f"a JSON request body is at most {MAX_JSON_BODY} bytes")
    try:
        return PathRequest.model_validate_json(bytes(body))
    except ValidationError as error:
        raise RequestValidationError(error.errors(include_url=False, include_input=False)) from None


async def import_path(request: Request, service: Service, work: ModelFolder, tenant: str) -> Response:
    wanted = await read_path_request(request, service)
    data_root = os.path.realpath(service.settings.data_root)
    resolved = resolve_under_root(data_root, wanted.path)
    folder, name = os.path.split(resolved.real_path)
    async with service.limiter.admission():
        await make_room(service, tenant)
        sleep, spin = test_hold(request, service)
        job = service.sandbox.job(
            "import",
            directory=folder,
            model=name,
            display_name=wanted.path,
            summary_items=SUMMARY_TENSORS,
            allow_hard_links=service.settings.allow_hard_links,
            expected_model=(resolved.device, resolved.inode),
            hash_sources=True,
            sleep=sleep,
            spin=spin,
        )
        header = await run_worker(service, job, [work.catalog, work.converted], service.settings.max_import_bytes)
        reports = {report.key: report for report in header.sources}
        if set(reports) != {MODEL_FILE_KEY, *header.external_files}:
            raise _worker_broke("the worker's report of the files it read does not match its tensors")
        files: dict[str, SourceFile] = {}
        for key, report in reports.items():
            relative = relative_below(data_root, report.path)
            if relative is None:
                raise _worker_broke("the worker reports a file outside the data root")
            files[key] = _source(report, relative, False)
        externals = [(key, report.sha256) for key, report in reports.items() if key != MODEL_FILE_KEY]
        model_sha = reports[MODEL_FILE_KEY].sha256
        model_id = model_id_of("path", model_sha, externals)
        await test_pause(request, service)
        if service.store.has(model_id):
            await anyio.to_thread.run_sync(service.store.refresh_sources, model_id, files)
        if service.store.visible(tenant, model_id):
            return await stored_summary(service, model_id, 200, wanted.path)
        owner = TenantRecord(tenant=tenant, input=wanted.path, created_ns=time.time_ns())
        return await commit(service, work, model_id, header, files, owner, reports[MODEL_FILE_KEY].size, model_sha)


async def commit(
    service: Service,
    work: ModelFolder,
    model_id: str,
    header: WorkerHeader,
    files: dict[str, SourceFile],
    owner: TenantRecord,
    model_size: int,
    model_sha256: str,
) -> Response:
    """Store the work folder (unless that content is stored) and give the
    tenant its record: 201 when the model is new for the tenant."""
    assert header.summary is not None and len(header.streams) == len(IMPORT_STREAMS)
    if header.streams[1]:
        info = os.stat(work.converted)
        files[CONVERTED_FILE_KEY] = SourceFile(
            path=work.relative(work.converted), in_store=True, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino
        )
    summary = finish_summary(header.summary, model_id, model_size, model_sha256)
    record = StoredRecord(
        id=model_id,
        input=owner.input,
        created_ns=time.time_ns(),
        model_size=model_size,
        model_sha256=model_sha256,
        tensor_count=header.tensor_count,
        files=files,
    )
    body = _json_bytes(summary)
    created = await anyio.to_thread.run_sync(service.store.commit, work, model_id, record, body, owner)
    return await stored_summary(service, model_id, 201 if created else 200, owner.input)


def _json_bytes(document: object) -> bytes:
    return json.dumps(document, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()


async def stored_summary(service: Service, model_id: str, status: int, display_name: str) -> Response:
    """The stored summary as the answer to a POST, under the name this request
    gave the model (another client's name for the same bytes is never shown)."""
    if (info := current_request()) is not None:
        info.model_id = model_id
    folder = service.store.folder(model_id)
    try:
        body = await anyio.to_thread.run_sync(folder.summary.read_bytes)
    except FileNotFoundError:
        raise ProblemError("not-found", "the model was evicted from the store meanwhile; post it again") from None
    service.store.touch(model_id)
    summary = json.loads(body)
    summary["input"] = display_name
    return Response(_json_bytes(summary), status_code=status, media_type="application/json", headers={"Location": f"/models/{model_id}"})
