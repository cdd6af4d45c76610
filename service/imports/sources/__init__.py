"""Where an import's files come from: one module per source, each a small object.

Owns the `Source` protocol the pipeline (`service.imports.pipeline`) runs:
`sent_by_client` (its bytes come with the client's requests: staged under a
receiving place, before the import queue; a source that fetches or reads
in place stages in its queue place), `stage(staging)` (its files into the
work area within the byte budget, and what they are: a
`service.imports.staging.Staged`) and `settle(error)` (once the import has
answered, or failed with `error`: what the source keeps or lets go).
Sources: `multipart` (an upload's body), `resumable` (finished resumable
uploads), `folder` (a data-root folder, read in place), `bucket` (a data
root in a bucket, fetched), `stored` (a model the store holds: a recheck,
the graph render); the MLflow registry's versions are
`service.registry.version_source`.

May import: `service.imports.staging`, `service.imports.parts`,
`service.imports.naming` (the name and label a client gives), `service.store`,
`service.sandbox`'s protocol, `service.tasks` (the catalogue's format),
`service.errors`, `service.checks` (the folder the `signature` stage verifies,
and its file's name). Never `service.api`.
"""

from __future__ import annotations

from typing import Protocol

from service.imports.sources.bucket import BucketObject
from service.imports.sources.folder import FolderPath
from service.imports.staging import Staged, Staging
from service.store.data_root import DataRoot


class Source(Protocol):
    @property
    def sent_by_client(self) -> bool: ...

    async def stage(self, staging: Staging) -> Staged: ...

    async def settle(self, error: BaseException | None) -> None: ...


def under_data_root(root: DataRoot, path: str, allow_hard_links: bool) -> Source:
    """The source of a client's `path` under the data root: a folder on this
    machine is read in place; any other root's objects are fetched, through the interface alone."""
    if root.local_folder is not None:
        return FolderPath(root.local_folder, path, allow_hard_links)
    return BucketObject(root, path)
