"""A model under a data root the worker cannot read in place (a bucket), fetched: `BucketObject`.

A source of the import pipeline (`service.imports.pipeline`), through the
`DataRoot` interface alone (`fetch`), so it serves any root but a local
folder's (`service.imports.sources.folder`). Staging:

1. the path names a key below the root, confined as a folder's path is
   (`data_root.key_of`); the model object is fetched into the work area,
   within the budget's `--max-upload`;
2. a sandboxed worker lists the external data files its tensors name
   (`Staging.list_externals`: the front end never parses model bytes); each
   is fetched once from beside the model's key, within `--max-upload-total`;
3. the record names each object by key, ETag, version and SHA-256 (never
   the copies, which are removed before the commit: nothing of the data
   root is stored), and the id is that of a path import of the same bytes.
   Tensor bytes are served from the recorded objects, only while they are
   the ones recorded.
"""

from __future__ import annotations

import anyio.to_thread

from service.imports.staging import Staged, Staging
from service.sandbox.protocol import SourceReport
from service.store.data_root import DataRoot, FetchedObject, beside, key_of
from service.store.records import SourceFile
from service.tasks.catalog_format import MODEL_FILE_KEY


class BucketObject:
    sent_by_client = False

    def __init__(self, root: DataRoot, path: str) -> None:
        self.root = root
        self.path = path
        self.fetched: dict[str, FetchedObject] = {}

    async def stage(self, staging: Staging) -> Staged:
        key = key_of(self.path)
        area, budget = staging.area, staging.budget
        model = await anyio.to_thread.run_sync(self.root.fetch, key, area.upload_model, budget.model_room())
        budget.take(model.size, "the model", model=True)
        self.fetched[MODEL_FILE_KEY] = model
        named = await staging.list_externals(area, self.path)
        budget.check_files(len(named))
        for location in named:
            fetched = await anyio.to_thread.run_sync(self.root.fetch, beside(key, location), area.upload_external / location, budget.left)
            budget.take(fetched.size, f"external data {location!r}")
            self.fetched[location] = fetched
        return Staged(
            display_name=self.path,
            origin="path",
            directory=str(area.files),
            model=area.upload_model.name,
            external_dir=str(area.upload_external),
            allow_hard_links=True,  # the worker's own copies
            digests={name: fetched.sha256 for name, fetched in self.fetched.items()},
            record_files=self._recorded,
            copies=True,
            model_bytes=sum(fetched.size for fetched in self.fetched.values()),
        )

    async def settle(self, error: BaseException | None) -> None:
        pass

    def _recorded(self, reports: dict[str, SourceReport]) -> dict[str, SourceFile]:
        return {name: self.fetched[name].source() for name in reports}
