"""The import use case: an upload or a data-root path -> a worker -> identify -> commit.

Owns `import_upload` and `import_path` (a data root that is a folder on this
machine, read in place; `service.imports.root_imports` picks it), each run
in a fresh work folder of the store, and `stored_summary`. They take parsed
inputs and return an `Imported` result, and raise the typed errors of
`service.errors`; the HTTP layer (`service.http.routes.models`) parses the
request, renders the result and maps the errors to problems. The steps:

1. receive: an upload is streamed into the work folder by the caller's
   `receive` (`service.http.uploads`) while it holds a receiving place; only
   then does it join the import queue (`service.imports.limiter`). A path is
   confined to the data root (`service.paths`);
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
   summary, and give the caller's tenant its record of the model. The result
   is the summary and whether the model is new for the tenant (201) or held
   already (200); content another tenant holds is imported like new (a
   worker runs and the answer is 201), so nothing tells a tenant what others
   imported. The summary's `input` is the name this request gave the model.

The front end never parses model bytes; what it reads of the worker's answer
is bounded (the summary), the rest it copies to files. A full store file
system is `StoreFull`, as is a store below its free-space floor with nothing
left to evict; more bytes for one import than `--max-import-bytes` is
`ImportTooLarge`.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from service.checks.runs import CheckRuns, merged, stages_missing
from service.errors import BadInput, ImportFailed, ImportTooLarge, NotFound, StoreFull, bounded
from service.imports.checks import CheckRequest, complete_checks, default_checks, with_check_worker
from service.imports.inputs import Upload
from service.imports.parts import ImportParts
from service.imports.summary import SUMMARY_TENSORS, content_summary, summary_bytes, tenant_view
from service.imports.tenant_checks import keep_runs
from service.paths import relative_below, resolve_under_root
from service.sandbox.catalog_format import CONVERTED_FILE_KEY, MODEL_FILE_KEY
from service.sandbox.protocol import IMPORT_STREAMS, ImportFailure, SourceReport, WorkerHeader, WorkerJob
from service.store.folder_root import FolderRoot
from service.store.layout import ModelFolder
from service.store.records import SourceFile, StoredRecord, TenantRecord

log = logging.getLogger("service")

ReceiveUpload = Callable[[Path, Path], Awaitable[Upload]]  # (where the model goes, the folder for external parts)


@dataclass(frozen=True, slots=True)
class ImportHooks:
    """Test hooks of one import (refused by the HTTP layer unless test hooks are on)."""

    sleep: float = 0.0  # the worker waits this long before reading
    spin: bool = False  # ... burning CPU instead of sleeping
    pause: float = 0.0  # wait between the worker's answer and the commit (to swap links under an import)
    hold_uploaded: float = 0.0  # wait between the content's upload and its record (to kill a replica mid-commit)


@dataclass(frozen=True, slots=True)
class Imported:
    model_id: str
    created: bool  # new for this tenant (201), or held already (200)
    summary: bytes  # the stored summary, under the name this request gave the model


def model_id_of(origin: str, model_sha256: str, externals: list[tuple[str, str]]) -> str:
    """The content-derived id (see the module comment)."""
    digest = hashlib.sha256(f"onnx-import-id/2\n{origin}\n{model_sha256}\n".encode())
    for location, sha256 in sorted(externals):
        digest.update(location.encode() + b"\0" + sha256.encode() + b"\n")
    return digest.hexdigest()


async def run_worker(parts: ImportParts, job: WorkerJob, destinations: list[Path], max_bytes: int | None = None) -> WorkerHeader:
    """Run `job` in a worker slot; its header, or the typed error of how it ended."""
    async with parts.limiter.slot():
        outcome = await anyio.to_thread.run_sync(parts.sandbox.run, job, destinations, max_bytes)
    log.info("%s", outcome.logged(job.task, job.display_name))
    return outcome.result(job.display_name)


def _worker_broke(detail: str, display_name: str) -> ImportFailed:
    return ImportFailed(ImportFailure(kind="WorkerCrashed", message=detail, input=display_name))


def worker_reports(header: WorkerHeader, display_name: str) -> dict[str, SourceReport]:
    """The worker's report of each file it read: the model and the external files its tensors use."""
    reports = {report.key: report for report in header.sources}
    if set(reports) != {MODEL_FILE_KEY, *header.external_files}:
        raise _worker_broke("the worker's report of the files it read does not match its tensors", display_name)
    return reports


def _source(report: SourceReport, path: str, in_store: bool) -> SourceFile:
    return SourceFile(path=path, in_store=in_store, size=report.size, mtime_ns=report.mtime_ns, inode=report.inode)


async def make_room(parts: ImportParts, tenant: str) -> None:
    """Before an import, whose size is not known yet (a body to receive, a
    worker's output): StoreFull unless the store's file system is above its
    free-space floor, or evicting what the tenant may evict would bring it
    back there. Nothing is evicted here: the commit evicts what the bytes
    then received need (`Store.commit`), or refuses evicting nothing."""
    if not await anyio.to_thread.run_sync(parts.store.floor_reachable, tenant):
        floor = parts.settings.store_min_free
        raise StoreFull(
            f"the store's file system has less than {floor} bytes free (--store-min-free), and evicting every model this "
            "tenant may evict would not free enough; nothing was evicted"
        )


async def import_upload(
    parts: ImportParts, tenant: str, receive: ReceiveUpload, hooks: ImportHooks, checks: CheckRequest | None = None
) -> Imported:
    """Import an upload that `receive` streams into the work folder."""
    with parts.store.work_folder() as work:
        async with parts.limiter.receiving():  # a receiving place, not an import place
            await make_room(parts, tenant)
            upload = await receive(work.upload_model, work.upload_external)
        limit = parts.settings.max_import_bytes
        if upload.size > limit:
            raise ImportTooLarge(f"the upload has {upload.size} bytes, more than the {limit} one import may add")
        assert upload.model is not None
        async with parts.limiter.admission():
            model_id = model_id_of("upload", upload.model.sha256, [(e.location, e.sha256) for e in upload.externals])
            asked = checks or default_checks(parts)
            if await anyio.to_thread.run_sync(parts.store.visible, tenant, model_id):  # this tenant's own, again
                runs = CheckRuns.from_bytes(await anyio.to_thread.run_sync(parts.store.checks, tenant, model_id))
                if not stages_missing(runs, asked.stages, asked.dims):
                    with contextlib.suppress(NotFound):  # evicted or deleted meanwhile: imported as new
                        return Imported(model_id, False, await stored_summary(parts, tenant, model_id, upload.display_name))
            # Content another tenant holds is imported like new (a worker runs, the
            # answer is 201): neither the status nor the time says it existed. So is
            # this tenant's own when it asks for stages it has not run on it.
            job = parts.sandbox.job(
                "import",
                directory=str(work.files),
                model=work.upload_model.name,
                display_name=upload.display_name,
                external_dir=str(work.upload_external),
                allow_hard_links=True,  # the service's own files (a resumable upload's are hard-linked from its folder)
                summary_items=SUMMARY_TENSORS,
                checks=(checks or default_checks(parts)).stages,
                dims=(checks or default_checks(parts)).dims,
                sleep=hooks.sleep,
                spin=hooks.spin,
            )
            header, checked = await with_check_worker(
                parts, job, lambda: run_worker(parts, job, [work.catalog, work.converted], limit - upload.size)
            )
            runs = await complete_checks(parts, job, header, work.catalog, checked)
            unused = sorted({staged.location for staged in upload.externals} - set(header.external_files))
            if unused:
                names = ", ".join(repr(location) for location in unused[:10])
                raise BadInput(f"{len(unused)} external_data parts are not used by any tensor: {bounded(names, 300)}")
            reports = worker_reports(header, upload.display_name)
            files = {MODEL_FILE_KEY: _source(reports[MODEL_FILE_KEY], work.relative(work.upload_model), True)}
            for location in header.external_files:
                files[location] = _source(reports[location], work.relative(work.upload_external / location), True)
            await asyncio.sleep(hooks.pause)
            if (again := await held_again(parts, tenant, model_id, upload.display_name, runs)) is not None:  # held already
                return again
            owner = TenantRecord(tenant=tenant, input=upload.display_name, created_ns=time.time_ns())
            return await commit(parts, work, model_id, header, files, owner, upload.model.size, upload.model.sha256, hooks, runs)


async def import_path(
    parts: ImportParts, root: FolderRoot, tenant: str, path: str, hooks: ImportHooks, checks: CheckRequest | None = None
) -> Imported:
    """Import the model at `path`, a client's path under the data root folder `root`."""
    data_root = root.url
    resolved = resolve_under_root(data_root, path)
    folder, name = os.path.split(resolved.real_path)
    with parts.store.work_folder() as work:
        async with parts.limiter.admission():
            await make_room(parts, tenant)
            job = parts.sandbox.job(
                "import",
                directory=folder,
                model=name,
                display_name=path,
                summary_items=SUMMARY_TENSORS,
                checks=(checks or default_checks(parts)).stages,
                dims=(checks or default_checks(parts)).dims,
                allow_hard_links=parts.settings.allow_hard_links,
                expected_model=(resolved.device, resolved.inode),
                hash_sources=True,
                sleep=hooks.sleep,
                spin=hooks.spin,
            )
            header, checked = await with_check_worker(
                parts, job, lambda: run_worker(parts, job, [work.catalog, work.converted], parts.settings.max_import_bytes)
            )
            runs = await complete_checks(parts, job, header, work.catalog, checked)
            reports = worker_reports(header, path)
            files: dict[str, SourceFile] = {}
            for key, report in reports.items():
                relative = relative_below(data_root, report.path)
                if relative is None:
                    raise _worker_broke("the worker reports a file outside the data root", path)
                files[key] = _source(report, relative, False)
            externals = [(key, report.sha256) for key, report in reports.items() if key != MODEL_FILE_KEY]
            model_sha = reports[MODEL_FILE_KEY].sha256
            model_id = model_id_of("path", model_sha, externals)
            await asyncio.sleep(hooks.pause)
            if await anyio.to_thread.run_sync(parts.store.has, model_id):
                await anyio.to_thread.run_sync(parts.store.refresh_sources, model_id, files)
            if (again := await held_again(parts, tenant, model_id, path, runs)) is not None:  # held already
                return again
            owner = TenantRecord(tenant=tenant, input=path, created_ns=time.time_ns())
            return await commit(parts, work, model_id, header, files, owner, reports[MODEL_FILE_KEY].size, model_sha, hooks, runs)


async def commit(
    parts: ImportParts,
    work: ModelFolder,
    model_id: str,
    header: WorkerHeader,
    files: dict[str, SourceFile],
    owner: TenantRecord,
    model_size: int,
    model_sha256: str,
    hooks: ImportHooks,
    runs: CheckRuns,
) -> Imported:
    """Store the work folder (unless that content is stored) and give the
    tenant its record, with `runs` (this import's check stages) as its own
    (laid over its earlier ones if it held the model meanwhile); `created`
    when the model is new for the tenant."""
    assert header.summary is not None and len(header.streams) == len(IMPORT_STREAMS)
    if header.streams[1]:
        info = os.stat(work.converted)
        files[CONVERTED_FILE_KEY] = SourceFile(
            path=work.relative(work.converted), in_store=True, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino
        )
    summary = content_summary(header.summary, model_id, model_size, model_sha256, runs)
    record = StoredRecord(
        id=model_id,
        input=owner.input,
        created_ns=time.time_ns(),
        model_size=model_size,
        model_sha256=model_sha256,
        tensor_count=header.tensor_count,
        files=files,
    )
    earlier = CheckRuns.from_bytes(await anyio.to_thread.run_sync(parts.store.checks, owner.tenant, model_id))
    runs = merged(earlier, runs)
    store_commit = functools.partial(parts.store.commit, checks=runs.to_bytes(), hold_uploaded=hooks.hold_uploaded)
    created = await anyio.to_thread.run_sync(store_commit, work, model_id, record, summary_bytes(summary), owner)
    await anyio.to_thread.run_sync(parts.store.touch, model_id)
    return Imported(model_id, created, tenant_view(summary, owner.input, runs))  # never the name another tenant gave it


async def held_again(parts: ImportParts, tenant: str, model_id: str, display_name: str, runs: CheckRuns) -> Imported | None:
    """A model the tenant holds, imported again: this import's stages laid over
    its earlier runs, and its summary (200). None if the tenant does not hold
    it, or it went meanwhile (a DELETE, an eviction): the caller commits it as new."""
    if not await anyio.to_thread.run_sync(parts.store.visible, tenant, model_id):
        return None
    try:
        await keep_runs(parts, tenant, model_id, runs)
        return Imported(model_id, False, await stored_summary(parts, tenant, model_id, display_name))
    except NotFound:
        return None


async def stored_summary(parts: ImportParts, tenant: str, model_id: str, display_name: str) -> bytes:
    """The stored summary as `tenant` sees it: under the name this request
    gave the model, with the tenant's own check runs (another client's name
    and checks for the same bytes are never shown); marks the model used. A
    holding from before per-tenant runs shows the checks stored with the content."""
    try:
        body = await anyio.to_thread.run_sync(parts.store.summary, model_id)
    except FileNotFoundError:
        raise NotFound("the model was evicted from the store meanwhile; post it again") from None
    runs = CheckRuns.from_bytes(await anyio.to_thread.run_sync(parts.store.checks, tenant, model_id))
    await anyio.to_thread.run_sync(parts.store.touch, model_id)
    return tenant_view(json.loads(body), display_name, runs)
