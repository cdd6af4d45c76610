"""The import of a server-side model fetched from its data root (a bucket: `--data-root s3://BUCKET/PREFIX`).

Owns `import_object`, the use case of `service.imports.flow.import_path` for
a data root the worker cannot read in place (the same objects are fetched
again for a later worker by `service.store.data_root.fetch_recorded`). It
uses only the `DataRoot` interface (`fetch`), so it serves any root but a
local folder's, which is read in place. The steps, in one work folder:

1. the path names a key below the root, confined as a folder's path is
   (`data_root.key_of`); the model object is fetched into the work folder,
   at most `--max-upload` bytes;
2. a sandboxed worker reads the model only and reports the external data
   files its tensors name (task "externals": the front end never parses
   model bytes); each is fetched from beside the model's key, within
   `--max-upload-total` in all;
3. the import proper runs on those copies, as for an upload;
4. the record names each object by key, ETag, version and SHA-256 (never
   the copies, which are removed before the commit: nothing of the data
   root is stored), and the id is that of a path import of the same bytes.
   Tensor bytes are served from the recorded objects, only while they are
   the ones recorded.
"""

from __future__ import annotations

import shutil
import time

import anyio.to_thread

from service.imports.checks import CheckRequest, complete_checks, default_checks, with_check_worker
from service.imports.flow import (
    Imported,
    ImportHooks,
    commit,
    held_again,
    make_room,
    model_id_of,
    run_worker,
    worker_reports,
)
from service.imports.parts import ImportParts
from service.imports.summary import SUMMARY_TENSORS
from service.sandbox.catalog_format import MODEL_FILE_KEY
from service.store.data_root import DataRoot, FetchedObject, beside, key_of
from service.store.records import TenantRecord


async def import_object(
    parts: ImportParts, root: DataRoot, tenant: str, path: str, hooks: ImportHooks, checks: CheckRequest | None = None
) -> Imported:
    """Import the model object a client's `path` names."""
    key = key_of(path)
    settings = parts.settings
    with parts.store.work_folder() as work:
        async with parts.limiter.admission():
            await make_room(parts, tenant)
            model = await anyio.to_thread.run_sync(root.fetch, key, work.upload_model, settings.max_upload)
            listing = parts.sandbox.job(
                "externals", directory=str(work.files), model=work.upload_model.name, display_name=path, allow_hard_links=True
            )
            named = (await run_worker(parts, listing, [], 0)).external_files
            fetched: dict[str, FetchedObject] = {MODEL_FILE_KEY: model}
            left = settings.max_upload_total - model.size
            for location in named:
                target = work.upload_external / location
                fetched[location] = await anyio.to_thread.run_sync(root.fetch, beside(key, location), target, left)
                left -= fetched[location].size
            job = parts.sandbox.job(
                "import",
                directory=str(work.files),
                model=work.upload_model.name,
                display_name=path,
                external_dir=str(work.upload_external),
                summary_items=SUMMARY_TENSORS,
                checks=(checks or default_checks(parts)).stages,
                dims=(checks or default_checks(parts)).dims,
                allow_hard_links=True,  # the worker's own copies
                sleep=hooks.sleep,
                spin=hooks.spin,
            )
            header, checked = await with_check_worker(
                parts, job, lambda: run_worker(parts, job, [work.catalog, work.converted], settings.max_import_bytes)
            )
            runs = await complete_checks(parts, job, header, work.catalog, checked)
            reports = worker_reports(header, path)
            files = {name: fetched[name].source() for name in reports}
            model_id = model_id_of("path", model.sha256, [(name, fetched[name].sha256) for name in reports if name != MODEL_FILE_KEY])
            shutil.rmtree(work.files)  # copies: the objects are what the record names
            if await anyio.to_thread.run_sync(parts.store.has, model_id):
                await anyio.to_thread.run_sync(parts.store.refresh_sources, model_id, files)
            if (again := await held_again(parts, tenant, model_id, path, runs)) is not None:  # held already
                return again
            owner = TenantRecord(tenant=tenant, input=path, created_ns=time.time_ns())
            return await commit(parts, work, model_id, header, files, owner, model.size, model.sha256, hooks, runs)
