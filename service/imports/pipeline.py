"""The import pipeline: `run(parts, source, tenant, checks)`, the one way a model is imported, checked again or rendered.

Every source goes through it (`service.imports.sources`: an upload's body,
finished resumable uploads, a data-root folder or bucket, a registry's
version, a model the store holds), and each step is written here once:

1. **admission**: a place in the import queue, fair between tenants
   (`service.imports.admission`); a source whose bytes the client sends is
   received first under a receiving place, and only then queued, so a slow
   client never holds an import place (an upload's model part may be checked
   while the rest arrives, by a worker in a slot of its own turn:
   `service.imports.sources.model_part_check`). Content new to the store needs room:
   the store's file system above its free-space floor, or evicting what the
   tenant may evict would bring it back there (`StoreFull` otherwise);
2. **staging**: the source puts its files into the request's work folder
   within the byte budget (`service.imports.staging`), and says what they
   are. When every digest is known already (an upload, a registry version)
   and the tenant holds that content with every stage asked, the answer is
   its stored summary, without a worker;
3. **workers**: the import's sandboxed worker and, for the stages that hand
   the model to onnx or onnxruntime, a check worker beside it, its memory
   sized to the model's bytes (as staged; a model read in place has its
   external files listed by a worker first), each in a
   worker slot of the import's place (`service.imports.workers`), within
   the bytes the import may add to the store (`--max-import-bytes`, less
   what it keeps of the staged bytes), and for the `signature` stage a worker
   on the folder the source staged (`Staged.signed_folder`); a graph render runs the `graph` task;
4. **checks and catalogue**: every stage's result becomes this run's
   `CheckRuns`, their findings and inferred types added to the catalogue
   (`service.checks.requested`); an upload's part no tensor uses is
   `BadInput`; a stored model's files must be the ones recorded;
5. **commit**: new content is stored with its record and summary, and the
   tenant given its record of it, with these runs as its own
   (`Store.commit`; the id from what the worker read:
   `service.imports.identity`); content the tenant holds already keeps these
   runs over its earlier ones, and takes the name and label this import
   gave, if it gave any (`service.imports.naming`); a recheck keeps them; a
   render adds the graph document. Where the service signs, the tenant's
   runs as they now stand are attested over the files' digests and the
   bundle kept (`service.imports.attesting`; a recheck's worker hashes the
   files it reads for it). The app's `ImportSteps`, if any, are awaited before the commit
   and between the content's upload and its record;
6. **answer**: `Imported` (the id, whether the model is new for the tenant,
   its summary as this tenant sees it), and the source settles (keeps or
   lets go of what it staged: `Source.settle`).

A task cancelled at any step (its client went) leaves the queue, or has
its workers ended, and keeps nothing (`service.imports.workers`). The
front end never parses model bytes; what it reads of a worker's answer is
bounded (the summary), the rest it copies to files.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import time

import anyio
import anyio.from_thread
import anyio.to_thread

from service.checks.check_worker import model_and_external_bytes, names_no_external_file
from service.checks.outcome import IN_CHECK_WORKER
from service.checks.requested import CheckRequest, complete_checks, default_checks
from service.checks.runs import CheckRuns, SmokeAsked, merged, stages_missing
from service.checks.tenant_runs import keep_runs
from service.errors import MODEL_GONE, ImportTooLarge, NotFound, StoreFull
from service.imports.admission import Place
from service.imports.answers import Imported, held_again, rename, stored_summary
from service.imports.attesting import sign_held, sign_run
from service.imports.identity import in_store, known_id, read_id, worker_reports
from service.imports.naming import Naming
from service.imports.parts import ImportParts
from service.imports.sources import Source
from service.imports.sources.stored import StoredModel, check_sources
from service.imports.sources.upload import unused_parts
from service.imports.staging import Budget, Staged, Staging
from service.imports.summary import SUMMARY_TENSORS, content_summary, summary_bytes, tenant_view
from service.imports.workers import run_worker, run_workers
from service.sandbox.protocol import IMPORT_STREAMS, Task, WorkerHeader, WorkerJob
from service.store.layout import ModelFolder
from service.store.records import SourceFile, StoredRecord, TenantRecord
from service.tasks.catalog_format import CONVERTED_FILE_KEY, MODEL_FILE_KEY


async def run(
    parts: ImportParts, source: Source, tenant: str, checks: CheckRequest | None = None, naming: Naming | None = None
) -> Imported:
    """Import (or check again, or render) what `source` holds for `tenant`, running `checks` (see the module comment);
    `naming`: the name and label the request gave, over those the source staged."""
    asked = checks or default_checks(parts.settings)
    failed: BaseException | None = None
    try:
        with parts.store.work_folder() as area:
            return await _run(parts, source, tenant, asked, area, naming or Naming())
    except BaseException as error:
        failed = error
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await source.settle(failed)


async def _run(parts: ImportParts, source: Source, tenant: str, checks: CheckRequest, area: ModelFolder, naming: Naming) -> Imported:
    budget = Budget(parts.settings)
    stored = isinstance(source, StoredModel)
    async with contextlib.AsyncExitStack() as stack:
        if source.sent_by_client:  # received under a receiving place, then queued
            async with parts.admission.receiving(tenant):
                await make_room(parts, tenant)
                staging = Staging(area, budget, functools.partial(listed_outside_the_queue, parts, tenant))
                staged = await source.stage(staging)
            place = await stack.enter_async_context(parts.admission.admitted(tenant))
        else:
            place = await stack.enter_async_context(parts.admission.admitted(tenant))
            if not stored:
                await make_room(parts, tenant)
            staging = Staging(area, budget, functools.partial(_listed_externals, parts, place))
            staged = await source.stage(staging)
        if staged.external_locations is None:  # what the source had a worker list, if it did
            staged.external_locations = staging.listed
        staged.named(naming)
        limit = parts.settings.max_import_bytes
        if staged.kept_bytes > limit:
            raise ImportTooLarge(f"the import has {staged.kept_bytes} bytes to keep, more than the {limit} one import may add")
        if (held := await _held_with_every_stage(parts, tenant, staged, checks)) is not None:
            return held
        max_bytes = limit - staged.kept_bytes
        if isinstance(source, StoredModel) and source.render:
            return await _render(parts, place, tenant, staged, area, max_bytes)
        model_bytes = await _model_bytes(parts, place, staged) if any(stage in IN_CHECK_WORKER for stage in checks.stages) else 0
        hash_sources = staged.hash_in_worker or (stored and parts.attester is not None)  # a recheck's attestation: its files' digests
        job = _job(parts, "import", staged, checks=checks.stages, dims=checks.dims, soft_dims=checks.soft_dims,
                   summary_items=SUMMARY_TENSORS, hash_sources=hash_sources, model_bytes=model_bytes)  # fmt: skip
        destinations = [area.catalog, area.converted]
        header, checked = await run_workers(parts, place, job, destinations, max_bytes, staged.external_locations, staged.signed_folder)
        for path in staged.transient:  # read by the workers; never stored
            await anyio.to_thread.run_sync(functools.partial(path.unlink, missing_ok=True))
        runs = await complete_checks(job, header, area.catalog, checked)
        if staged.record is not None:  # a stored model, checked again
            check_sources(staged.record, header)
            await keep_runs(parts.store, tenant, staged.model_id, runs)
            await sign_run(parts, tenant, staged.model_id, staged, {report.key: report.sha256 for report in header.sources})
            return Imported(staged.model_id, False, await stored_summary(parts, tenant, staged.model_id, staged.display_name))
        return await _commit_new(parts, tenant, staged, header, runs, area)


async def listed_outside_the_queue(parts: ImportParts, tenant: str, area: ModelFolder, display_name: str) -> list[str]:
    """`_listed_externals` for a model part checked early, before its import is queued (a body still
    arriving, `service.imports.sources.model_part_check`; a resumable upload just finished,
    `service.imports.model_upload_check`): a worker slot taken in its turn like any, fair
    between tenants, by a place outside the import queue."""
    return await _listed_externals(parts, Place(parts.admission, tenant), area, display_name)


async def _listed_externals(parts: ImportParts, place: Place, area: ModelFolder, display_name: str) -> list[str]:
    """The external locations the area's model names, as a sandboxed worker reads them (normalised, each once)."""
    job = _job(parts, "externals", Staged(display_name, "upload", str(area.files), area.upload_model.name))
    return (await run_worker(parts, place, job, [], 0)).external_files


async def _model_bytes(parts: ImportParts, place: Place, staged: Staged) -> int:
    """The model file and its external data, in bytes (what sizes the check worker's memory): as staged, or its file
    and the external files a sandboxed worker listed (while staging, else now, for a model read in place: kept in
    `staged.external_locations`, for the check worker; a name it cannot stat counts 0: the import worker refuses it)."""
    if staged.model_bytes is not None:
        return staged.model_bytes
    listed = staged.external_locations
    if listed is None and await anyio.to_thread.run_sync(names_no_external_file, os.path.join(staged.directory, staged.model)):
        listed = staged.external_locations = ()  # no worker needed to tell
    if listed is None:
        listed = staged.external_locations = tuple((await run_worker(parts, place, _job(parts, "externals", staged), [], 0)).external_files)
    return await anyio.to_thread.run_sync(model_and_external_bytes, staged.directory, staged.model, staged.external_dir, listed)


def _job(parts: ImportParts, task: Task, staged: Staged, **details: object) -> WorkerJob:
    """The worker job of `task` on `staged`'s files, with this service's limits."""
    return parts.sandbox.job(
        task,
        directory=staged.directory,
        model=staged.model,
        display_name=staged.display_name,
        external_dir=staged.external_dir,
        allow_hard_links=staged.allow_hard_links,
        expected_model=staged.expected_model,
        **details,
    )


async def _held_with_every_stage(parts: ImportParts, tenant: str, staged: Staged, checks: CheckRequest) -> Imported | None:
    """Content whose id staging knows, held by this tenant with every stage asked: its stored summary, no worker."""
    model_id = known_id(staged)
    if model_id is None or not await anyio.to_thread.run_sync(parts.store.visible, tenant, model_id):
        return None
    runs = CheckRuns.from_bytes(await anyio.to_thread.run_sync(parts.store.checks, tenant, model_id))
    if stages_missing(runs, checks.stages, SmokeAsked(checks.dims, checks.soft_dims, parts.settings.smoke_second_dim)):
        return None  # checked like new: neither the status nor the time says another tenant holds it
    await rename(parts, tenant, model_id, staged.naming)
    with contextlib.suppress(NotFound):  # evicted or deleted meanwhile: imported as new
        held = Imported(model_id, False, await stored_summary(parts, tenant, model_id, staged.display_name))
        await sign_held(parts, tenant, model_id, staged)
        return held
    return None


async def _render(parts: ImportParts, place: Place, tenant: str, staged: Staged, area: ModelFolder, max_bytes: int) -> Imported:
    """The graph document of a stored model, added to its folder."""
    assert staged.record is not None
    job = _job(parts, "graph", staged, model_id=staged.model_id)
    header = await run_worker(parts, place, job, [area.graph], max_bytes)
    check_sources(staged.record, header)
    if not await anyio.to_thread.run_sync(parts.store.add_graph, staged.model_id, area.graph, tenant):
        raise NotFound(MODEL_GONE)
    return Imported(staged.model_id, False, b"")


async def _commit_new(
    parts: ImportParts, tenant: str, staged: Staged, header: WorkerHeader, runs: CheckRuns, area: ModelFolder
) -> Imported:
    """Content read from a source: its id and records from what the worker read, then stored (or held already)."""
    unused = sorted(staged.parts - set(header.external_files))
    if unused:
        raise unused_parts(unused)
    reports = worker_reports(header, staged.display_name)
    files = staged.record_files(reports) if staged.record_files is not None else in_store(area, reports)
    model_id = read_id(staged, reports)
    if staged.copies:
        await anyio.to_thread.run_sync(shutil.rmtree, area.files)  # copies: the objects are what the record names
    if staged.origin == "path" and await anyio.to_thread.run_sync(parts.store.has, model_id):
        await anyio.to_thread.run_sync(parts.store.refresh_sources, model_id, files)
    if parts.steps is not None:
        await parts.steps.before_commit(model_id)
    imported = await held_again(parts, tenant, model_id, staged.display_name, runs, staged.naming)  # held already
    if imported is None:
        owner = TenantRecord(tenant=tenant, input=staged.display_name, created_ns=time.time_ns(), label=staged.naming.label or "")
        imported = await commit(parts, area, model_id, header, files, owner, staged.model_sha256(reports), runs)
    await sign_run(parts, tenant, model_id, staged, {key: staged.digests.get(key) or report.sha256 for key, report in reports.items()})
    return imported


async def commit(
    parts: ImportParts,
    area: ModelFolder,
    model_id: str,
    header: WorkerHeader,
    files: dict[str, SourceFile],
    owner: TenantRecord,
    model_sha256: str,
    runs: CheckRuns,
) -> Imported:
    """Store the work folder (unless that content is stored) and give the
    tenant its record, with `runs` (this import's check stages) as its own
    (laid over its earlier ones if it held the model meanwhile); `created`
    when the model is new for the tenant."""
    assert header.summary is not None and len(header.streams) == len(IMPORT_STREAMS)
    if header.streams[1]:
        info = os.stat(area.converted)
        files[CONVERTED_FILE_KEY] = SourceFile(
            path=area.relative(area.converted), in_store=True, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino
        )
    model_size = files[MODEL_FILE_KEY].size
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
    steps = parts.steps
    uploaded = None if steps is None else lambda: anyio.from_thread.run(steps.content_uploaded, model_id)
    store_commit = functools.partial(parts.store.commit, checks=runs.to_bytes(), uploaded=uploaded)
    created = await anyio.to_thread.run_sync(store_commit, area, model_id, record, summary_bytes(summary), owner)
    await anyio.to_thread.run_sync(parts.store.touch, model_id)
    return Imported(model_id, created, tenant_view(summary, owner.input, runs, owner.label))  # never the name another tenant gave it


async def make_room(parts: ImportParts, tenant: str) -> None:
    """Before an import whose size is not known yet (a body to receive, a
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
