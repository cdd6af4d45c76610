"""A registry's model version, fetched through MLflow: `RegistryVersion`, and `import_version`.

A source of the import pipeline (`service.imports.pipeline`), imported as
the hook's tenant like an upload of that tenant (origin "upload": the store
keeps the bytes). `import_version` asks MLflow for the version and resolves
its folder (`service.registry.sources`: never the payload's `source`), then
runs the pipeline. Staging, in the import's place: the folder is listed;
the model is the file the `MLmodel`'s onnx flavour names, else its one
`.onnx` file, downloaded within `--max-upload`; a sandboxed worker lists the
external data files the model names (the front end never parses model
bytes), at most `--max-external-files`, each downloaded once from beside the
model, within `--max-upload-total` in all. A location is a file name, as
onnx reads it, and two spellings of one file (`a.bin`, `./a.bin`) are one
location, fetched once (the worker reports them normalised). A location
holding a `%` is refused: MLflow's artifact proxy decodes a path until it
no longer changes before it looks it up, so `wwwwwww.bi%6E`, and any number
of other spellings, would all fetch `wwwwwww.bin` (each spelling a file of
its own to the model, each fetched and kept).
"""

from __future__ import annotations

import logging
import posixpath
from pathlib import Path
from typing import Any

from service.checks.requested import CheckRequest
from service.errors import ImportTooLarge, PathRefused, UploadTooLarge
from service.imports import pipeline
from service.imports.answers import Imported
from service.imports.parts import ImportParts
from service.imports.sources.upload import check_location
from service.imports.staging import Staged, Staging
from service.registry.folders import ArtifactFolder, ObjectMissing
from service.registry.mlflow_api import Fetched, MlflowApi, MlflowRefused, TooLarge
from service.registry.mlmodel import MAX_MLMODEL
from service.registry.sources import Refused, artifact_folder, model_file
from service.tasks.catalog_format import MODEL_FILE_KEY

log = logging.getLogger("service")


async def import_version(parts: ImportParts, api: MlflowApi, tenant: str, name: str, version: str, checks: CheckRequest) -> Imported:
    """Import version `version` of registered model `name` for `tenant`, running `checks`."""
    try:
        record = await api.model_version(name, version)
    except MlflowRefused as error:
        raise Refused(f"MLflow has no version {version} of {name!r}: {error}") from None
    folder = await artifact_folder(api, record, parts.data_root)
    return await pipeline.run(parts, RegistryVersion(folder, f"models:/{name}/{version}"), tenant, checks)


class RegistryVersion:
    sent_by_client = False

    def __init__(self, folder: ArtifactFolder, display_name: str) -> None:
        self.folder = folder
        self.display_name = display_name

    async def stage(self, staging: Staging) -> Staged:
        area, budget = staging.area, staging.budget
        listing = await _listed(self.folder)
        names = {str(entry.get("path", "")).rpartition("/")[2]: entry for entry in listing}
        mlmodel = None
        if "MLmodel" in names and not names["MLmodel"].get("is_dir"):
            scratch = area.root / "MLmodel"
            await self._download("MLmodel", scratch, MAX_MLMODEL, "the MLmodel file")
            mlmodel = scratch.read_text(errors="replace")
            scratch.unlink()
        path = model_file(mlmodel, listing)
        area.files.mkdir(parents=True, exist_ok=True)
        model = await self._download(path, area.upload_model, budget.model_room(), "the model")
        budget.take(model.size, "the model", model=True)
        digests = {MODEL_FILE_KEY: model.sha256}
        named = await staging.list_externals(area, self.display_name)
        budget.check_files(len(named))
        beside = posixpath.dirname(path)
        for location in named:
            where = posixpath.join(beside, _file_name(location))
            fetched = await self._download(where, area.upload_external / location, budget.left, f"external data {location!r}")
            budget.take(fetched.size, f"external data {location!r}")
            digests[location] = fetched.sha256
        log.info("mlflow: %s fetched through MLflow: %d files, %d bytes", self.display_name, len(digests), budget.used)
        return Staged(
            display_name=self.display_name,
            origin="upload",
            directory=str(area.files),
            model=area.upload_model.name,
            external_dir=str(area.upload_external),
            allow_hard_links=True,  # the service's own copies
            digests=digests,
            parts=set(named),
            kept_bytes=budget.used,
        )

    async def settle(self, error: BaseException | None) -> None:
        pass

    async def _download(self, path: str, target: Path, max_bytes: int, what: str) -> Fetched:
        if max_bytes <= 0:
            raise ImportTooLarge(f"{what} would pass the bytes one import may read (--max-upload-total)")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            return await self.folder.download(path, target, max_bytes)
        except TooLarge:
            raise UploadTooLarge(f"{what} has more than the {max_bytes} bytes it may have (--max-upload, --max-upload-total)",
                                 limit="max_upload_total") from None  # fmt: skip
        except (MlflowRefused, ObjectMissing) as error:
            raise Refused(f"{what} ({path[:200]!r}) is not among the version's artifacts in {self.folder.where[:200]}: {error}") from None


def _file_name(location: str) -> str:
    """An external data location as a path below the model's folder; Refused if it holds a `%` (see the module comment)."""
    if "%" in location:
        raise Refused(
            f"the external data location {location[:200]!r} holds a '%': MLflow's artifact proxy decodes a path (again and "
            "again) before it looks it up, so it would not fetch the file of that very name; rename the file"
        )
    try:
        return check_location(location)
    except PathRefused as error:
        raise Refused(f"the external data location {location[:200]!r} leaves the version's artifacts: {error}") from None


async def _listed(folder: ArtifactFolder) -> list[dict[str, Any]]:
    try:
        return await folder.listing()
    except MlflowRefused as error:
        raise Refused(f"the version's artifact folder {folder.where[:200]!r} cannot be listed: {error}") from None
