"""A model under a data root that is a folder on this machine, read in place: `FolderPath`.

A source of the import pipeline (`service.imports.pipeline`). The client's
path is confined to the data root (`service.store.client_paths.resolve_under_root`:
relative, no `..`, no link leading out, a regular file); nothing is copied:
the worker opens the very file the path resolved to (it checks the device
and inode) and its external data beside it, and reports each file's
identity and SHA-256, from which the id is made (origin "path") and the
record names each file by its path below the data root (`in_store` false),
so that tensors are served from it while it is the one recorded. Its
folder is the one the `signature` stage verifies (its model.sig, every file in it).
"""

from __future__ import annotations

import os

from service.checks.signature_worker import SignedFolder
from service.errors import ImportFailed
from service.imports.staging import Staged, Staging
from service.sandbox.protocol import ImportFailure, SourceReport
from service.store.client_paths import relative_below, resolve_under_root
from service.store.records import SourceFile


class FolderPath:
    sent_by_client = False

    def __init__(self, root: str, path: str, allow_hard_links: bool) -> None:
        self.root = root
        self.path = path
        self.allow_hard_links = allow_hard_links

    async def stage(self, staging: Staging) -> Staged:
        resolved = resolve_under_root(self.root, self.path)
        folder, name = os.path.split(resolved.real_path)
        return Staged(
            display_name=self.path,
            origin="path",
            directory=folder,
            model=name,
            allow_hard_links=self.allow_hard_links,
            expected_model=(resolved.device, resolved.inode),
            hash_in_worker=True,
            record_files=self._recorded,
            signed_folder=SignedFolder(folder, name),
        )

    async def settle(self, error: BaseException | None) -> None:
        pass

    def _recorded(self, reports: dict[str, SourceReport]) -> dict[str, SourceFile]:
        files: dict[str, SourceFile] = {}
        for key, report in reports.items():
            relative = relative_below(self.root, report.path)
            if relative is None:
                failure = ImportFailure(kind="WorkerCrashed", message="the worker reports a file outside the data root", input=self.path)
                raise ImportFailed(failure)
            files[key] = SourceFile(path=relative, in_store=False, size=report.size, mtime_ns=report.mtime_ns, inode=report.inode)
        return files
