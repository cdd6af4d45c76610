"""Finished resumable uploads, imported: `ResumableUploadsSource` (`POST /models` with `{"upload": id, "external_data": {location: id}}`).

A source of the import pipeline (`service.imports.pipeline`). Every upload
named must be the tenant's (else NotFound) and complete (else
`UploadIncomplete`, naming it and its offset), and the rules of a multipart
upload hold: the model at most `--max-upload`, the sum at most
`--max-upload-total` (`UploadTooLarge`), at most `--max-external-files`
locations, each checked as a part's file name is
(`service.imports.sources.upload.check_location`), no location the folder
of another; the display name is the model upload's `name` metadata, else
its `filename` (its base name), and its `label` metadata the model's label
(`service.imports.sources.upload_metadata`; the import request's own `name`
and `label` win over both). The uploads' bytes are hard-linked into the work area and
imported as a multipart upload is: the same limits, tenancy and answers (an
`external_data` entry `model.sig` is the folder's signature, as a multipart part of that name).

`settle`: the uploads are removed once the import answered or refused their
content (a bad model, an unused external file, too many bytes), and kept
otherwise (the service overloaded or full, a client gone, a crash), so the
client can post the import again.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio.to_thread

from service.checks.outcome import SIGNATURE_FILE
from service.errors import BadInput, DomainError, ImportFailed, ImportTooLarge, PathRefused, UploadIncomplete, UploadTooLarge, bounded
from service.imports.sources.upload import StagedFile, Upload, check_location, display_name_of
from service.imports.sources.upload_metadata import metadata_pairs, naming_of_metadata
from service.imports.staging import Staged, Staging
from service.store.uploads import ResumableUploads, UploadState

NOT_THE_CONTENTS_FAULT = frozenset({"Io", "WorkerCrashed"})  # import errors that say nothing of what was uploaded


def refuses_the_content(error: BaseException) -> bool:
    """The import refused what was uploaded (so the uploads are of no more use)."""
    if isinstance(error, ImportFailed):
        return error.failure.kind not in NOT_THE_CONTENTS_FAULT
    return isinstance(error, BadInput | PathRefused | UploadTooLarge | ImportTooLarge)


class ResumableUploadsSource:
    sent_by_client = True  # its bytes came with earlier requests of the client: linked before the queue

    def __init__(self, uploads: ResumableUploads, tenant: str, model_upload: str, external_data: dict[str, str]) -> None:
        self.uploads = uploads
        self.tenant = tenant
        self.model_upload = model_upload
        self.external_data = external_data
        self.linked: set[str] = set()  # the uploads the import ran on

    async def stage(self, staging: Staging) -> Staged:
        budget = staging.budget
        budget.check_files(len(self.external_data), "external_data entries")
        locations = _locations(self.external_data)
        states = await self._finished({self.model_upload, *locations.values()})
        model = states[self.model_upload]
        budget.take(model.length, "the model upload", model=True)
        budget.take(sum(states[upload_id].length for upload_id in locations.values()), "the external data uploads")
        area = staging.area
        upload = Upload(area.upload_model, area.upload_external, display_name_of(model.filename))
        upload.naming = naming_of_metadata(metadata_pairs(model.metadata))
        upload.model = await self._linked(self.model_upload, area.upload_model, upload.display_name)
        for location, upload_id in sorted(locations.items()):
            staged = await self._linked(upload_id, area.upload_external / location, location)
            if location == SIGNATURE_FILE:  # the folder's signature, as a multipart upload's `model.sig` part
                upload.signature = staged
            else:
                upload.externals.append(staged)
        return upload.staged(area)

    async def settle(self, error: BaseException | None) -> None:
        if error is None or refuses_the_content(error):
            for upload_id in self.linked:
                with contextlib.suppress(DomainError, OSError):
                    await anyio.to_thread.run_sync(self.uploads.remove, self.tenant, upload_id)

    async def _finished(self, upload_ids: set[str]) -> dict[str, UploadState]:
        found: dict[str, UploadState] = {}
        for upload_id in sorted(upload_ids):
            state = await anyio.to_thread.run_sync(self.uploads.find, self.tenant, upload_id)
            if not state.complete:
                raise UploadIncomplete(
                    f"upload {upload_id} holds {state.offset} of its {state.length} bytes: PATCH the rest first", upload_id, state.offset
                )
            found[upload_id] = state
        return found

    async def _linked(self, upload_id: str, target: Path, location: str) -> StagedFile:
        def link() -> StagedFile:
            target.parent.mkdir(parents=True, exist_ok=True)
            size, sha256 = self.uploads.link_into(self.tenant, upload_id, target)
            return StagedFile(location, target, size, sha256)

        staged = await anyio.to_thread.run_sync(link)
        self.linked.add(upload_id)
        return staged


def _locations(external_data: dict[str, str]) -> dict[str, str]:
    """Each location, checked and normalized as a multipart part's file name -> its upload id."""
    locations: dict[str, str] = {}
    for name, upload_id in external_data.items():
        location = check_location(name)
        if location in locations:
            raise BadInput(f"two external_data entries for {bounded(repr(location), 200)}")
        locations[location] = upload_id
    for location in locations:  # a location that is another's folder could not be placed
        parts = location.split("/")
        folder = next(("/".join(parts[:end]) for end in range(1, len(parts)) if "/".join(parts[:end]) in locations), None)
        if folder is not None:
            raise BadInput(f"the external_data location {bounded(repr(folder), 200)} is also a folder of another")
    return locations
