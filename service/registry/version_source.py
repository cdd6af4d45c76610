"""A registry's model version, fetched through MLflow: `version_files`, `RegistryFile`, and `import_file`.

`version_files` asks MLflow for the version and resolves its folder
(`service.registry.sources`: never the payload's `source`), lists the
folder once, reads its `MLmodel` (within `MAX_MLMODEL`) and chooses the
models: the file the onnx flavour names, else every `.onnx` file
(`model_files`); and the version's bindings (`service.registry.bindings`:
its tag, `--mlflow-dims`, its signature). Each model is then a source of the
import pipeline of its own (`service.imports.pipeline`), `RegistryFile`,
imported as the hook's tenant like an upload of that tenant (origin
"upload": the store keeps the bytes), its display name
`models:/NAME/VERSION` (for several files, `models:/NAME/VERSION/FILE`).
Staging, in the import's place: the model is downloaded within
`--max-upload`; a sandboxed worker lists the external data files that model
names (the front end never parses model bytes), at most
`--max-external-files`, each downloaded once from beside the model, within
`--max-upload-total` in all: each file's external data is matched by its
own references. A location is a file name, as onnx reads it, and two
spellings of one file (`a.bin`, `./a.bin`) are one location, fetched once
(the worker reports them normalised). A location holding a `%` is refused:
MLflow's artifact proxy decodes a path until it no longer changes before it
looks it up, so `wwwwwww.bi%6E`, and any number of other spellings, would
all fetch `wwwwwww.bin` (each spelling a file of its own to the model, each
fetched and kept). Where the `signature` stage is asked, the version's folder is
fetched as its signer signed it (`service.registry.signed_version`).
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from service.checks.requested import CheckRequest
from service.errors import ImportTooLarge, PathRefused, UploadTooLarge
from service.imports import pipeline
from service.imports.answers import Imported
from service.imports.parts import ImportParts
from service.imports.sources.upload import check_location
from service.imports.staging import Staged, Staging
from service.registry.bindings import DIMS_TAG, Bindings, gate_bindings
from service.registry.folders import ArtifactFolder, ObjectMissing
from service.registry.mlflow_api import Fetched, MlflowApi, MlflowRefused, TooLarge, version_tag
from service.registry.mlmodel import MAX_MLMODEL, MlmodelError, signature_inputs
from service.registry.signed_version import signed_version_folder
from service.registry.sources import Refused, artifact_folder, model_files
from service.tasks.catalog_format import MODEL_FILE_KEY

log = logging.getLogger("service")


@dataclass(frozen=True, slots=True)
class VersionFiles:
    """A version's folder, its models' paths below it (in name order) and its bindings."""

    name: str
    version: str
    folder: ArtifactFolder
    paths: list[str]
    soft_dims: Bindings = ()

    def display_name(self, path: str) -> str:
        """`models:/NAME/VERSION`, and `/FILE` after it when the version has several files."""
        base = f"models:/{self.name}/{self.version}"
        return f"{base}/{path}" if len(self.paths) > 1 else base


async def version_files(parts: ImportParts, api: MlflowApi, name: str, version: str) -> VersionFiles:
    """Version `version` of registered model `name`: where its models are, and its bindings; Refused with the reason."""
    try:
        record = await api.model_version(name, version)
    except MlflowRefused as error:
        raise Refused(f"MLflow has no version {version} of {name!r}: {error}") from None
    folder = await artifact_folder(api, record, parts.data_root)
    listing = await _listed(folder)
    mlmodel = None
    if any(str(entry.get("path", "")).rpartition("/")[2] == "MLmodel" and not entry.get("is_dir") for entry in listing):
        with parts.store.work_folder() as area:
            scratch = area.root / "MLmodel"
            await _fetch(folder, "MLmodel", scratch, MAX_MLMODEL, "the MLmodel file")
            mlmodel = scratch.read_text(errors="replace")
    paths = model_files(mlmodel, listing)
    inputs: list[Any] = []
    if mlmodel is not None:
        try:
            inputs = signature_inputs(mlmodel)
        except MlmodelError as error:
            log.warning("mlflow: %s version %s: its signature gives no bindings: %s", name, version, error)
    soft_dims = gate_bindings(parts.settings.mlflow_dims, version_tag(record, DIMS_TAG), inputs)
    return VersionFiles(name, version, folder, paths, soft_dims)


async def import_file(parts: ImportParts, files: VersionFiles, path: str, tenant: str, checks: CheckRequest) -> Imported:
    """Import the model at `path` of the version for `tenant`, running `checks` with the version's bindings."""
    source = RegistryFile(files.folder, path, files.display_name(path), signed="signature" in checks.stages)
    return await pipeline.run(parts, source, tenant, dataclasses.replace(checks, soft_dims=files.soft_dims))


class RegistryFile:
    sent_by_client = False

    def __init__(self, folder: ArtifactFolder, path: str, display_name: str, signed: bool = False) -> None:
        self.folder = folder
        self.path = path  # the model's, below the folder
        self.display_name = display_name
        self.signed = signed  # the `signature` stage is asked: the folder's model.sig and files are fetched too

    async def stage(self, staging: Staging) -> Staged:
        area, budget = staging.area, staging.budget
        area.files.mkdir(parents=True, exist_ok=True)
        model = await _fetch(self.folder, self.path, area.upload_model, budget.model_room(), "the model")
        budget.take(model.size, "the model", model=True)
        digests = {MODEL_FILE_KEY: model.sha256}
        named = await staging.list_externals(area, self.display_name)
        budget.check_files(len(named))
        beside = posixpath.dirname(self.path)
        for location in named:
            where = posixpath.join(beside, _file_name(location))
            fetched = await _fetch(self.folder, where, area.upload_external / location, budget.left, f"external data {location!r}")
            budget.take(fetched.size, f"external data {location!r}")
            digests[location] = fetched.sha256
        kept = budget.used
        signed_folder, transient = await signed_version_folder(self.folder, staging, self.path, named) if self.signed else (None, [])
        log.info("mlflow: %s fetched through MLflow: %d files, %d bytes", self.display_name, len(digests) + len(transient), budget.used)
        return Staged(
            display_name=self.display_name,
            origin="upload",
            directory=str(area.files),
            model=area.upload_model.name,
            external_dir=str(area.upload_external),
            allow_hard_links=True,  # the service's own copies
            digests=digests,
            parts=set(named),
            kept_bytes=kept,
            model_name=self.path,  # as in the version's folder, its external files beside it
            resource_uri=self.display_name,  # models:/NAME/VERSION
            signed_folder=signed_folder,
            transient=transient,
        )

    async def settle(self, error: BaseException | None) -> None:
        pass


async def _fetch(folder: ArtifactFolder, path: str, target: Path, max_bytes: int, what: str) -> Fetched:
    if max_bytes <= 0:
        raise ImportTooLarge(f"{what} would pass the bytes one import may read (--max-upload-total)")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        return await folder.download(path, target, max_bytes)
    except TooLarge:
        raise UploadTooLarge(f"{what} has more than the {max_bytes} bytes it may have (--max-upload, --max-upload-total)",
                             limit="max_upload_total") from None  # fmt: skip
    except (MlflowRefused, ObjectMissing) as error:
        raise Refused(f"{what} ({path[:200]!r}) is not among the version's artifacts in {folder.where[:200]}: {error}") from None


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
