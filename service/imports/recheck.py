"""Check stages run again on a stored model, for one tenant (`POST /models/{id}/checks`).

Owns `recheck`: the stored model's files are imported again by a sandboxed
worker with the stages asked (in an import slot, like any import; its
catalogue and converted bytes are dropped), the files it read are checked to
be the ones recorded, and the stages' results become this tenant's, in place
of its earlier runs of the same stages (`service.imports.tenant_checks`).
Nothing of the stored model changes, and no other tenant's runs are read.
"""

from __future__ import annotations

import os
from contextlib import AsyncExitStack

from service.imports.checks import CheckRequest, complete_checks, with_check_worker
from service.imports.flow import run_worker, stored_summary
from service.imports.parts import ImportParts
from service.imports.stored_model import check_sources, held_model, stored_model_files
from service.imports.summary import SUMMARY_TENSORS
from service.imports.tenant_checks import keep_runs
from service.sandbox.catalog_format import MODEL_FILE_KEY


async def recheck(parts: ImportParts, tenant: str, model_id: str, request: CheckRequest) -> bytes:
    """Run `request`'s stages on the tenant's stored model; its summary with
    the tenant's checks, these runs in place of its earlier ones of the same stages."""
    record, held = await held_model(parts, tenant, model_id)
    async with parts.limiter.admission(), AsyncExitStack() as stack:
        model_path, external_dir = await stored_model_files(parts, model_id, record, stack)
        work = stack.enter_context(parts.store.work_folder())
        job = parts.sandbox.job(
            "import",
            directory=os.path.dirname(model_path),
            model=os.path.basename(model_path),
            display_name=held.input,  # the name this tenant gave it, never another tenant's
            external_dir=external_dir,
            allow_hard_links=record.files[MODEL_FILE_KEY].in_store or parts.settings.allow_hard_links,  # the store's own files
            summary_items=SUMMARY_TENSORS,
            checks=request.stages,
            dims=request.dims,
        )
        header, checked = await with_check_worker(
            parts, job, lambda: run_worker(parts, job, [work.catalog, work.converted], parts.settings.max_import_bytes)
        )
        check_sources(record, header)
        runs = await complete_checks(parts, job, header, work.catalog, checked)
    await keep_runs(parts, tenant, model_id, runs)
    return await stored_summary(parts, tenant, model_id, held.input)
