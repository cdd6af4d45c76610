"""Importing finished resumable uploads: `POST /models` with `{"upload": id, "external_data": {location: id}}`.

Owns `import_uploaded`. Every upload named must be the tenant's (else 404)
and complete (else 409 `upload-incomplete`, naming it and its offset), and
the rules of a multipart upload hold: the model at most `--max-upload`, the
sum at most `--max-upload-total` (413 with `limit`), at most
`--max-external-files` locations, each checked as a part's file name is
(`service.http.uploads`), the display name the model upload's `filename`
metadata (its base name). The uploads' bytes are hard-linked into the
import's work folder, and the import is the multipart one
(`service.imports.flow.import_upload`): the same pipeline, limits, tenancy
and answers. The uploads are removed once the import answered (200, 201) or
refused their content (`REFUSED_CONTENT`: a bad model, an unused external
file, too many bytes), and kept otherwise (503, 507, 500, a client gone), so
the client can post the import again.
"""

from __future__ import annotations

import contextlib
import posixpath
from pathlib import Path

import anyio.to_thread

from service.errors import ServiceError, UploadIncomplete, bounded
from service.http.problems import ProblemError, known_problem
from service.http.schemas import ImportRequest
from service.http.uploads import MAX_DISPLAY_NAME, check_location
from service.imports.checks import CheckRequest
from service.imports.flow import Imported, ImportHooks, import_upload
from service.imports.inputs import DEFAULT_DISPLAY_NAME, StagedFile, Upload
from service.imports.parts import ImportParts
from service.store.uploads import ResumableUploads, UploadState

REFUSED_CONTENT = frozenset({400, 413, 422})  # the import's own refusals of what was uploaded: the uploads go


def _locations(external_data: dict[str, str], max_files: int) -> dict[str, str]:
    """Each location, checked and normalized as a multipart part's file name -> its upload id."""
    if len(external_data) > max_files:
        raise ProblemError("bad-request", f"{len(external_data)} external_data entries, more than --max-external-files ({max_files})")
    locations: dict[str, str] = {}
    for name, upload_id in external_data.items():
        location = check_location(name)
        if location in locations:
            raise ProblemError("bad-request", f"two external_data entries for {bounded(repr(location), 200)}")
        locations[location] = upload_id
    for location in locations:  # a location that is another's folder could not be placed
        parts = location.split("/")
        folder = next(("/".join(parts[:end]) for end in range(1, len(parts)) if "/".join(parts[:end]) in locations), None)
        if folder is not None:
            raise ProblemError("bad-request", f"the external_data location {bounded(repr(folder), 200)} is also a folder of another")
    return locations


async def _finished(uploads: ResumableUploads, tenant: str, upload_ids: set[str]) -> dict[str, UploadState]:
    found: dict[str, UploadState] = {}
    for upload_id in sorted(upload_ids):
        state = await anyio.to_thread.run_sync(uploads.find, tenant, upload_id)
        if not state.complete:
            raise UploadIncomplete(
                f"upload {upload_id} holds {state.offset} of its {state.length} bytes: PATCH the rest first", upload_id, state.offset
            )
        found[upload_id] = state
    return found


async def import_uploaded(
    parts: ImportParts,
    uploads: ResumableUploads,
    tenant: str,
    wanted: ImportRequest,
    hooks: ImportHooks,
    checks: CheckRequest | None = None,
) -> Imported:
    """Import the finished uploads `wanted` names (see the module comment)."""
    settings = parts.settings
    assert wanted.upload is not None
    model_upload = wanted.upload
    locations = _locations(wanted.external_data or {}, settings.max_external_files)
    states = await _finished(uploads, tenant, {model_upload, *locations.values()})
    model = states[model_upload]
    if model.length > settings.max_upload:
        raise ProblemError(
            "payload-too-large", f"the model upload is larger than the limit of {settings.max_upload} bytes", limit="max_upload"
        )
    total = model.length + sum(states[upload_id].length for upload_id in locations.values())
    if total > settings.max_upload_total:
        raise ProblemError(
            "payload-too-large",
            f"the uploads hold {total} bytes, more than the limit of {settings.max_upload_total}",
            limit="max_upload_total",
        )
    base = posixpath.basename(model.filename.replace("\\", "/"))
    display_name = bounded(base or DEFAULT_DISPLAY_NAME, MAX_DISPLAY_NAME)

    def place(upload_id: str, target: Path, location: str) -> StagedFile:
        target.parent.mkdir(parents=True, exist_ok=True)
        size, sha256 = uploads.link_into(tenant, upload_id, target)
        return StagedFile(location, target, size, sha256)

    async def receive(model_path: Path, external_dir: Path) -> Upload:
        upload = Upload(model_path, external_dir, display_name)
        upload.model = await anyio.to_thread.run_sync(place, model_upload, model_path, display_name)
        for location, upload_id in sorted(locations.items()):
            upload.externals.append(await anyio.to_thread.run_sync(place, upload_id, external_dir / location, location))
        return upload

    try:
        imported = await import_upload(parts, tenant, receive, hooks, checks)
    except (ProblemError, ServiceError, OSError) as error:
        problem = error if isinstance(error, ProblemError) else known_problem(error)
        if problem is not None and problem.problem.status in REFUSED_CONTENT:
            await _remove(uploads, tenant, set(states))
        raise
    await _remove(uploads, tenant, set(states))
    return imported


async def _remove(uploads: ResumableUploads, tenant: str, upload_ids: set[str]) -> None:
    for upload_id in upload_ids:
        with contextlib.suppress(ServiceError, OSError):
            await anyio.to_thread.run_sync(uploads.remove, tenant, upload_id)
