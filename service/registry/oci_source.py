"""One `.onnx` file of a pulled OCI artifact as a source of the import pipeline: `ArtifactFile`.

The artifact's files are pulled once (`service.registry.oci_pull`); each
model is then imported through `service.imports.pipeline` like a registry
version's file (`service.registry.version_source.RegistryFile`), as the OCI
gate's tenant with origin "upload" (the store keeps the bytes): the model is
linked (else copied) from the tree into the import's work area within
`--max-upload`; a sandboxed worker lists the external data files it names,
at most `--max-external-files`; each is matched by name beside the model in
the tree (a location confined as any external data location is) and linked in,
within `--max-upload-total`. A named file the artifact lacks refuses the
model. Its display name is `oci://HOST/REPOSITORY@DIGEST`, and `/PATH` after
it for an artifact with several models. The folder the `signature` stage
verifies (`SignedFolder`, as a path import's: the tree is a folder on this
machine, every file of it listed) is the nearest folder of the tree holding a
`model.sig`, from the model's own up to the artifact's root (`model_signing
sign` writes it at the root of the folder it signs: a layer annotated
`model.sig`, or a tar layer's member beside the model's folder), the model
named by its path below it; without one, the model's own folder, where the
stage is skipped (or fails under `--require-signature`). Its attestation (`service.imports.attesting`)
names the model `oci://HOST/REPOSITORY@DIGEST` (`resource_uri`), and its files
by their paths in the artifact (the model's path, its external files beside it),
as `onnx-import verify oci://...` finds them in the pulled artifact.
"""

from __future__ import annotations

import hashlib
import logging
import os
import posixpath
import shutil
from pathlib import Path

import anyio.to_thread

from service.checks.outcome import SIGNATURE_FILE
from service.checks.signature_worker import SignedFolder
from service.errors import PathRefused
from service.imports.sources.upload import check_location
from service.imports.staging import Staged, Staging
from service.registry.oci_pull import ArtifactTree
from service.registry.sources import Refused
from service.tasks.catalog_format import MODEL_FILE_KEY

log = logging.getLogger("service")


class ArtifactFile:
    sent_by_client = False

    def __init__(self, tree: ArtifactTree, path: str, display_name: str, resource_uri: str) -> None:
        self.tree = tree
        self.path = path  # the model's, below the tree
        self.display_name = display_name
        self.resource_uri = resource_uri  # oci://HOST/REPOSITORY@DIGEST

    async def stage(self, staging: Staging) -> Staged:
        area, budget = staging.area, staging.budget
        area.files.mkdir(parents=True, exist_ok=True)
        size = self.tree.sizes[self.path]
        budget.take(size, "the model", model=True)
        digests = {MODEL_FILE_KEY: await anyio.to_thread.run_sync(_linked, self.tree.root / self.path, area.upload_model)}
        named = await staging.list_externals(area, self.display_name)
        budget.check_files(len(named))
        beside = posixpath.dirname(self.path)
        for location in named:
            try:
                where = check_location(posixpath.join(beside, location))
            except PathRefused as error:
                raise Refused(f"the external data location {location[:200]!r} leaves the artifact: {error}") from None
            if where not in self.tree.sizes:
                raise Refused(f"the model names external data {location[:200]!r}, which the artifact does not hold ({where[:200]})")
            budget.take(self.tree.sizes[where], f"external data {location!r}")
            digests[location] = await anyio.to_thread.run_sync(_linked, self.tree.root / where, area.upload_external / location)
        log.info("oci: %s staged: %d files, %d bytes", self.display_name, len(digests), budget.used)
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
            model_name=self.path,  # as in the artifact, its external files beside it
            resource_uri=self.resource_uri,
            signed_folder=signed_folder(self.tree, self.path),
        )

    async def settle(self, error: BaseException | None) -> None:
        pass


def signed_folder(tree: ArtifactTree, path: str) -> SignedFolder:
    """The folder of the tree the `signature` stage verifies for the model at `path` (see the module comment)."""
    model_folder = folder = posixpath.dirname(path)
    while posixpath.join(folder, SIGNATURE_FILE) not in tree.sizes:
        if not folder:
            folder = model_folder  # no model.sig: the stage says so of the model's own folder
            break
        folder = posixpath.dirname(folder)
    return SignedFolder(str(tree.root / folder), posixpath.relpath(path, folder or "."))


def _linked(source: Path, target: Path) -> str:
    """`source` at `target` (a hard link, else a copy); its SHA-256."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    with open(target, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
