"""A model version's files, fetched through MLflow and imported as the hook's tenant: `import_version`.

The use case of `service.imports.flow.import_upload` for a registry version,
in one work folder and within the import capacity (`service.limiter`): the
version is asked of MLflow and its folder resolved (`service.registry.sources`);
the model (at most `--max-upload` bytes) is downloaded into the work folder
as an upload's model part; a sandboxed worker reports the external data files
it names (task "externals": the front end never parses model bytes), each
downloaded from beside the model (at most `--max-external-files`,
`--max-upload-total` in all); then the import proper runs with the asked
check stages and is committed like an upload of that tenant (origin
"upload": the store keeps the bytes).
"""

from __future__ import annotations

import logging
import posixpath
import time
from pathlib import Path
from typing import Any

from service.errors import BadInput, ImportTooLarge
from service.imports.checks import CheckRequest, complete_checks, with_check_worker
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
from service.registry.folders import ArtifactFolder, ObjectMissing
from service.registry.mlflow_api import Fetched, MlflowApi, MlflowRefused, TooLarge
from service.registry.mlmodel import MAX_MLMODEL
from service.registry.sources import Refused, artifact_folder, confined, model_file
from service.sandbox.catalog_format import MODEL_FILE_KEY
from service.sandbox.protocol import SourceReport
from service.store.records import SourceFile, TenantRecord

log = logging.getLogger("service")


async def import_version(parts: ImportParts, api: MlflowApi, tenant: str, name: str, version: str, checks: CheckRequest) -> Imported:
    """Import version `version` of registered model `name` for `tenant`, running `checks`."""
    try:
        record = await api.model_version(name, version)
    except MlflowRefused as error:
        raise Refused(f"MLflow has no version {version} of {name!r}: {error}") from None
    folder = await artifact_folder(api, record, parts.data_root)
    settings = parts.settings
    display_name = f"models:/{name}/{version}"
    with parts.store.work_folder() as work:
        async with parts.limiter.admission():
            await make_room(parts, tenant)
            listing = await _listed(folder)
            names = {str(entry.get("path", "")).rpartition("/")[2]: entry for entry in listing}
            mlmodel = None
            if "MLmodel" in names and not names["MLmodel"].get("is_dir"):
                scratch = work.files / "MLmodel"
                await _download(folder, "MLmodel", scratch, MAX_MLMODEL, "the MLmodel file")
                mlmodel = scratch.read_text(errors="replace")
                scratch.unlink()
            path = model_file(mlmodel, listing)
            model = await _download(folder, path, work.upload_model, settings.max_upload, "the model")
            beside = posixpath.dirname(path)
            lister = parts.sandbox.job(
                "externals", directory=str(work.files), model=work.upload_model.name, display_name=display_name, allow_hard_links=True
            )
            named = (await run_worker(parts, lister, [], 0)).external_files
            if len(named) > settings.max_external_files:
                raise BadInput(f"the model names {len(named)} external data files, more than {settings.max_external_files}")
            fetched: dict[str, Fetched] = {MODEL_FILE_KEY: model}
            left = settings.max_upload_total - model.size
            for location in named:
                where = posixpath.join(beside, confined(location, "the external data location"))
                fetched[location] = await _download(folder, where, work.upload_external / location, left, f"external data {location!r}")
                left -= fetched[location].size
            total = sum(item.size for item in fetched.values())
            log.info("mlflow: %s fetched through MLflow: %d files, %d bytes", display_name, len(fetched), total)
            job = parts.sandbox.job(
                "import",
                directory=str(work.files),
                model=work.upload_model.name,
                display_name=display_name,
                external_dir=str(work.upload_external),
                allow_hard_links=True,  # the service's own copies
                summary_items=SUMMARY_TENSORS,
                checks=checks.stages,
                dims=checks.dims,
            )
            limit = settings.max_import_bytes - (settings.max_upload_total - left)
            header, checked = await with_check_worker(
                parts, job, lambda: run_worker(parts, job, [work.catalog, work.converted], max(0, limit))
            )
            runs = await complete_checks(parts, job, header, work.catalog, checked)
            reports = worker_reports(header, display_name)
            files = {MODEL_FILE_KEY: _source(reports[MODEL_FILE_KEY], work.relative(work.upload_model))}
            for location in header.external_files:
                files[location] = _source(reports[location], work.relative(work.upload_external / location))
            externals = [(location, fetched[location].sha256) for location in header.external_files]
            model_id = model_id_of("upload", model.sha256, externals)
            if (again := await held_again(parts, tenant, model_id, display_name, runs)) is not None:  # held already
                return again
            owner = TenantRecord(tenant=tenant, input=display_name, created_ns=time.time_ns())
            return await commit(parts, work, model_id, header, files, owner, model.size, model.sha256, ImportHooks(), runs)


def _source(report: SourceReport, path: str) -> SourceFile:
    return SourceFile(path=path, in_store=True, size=report.size, mtime_ns=report.mtime_ns, inode=report.inode)


async def _listed(folder: ArtifactFolder) -> list[dict[str, Any]]:
    try:
        return await folder.listing()
    except MlflowRefused as error:
        raise Refused(f"the version's artifact folder {folder.where[:200]!r} cannot be listed: {error}") from None


async def _download(folder: ArtifactFolder, path: str, target: Path, max_bytes: int, what: str) -> Fetched:
    if max_bytes <= 0:
        raise ImportTooLarge(f"{what} would pass the bytes one import may read (--max-upload-total)")
    try:
        return await folder.download(path, target, max_bytes)
    except TooLarge:
        raise ImportTooLarge(f"{what} has more than the {max_bytes} bytes it may have (--max-upload, --max-upload-total)") from None
    except (MlflowRefused, ObjectMissing) as error:
        raise Refused(f"{what} ({path[:200]!r}) is not among the version's artifacts in {folder.where[:200]}: {error}") from None
