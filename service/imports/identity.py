"""What the worker read becomes the model's identity: its id and the record of each file.

Owns `model_id_of`, the content-derived id, from what the worker read,
never from a second look at a path:

    id = SHA-256 of "onnx-import-id/2\\n" + origin + "\\n" + model_sha256 + "\\n"
         + for each external file, sorted by location: location + "\\0" + sha256 + "\\n"

where origin is "upload" (the store keeps the bytes: an upload, a registry
version) or "path" (a data root's files, read in place or fetched: an
upload is always stored and served from the store, never from a data-root
record with the same bytes), and the SHA-256 digests are hex, of the model
and of every external file its tensors use. Also `worker_reports` (the
worker's report of each file it read, which must be the model and the
external files its tensors use) and `in_store` (each staged file's record
where the store keeps it).
"""

from __future__ import annotations

import hashlib

from service.errors import ImportFailed
from service.imports.staging import Staged
from service.sandbox.protocol import ImportFailure, SourceReport, WorkerHeader
from service.store.layout import ModelFolder
from service.store.records import SourceFile
from service.tasks.catalog_format import MODEL_FILE_KEY


def model_id_of(origin: str, model_sha256: str, externals: list[tuple[str, str]]) -> str:
    """The content-derived id (see the module comment)."""
    digest = hashlib.sha256(f"onnx-import-id/2\n{origin}\n{model_sha256}\n".encode())
    for location, sha256 in sorted(externals):
        digest.update(location.encode() + b"\0" + sha256.encode() + b"\n")
    return digest.hexdigest()


def known_id(staged: Staged) -> str | None:
    """The id of content the store keeps, when staging knows every file's digest (an upload, a registry version)."""
    if staged.origin != "upload" or MODEL_FILE_KEY not in staged.digests:
        return None
    externals = [(location, sha256) for location, sha256 in staged.digests.items() if location != MODEL_FILE_KEY]
    return model_id_of("upload", staged.digests[MODEL_FILE_KEY], externals)


def read_id(staged: Staged, reports: dict[str, SourceReport]) -> str:
    """The id of what the worker read (digests known from staging first, else the worker's)."""
    digests = {key: staged.digests.get(key) or report.sha256 for key, report in reports.items()}
    externals = [(key, sha256) for key, sha256 in digests.items() if key != MODEL_FILE_KEY]
    return model_id_of(staged.origin, digests[MODEL_FILE_KEY], externals)


def worker_reports(header: WorkerHeader, display_name: str) -> dict[str, SourceReport]:
    """The worker's report of each file it read: the model and the external files its tensors use."""
    reports = {report.key: report for report in header.sources}
    if set(reports) != {MODEL_FILE_KEY, *header.external_files}:
        message = "the worker's report of the files it read does not match its tensors"
        raise ImportFailed(ImportFailure(kind="WorkerCrashed", message=message, input=display_name))
    return reports


def in_store(area: ModelFolder, reports: dict[str, SourceReport]) -> dict[str, SourceFile]:
    """Each file read, as the record keeps it when the store keeps the staged bytes (in `area`'s places)."""

    def record(key: str, report: SourceReport) -> SourceFile:
        path = area.upload_model if key == MODEL_FILE_KEY else area.upload_external / key
        return SourceFile(path=area.relative(path), in_store=True, size=report.size, mtime_ns=report.mtime_ns, inode=report.inode)

    return {key: record(key, report) for key, report in reports.items()}
