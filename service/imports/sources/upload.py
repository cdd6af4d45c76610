"""What an upload is once received, whichever way it came (multipart or resumable).

Owns `Upload` (a model and its external data parts, on disk in the work
area, each with its size and SHA-256), `StagedFile`, the display name's
rules (the model's file name, its base name only, at most `MAX_DISPLAY_NAME`
characters, `model.onnx` when none is given; a `name` given instead:
`service.imports.naming`) and `check_location` (an
external part's file name as a location: relative, no `..`, at most
`MAX_LOCATION_DEPTH` folders deep; `PathRefused` otherwise). `Upload.staged`
is what the pipeline is handed: the store keeps these bytes (origin
"upload"), and every part must be used by the model's tensors (else
`unused_parts`, the one refusal of those that are not), except `model.sig`: the
folder's OpenSSF model signature (`signature`), which the `signature` stage verifies
against the files as the client named them (`SignedFolder`) and which is removed
once the workers have ended (`Staged.transient`): the store keeps the model, not its signature.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path

from service.checks.outcome import SIGNATURE_FILE
from service.checks.signature_worker import SignedFolder
from service.errors import BadInput, PathRefused, bounded
from service.imports.naming import Naming
from service.imports.staging import Staged
from service.store.client_paths import check_relative_path
from service.store.layout import ModelFolder
from service.tasks.catalog_format import MODEL_FILE_KEY

DEFAULT_DISPLAY_NAME = "model.onnx"
MAX_DISPLAY_NAME = 200
MAX_LOCATION_DEPTH = 64


@dataclass
class StagedFile:
    location: str  # relative location (the model: its display name)
    path: Path
    size: int = 0
    sha256: str = ""


@dataclass
class Upload:
    model_path: Path  # where the model part is written
    external_dir: Path  # where external_data parts are written, under their locations
    display_name: str = DEFAULT_DISPLAY_NAME
    model: StagedFile | None = None
    externals: list[StagedFile] = field(default_factory=list)
    signature: StagedFile | None = None  # the folder's model.sig, where the client sent it (never a tensor's file)
    naming: Naming = field(default_factory=Naming)  # the form's `name` and `label` fields, where sent

    @property
    def size(self) -> int:
        """Bytes the store keeps: the model and every external part (not the signature)."""
        return sum(staged.size for staged in [self.model, *self.externals] if staged is not None)

    def staged(self, area: ModelFolder) -> Staged:
        """The upload as the pipeline takes it (its files in `area`'s places)."""
        assert self.model is not None
        digests = {MODEL_FILE_KEY: self.model.sha256} | {staged.location: staged.sha256 for staged in self.externals}
        staged = Staged(
            display_name=self.display_name,
            origin="upload",
            directory=str(area.files),
            model=area.upload_model.name,
            external_dir=str(area.upload_external),
            allow_hard_links=True,  # the service's own files (a resumable upload's are hard-linked from its folder)
            digests=digests,
            parts={staged.location for staged in self.externals},
            kept_bytes=self.size,
            model_bytes=self.size,
            model_name=self.display_name,  # the model part's file name (before the form's `name` replaces the display name)
            signed_folder=self.signed_folder(area),
            transient=[self.signature.path] if self.signature is not None else [],
        )
        staged.named(self.naming)
        return staged

    def signed_folder(self, area: ModelFolder) -> SignedFolder:
        """The folder as its signer saw it: the model under its part's file name, each external part at its location,
        and the signature, where sent; each at its place in `area`."""
        assert self.model is not None
        files = [(self.display_name, area.relative_to_files(area.upload_model))]
        files += [(staged.location, area.relative_to_files(staged.path)) for staged in self.externals]
        if self.signature is not None:
            files.append((SIGNATURE_FILE, area.relative_to_files(self.signature.path)))
        return SignedFolder(str(area.files), self.display_name, tuple(files))


def display_name_of(filename: str) -> str:
    """The name a client's file name gives a model: its base name, bounded."""
    base = posixpath.basename(filename.replace("\\", "/"))
    return bounded(base or DEFAULT_DISPLAY_NAME, MAX_DISPLAY_NAME)


def unused_parts(unused: list[str]) -> BadInput:
    """The refusal of external parts no tensor of the model uses (`unused`, sorted)."""
    names = ", ".join(repr(location) for location in unused[:10])
    return BadInput(f"{len(unused)} external_data parts are not used by any tensor: {bounded(names, 300)}")


def check_location(filename: str) -> str:
    """An external part's file name as the location it stands for (normalised); PathRefused if it cannot be one."""
    check_relative_path(filename)
    location = posixpath.normpath(filename)
    if location in (".", "") or location.count("/") >= MAX_LOCATION_DEPTH:
        raise PathRefused(f"not a usable external data location: {bounded(repr(filename), 200)}")
    return location
