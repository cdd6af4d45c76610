"""A version's folder as its signer signed it, for the `signature` stage: `signed_version_folder`.

The MLflow gate fetches a version's model and its external data (`RegistryFile`,
`service.registry.version_source`). Where the `signature` stage is asked and the
version's folder holds a `model.sig` (an OpenSSF model signature of the folder,
as `model_signing sign` writes it beside the MLmodel), every other file of the
folder is fetched too, through MLflow only (its listing walked folder by
folder, git's own paths left out as model-signing leaves them out; at most
`--max-external-files` files, within `--max-upload-total`, each path confined
as the version's other paths are), so that the stage can tell a changed,
missing or extra file. The model and its external data are named by their
paths below the folder, each at the place it was fetched to; the rest,
`model.sig` with it, is fetched to `signed/` in the work area and removed once
the workers have ended (`Staged.transient`): the store keeps the model's files
only. A folder too large to fetch whole is a finding of the stage, never a
refusal of the version. Without a `model.sig` nothing more is fetched (the stage
is skipped, or fails under `--require-signature`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from pathlib import Path

from service.checks.outcome import GIT_PATHS, MAX_SIGNATURE_BYTES, SIGNATURE_FILE
from service.checks.signature_worker import SignedFolder
from service.imports.sources.upload import MAX_LOCATION_DEPTH
from service.imports.staging import Staging
from service.registry.folders import ArtifactFolder, ObjectMissing
from service.registry.mlflow_api import MlflowRefused, TooLarge
from service.registry.sources import Refused, confined, folder_below

SIGNED_FILES = "signed"  # the work area's folder (below `files`) of the files fetched for the signature alone


async def signed_version_folder(
    folder: ArtifactFolder, staging: Staging, model: str, locations: Iterable[str]
) -> tuple[SignedFolder, list[Path]]:
    """The version's folder as the signature stage reads it (the model at `model` below it, its external data at
    `locations` beside it, both fetched already into `staging`'s area), and the files fetched for it alone, to be removed."""
    area, budget = staging.area, staging.budget
    beside = posixpath.dirname(model)
    fetched = {model: area.relative_to_files(area.upload_model)}
    fetched |= {posixpath.normpath(posixpath.join(beside, location)): f"external/{location}" for location in locations}
    listed, refused = await _files(folder, budget.max_files + 2)
    if SIGNATURE_FILE not in listed:
        return SignedFolder(str(area.files), model, tuple(fetched.items()), tuple(refused)), []
    files, transient = dict(fetched), []
    for path, size in listed.items():
        if path in fetched:
            continue
        what = f"the signed file {path[:200]!r}"
        if size > budget.left or (path == SIGNATURE_FILE and size > MAX_SIGNATURE_BYTES):
            refused.append((path, f"is not fetched: {size} bytes, past --max-upload-total (or, for {SIGNATURE_FILE}, 1 MiB)"))
            continue
        target = area.files / SIGNED_FILES / path
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            got = await folder.download(path, target, MAX_SIGNATURE_BYTES if path == SIGNATURE_FILE else budget.left)
        except (TooLarge, MlflowRefused, ObjectMissing) as error:  # named by the listing, not given: the stage says so
            refused.append((path, f"cannot be fetched through MLflow: {type(error).__name__}: {str(error)[:200]}"))
            target.unlink(missing_ok=True)
            continue
        budget.take(got.size, what)
        files[path] = area.relative_to_files(target)
        transient.append(target)
    return SignedFolder(str(area.files), model, tuple(sorted(files.items())), tuple(refused)), transient


async def _files(folder: ArtifactFolder, max_files: int) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Every file below the version's folder (its path, its size as listed), git's paths left out; what could not be listed."""
    files: dict[str, int] = {}
    refused: list[tuple[str, str]] = []
    pending = [""]
    while pending:
        prefix = pending.pop()
        try:
            entries = await (folder_below(folder, prefix) if prefix else folder).listing()
        except MlflowRefused as error:  # MLflow refused a listing: the folder cannot be compared whole
            refused.append((prefix or ".", f"cannot be listed through MLflow: {type(error).__name__}: {str(error)[:200]}"))
            continue
        for entry in entries:
            name = str(entry.get("path", "")).rpartition("/")[2]
            path = f"{prefix}/{name}" if prefix else name
            try:
                confined(path, "a file of the version's folder")
            except Refused as error:
                refused.append((path[:200], f"is not fetched: {error}"))
                continue
            if not prefix and name in GIT_PATHS:
                continue
            if entry.get("is_dir"):
                if path.count("/") < MAX_LOCATION_DEPTH:
                    pending.append(path)
                else:
                    refused.append((path[:200], f"is more than {MAX_LOCATION_DEPTH} folders deep"))
                continue
            size = entry.get("file_size")
            files[path] = size if isinstance(size, int) and size >= 0 else 0
            if len(files) > max_files:
                return {}, [(".", f"holds more than {max_files} files (--max-external-files, with the model and its signature)")]
    return files, refused
