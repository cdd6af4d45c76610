"""What a source hands the pipeline: its files staged in a work area, within a byte budget.

Owns `Staging` (what a source is given to stage with: the request's work
folder, the byte budget every source counts against, and a way to ask a
sandboxed worker which external files a model names, so that the front end
never parses model bytes, the answer kept as `Staging.listed` for the
pipeline: the check worker binds those files and is sized to them without a
second listing) and `Staged` (what a source holds once staged:
where the model and its external data are for the worker, the name the
client knows it by (and the name and label it gave, if any:
`service.imports.naming`), what is known of each file already (an
upload's SHA-256, a fetched object's identity), and how each file the
worker read is recorded). `Budget` is the one count of bytes and files: the model at most
`--max-upload`, everything at most `--max-upload-total`, at most
`--max-external-files` external files; past any of them `UploadTooLarge`
(`BadInput` for the files) naming the setting.

A source that fetches (a bucket, a registry) asks for each external
location once, by the location the worker reports, normalised
(`a.bin` and `./a.bin` are one file); a location is a file name, never
percent-decoded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from service.checks.signature_worker import SignedFolder
from service.errors import BadInput, UploadTooLarge
from service.imports.naming import Naming
from service.sandbox.protocol import SourceReport
from service.settings import Settings
from service.store.layout import ModelFolder
from service.store.records import SourceFile, StoredRecord
from service.tasks.catalog_format import MODEL_FILE_KEY

Origin = Literal["upload", "path", "stored"]
ListExternals = Callable[[ModelFolder, str], Awaitable[list[str]]]  # (the area whose model to read, its display name)


class Budget:
    """The bytes and files one import may stage (see the module comment)."""

    def __init__(self, settings: Settings) -> None:
        self.max_model = settings.max_upload
        self.max_total = settings.max_upload_total
        self.max_files = settings.max_external_files
        self.used = 0

    @property
    def left(self) -> int:
        return self.max_total - self.used

    def model_room(self) -> int:
        """The bytes the model may still take."""
        return min(self.max_model, self.left)

    def take(self, size: int, what: str, model: bool = False) -> None:
        """Count `size` more bytes of `what`; UploadTooLarge past a limit."""
        if model and size > self.max_model:
            raise UploadTooLarge(f"{what} is larger than the limit of {self.max_model} bytes", limit="max_upload")
        if self.used + size > self.max_total:
            raise UploadTooLarge(f"{what} would make the import larger than the limit of {self.max_total} bytes", limit="max_upload_total")
        self.used += size

    def check_files(self, count: int, what: str = "external data files") -> None:
        """At most `--max-external-files` of them; else BadInput."""
        if count > self.max_files:
            raise BadInput(f"{count} {what}, more than --max-external-files ({self.max_files})", limit="max_external_files")


@dataclass
class Staging:
    """What a source stages with."""

    area: ModelFolder  # the request's work folder
    budget: Budget
    lister: ListExternals  # a sandboxed worker's list of the external locations the area's model names (its refusal)
    listed: tuple[str, ...] | None = None  # that list, once a source has asked for it

    async def list_externals(self, area: ModelFolder, display_name: str) -> list[str]:
        """The external locations the model staged in `area` names, as a sandboxed worker reads them (kept: `listed`)."""
        locations = await self.lister(area, display_name)
        self.listed = tuple(locations)
        return locations


RecordFiles = Callable[[dict[str, SourceReport]], dict[str, SourceFile]]


@dataclass
class Staged:
    """A source's files, ready for the worker, and how they are recorded."""

    display_name: str  # the name the client knows the model by
    origin: Origin  # "upload": the store keeps the bytes; "path": a data root's files; "stored": a model in the store
    directory: str  # the model's folder (absolute)
    model: str  # the model's file name in it
    external_dir: str | None = None  # where its external data is (default: beside it)
    allow_hard_links: bool = True
    expected_model: tuple[int, int] | None = None  # (device, inode) a data-root path resolved to
    hash_in_worker: bool = False  # no digest known before the worker reads the files (a folder read in place)
    digests: dict[str, str] = field(default_factory=dict)  # file key -> SHA-256 known from staging
    parts: set[str] = field(default_factory=set)  # external parts the client sent: each must be used
    kept_bytes: int = 0  # bytes staged that the store keeps (an upload's): counted in --max-import-bytes
    model_bytes: int | None = None  # the model file and its external data, where staging knows them: the check worker's memory
    external_locations: tuple[str, ...] | None = None  # what the model names, where a worker has listed it (None: not yet)
    record_files: RecordFiles | None = None  # each file read as the record keeps it (None: in the store, as staged)
    copies: bool = False  # the staged files are copies of what the record names: removed before the commit
    model_id: str = ""  # a stored model's id ("stored")
    record: StoredRecord | None = None  # a stored model's record: the files its worker must find again
    naming: Naming = field(default_factory=Naming)  # the name and label the client gave (its name is `display_name`)
    # Where its attestation says the model is (service.imports.attesting): the model file's path in its folder, its
    # external files named beside it ("": the display name's last part), and its URI ("": the service's /models/ID).
    model_name: str = ""
    resource_uri: str = ""
    signed_folder: SignedFolder | None = None  # the folder the `signature` stage verifies (its model.sig): None, a source without one
    transient: list[Path] = field(default_factory=list)  # files staged for the workers alone (an upload's model.sig): not kept

    def named(self, naming: Naming) -> None:
        """`naming`'s name and label over what the source staged (the display name its name, where given)."""
        self.naming = naming.over(self.naming)
        if self.naming.name is not None:
            self.display_name = self.naming.name

    def model_sha256(self, reports: dict[str, SourceReport]) -> str:
        return self.digests.get(MODEL_FILE_KEY) or reports[MODEL_FILE_KEY].sha256
