"""A resumable upload that holds a model, checked at the PATCH that finishes it: `check_model_upload`.

Owns the early answer of a resumable import (docs/http-api.md, "Refused
early"). In tus each file is an upload of its own, and the client sends the
model's first (`service.client.resumable`): an upload created with the
metadata `part` `model` (`service.imports.sources.upload_metadata.holds_model`)
is that first part, and the PATCH whose bytes finish it is the moment its
model is read whole. Its bytes are then linked into a work folder and a
sandboxed worker reads them alone (the worker task "externals", in a worker
slot taken in its turn, fair between tenants, outside the import queue:
`pipeline.listed_outside_the_queue`), for at most `CHECK_SECONDS`. A refusal
of the content (malformed, a tensor too large, an external location outside
the rules, too many external files: an `ImportFailed` with the importer's
kind, offset and field path) is that PATCH's answer, and the upload is
removed, as an import refusing it would: the client need send none of the
external data. Anything else (no verdict in time, a worker that crashed
or met a resource limit)
leaves the upload as it is, for its import to decide. An upload that does
not say it holds a model is never read as one.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path

import anyio
import anyio.to_thread

from service.errors import DomainError, ImportFailed
from service.imports import pipeline
from service.imports.parts import ImportParts
from service.imports.sources.model_part_check import refused_by_its_bytes
from service.imports.sources.upload import display_name_of
from service.imports.sources.upload_metadata import holds_model, metadata_pairs, naming_of_metadata
from service.store.uploads import ResumableUploads

log = logging.getLogger("service")
CHECK_SECONDS = 10.0  # the longest a finishing PATCH waits for the check's verdict (a worker's turn, then the read)


async def check_model_upload(parts: ImportParts, uploads: ResumableUploads, tenant: str, upload_id: str) -> None:
    """Check the finished upload `upload_id` if it holds a model (see the module comment); its refusal raised."""
    state = await anyio.to_thread.run_sync(uploads.find, tenant, upload_id)
    pairs = metadata_pairs(state.metadata)
    if not state.complete or not holds_model(pairs):
        return
    display_name = naming_of_metadata(pairs).name or display_name_of(state.filename)
    try:
        with anyio.move_on_after(CHECK_SECONDS), parts.store.work_folder() as area:
            await anyio.to_thread.run_sync(_linked, uploads, tenant, upload_id, area.upload_model)
            await pipeline.listed_outside_the_queue(parts, tenant, area, display_name)
    except ImportFailed as error:
        if not refused_by_its_bytes(error):
            log.info("the check of model upload %s ended without a verdict (%s); its import decides", upload_id, error.failure.kind)
            return
        with contextlib.suppress(DomainError, OSError):  # else the sweep removes it once it expires
            await anyio.to_thread.run_sync(uploads.remove, tenant, upload_id)
        raise
    except (DomainError, OSError) as error:
        log.info("the check of model upload %s ended without a verdict (%s); its import decides", upload_id, type(error).__name__)


def _linked(uploads: ResumableUploads, tenant: str, upload_id: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    uploads.link_into(tenant, upload_id, target)
