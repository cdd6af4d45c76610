"""An artifact's layers pulled into a work folder as its file tree: `pull_tree` (`pulled_in_time`: the service's), `ArtifactTree`.

Each layer (`service.registry.oci_artifact.Layer`) is fetched from the
registry by its digest (`service.registry.oci_api`), checked against it,
then taken by what its bytes are: a tar archive (tar, or gzip-compressed
tar: sniffed, whatever the media type says; `oras push` calls a plain file
`...layer.v1.tar`) is unpacked at the tree's root, its members carrying their
own paths; any other layer is one file at its file path annotation.
Unpacking follows the confinement rules of external data: a member's name
is a relative location (no absolute path, no `..`: the
check of `service.imports.sources.upload.check_location`), only regular
files and folders are taken, and a link (symbolic or hard), a device or a
FIFO refuses the artifact. Files are created exclusively, never through a
link (none can exist: the tree is new and nothing makes one), so nothing is
written outside the tree; two layers naming one path refuse it too. A
zstd-compressed layer is refused (no decompressor in the service).
Python's `tarfile` reads in the front end, so what it would hold in memory
is bounded before it reads it (`BoundedMember`): a pax or GNU long-name
header past `MAX_TAR_HEADER` bytes, and a sparse member (its map of
extension blocks), refuse the artifact; and an archive has at most
`MAX_TAR_FOLDERS` folder entries beside its files (the reader keeps every
member it has read).

Limits, the import's: every byte written at most `--max-upload-total` (each
blob counted as it is fetched, each member before it is written), at most
`--max-external-files` files besides the models, and at most
`MAX_MODEL_FILES` `.onnx` files (`service.registry.sources`). The caller
bounds the time: the service's gate and scanner within `--worker-timeout`
(`pulled_in_time`, a `Refused` past it). Past a limit the artifact is
`UploadTooLarge` or `BadInput` naming the setting; a refused layer is `Refused`.
"""

from __future__ import annotations

import gzip
import os
import posixpath
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import anyio.to_thread

from service.errors import BadInput, PathRefused, UploadTooLarge
from service.imports.sources.upload import check_location
from service.registry.oci_api import OciRefused, OciRegistry, TooLarge
from service.registry.oci_artifact import Layer, is_onnx_path
from service.registry.sources import MAX_MODEL_FILES, Refused
from service.settings import Settings

MAX_TAR_HEADER = 64 << 10  # bytes of a pax extended or GNU long-name header (a long path: a few kB)
MAX_TAR_FOLDERS = 4096  # folder entries of one archive, beside its files (each kept by the reader)
GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
TAR_MAGIC_AT = 257  # "ustar" in a POSIX or GNU tar header
CHUNK = 1 << 20


@dataclass
class ArtifactTree:
    """The artifact's files below `root`, counted against the import's limits."""

    root: Path
    max_bytes: int
    max_files: int
    used: int = 0
    sizes: dict[str, int] = field(default_factory=dict)  # every file's path below root -> its size

    @property
    def models(self) -> list[str]:
        return sorted(path for path in self.sizes if is_onnx_path(path))

    def take(self, size: int, what: str) -> None:
        if self.used + size > self.max_bytes:
            raise UploadTooLarge(f"{what} would make the artifact larger than {self.max_bytes} bytes (--max-upload-total)",
                                 limit="max_upload_total")  # fmt: skip
        self.used += size

    def add(self, path: str, size: int, what: str) -> Path:
        """A new file's place in the tree (its folders made); Refused when another layer has it already."""
        try:
            location = check_location(path)
        except PathRefused as error:
            raise Refused(f"{what} {path[:200]!r} leaves the artifact: {error}") from None
        if location in self.sizes:
            raise Refused(f"{what} {location[:200]!r}: two layers of the artifact hold that path")
        models = sum(1 for name in self.sizes if is_onnx_path(name)) + is_onnx_path(location)
        others = len(self.sizes) + 1 - models
        if models > MAX_MODEL_FILES:
            raise Refused(f"the artifact holds more than {MAX_MODEL_FILES} .onnx files: at most that many are checked in one artifact")
        if others > self.max_files:
            raise BadInput(f"the artifact holds more than {self.max_files} files besides its models (--max-external-files)",
                           limit="max_external_files")  # fmt: skip
        self.sizes[location] = size
        target = self.root / location
        folder = target.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError:  # a file of the tree where a folder is meant
            raise Refused(f"{what} {location[:200]!r}: a file of the artifact has that folder's name") from None
        if os.path.realpath(folder) != os.path.join(os.path.realpath(self.root), posixpath.dirname(location)).rstrip("/"):
            raise Refused(f"{what} {location[:200]!r} would leave the artifact's folder")  # a file where a folder is meant
        return target


async def pull_tree(
    registry: OciRegistry, repository: str, layers: list[Layer], folder: Path, max_bytes: int, max_files: int
) -> ArtifactTree:
    """Every layer of the artifact into `folder` (`folder/tree` the files, `folder/blobs` each layer while taken), within
    `max_bytes` in all (--max-upload-total) and `max_files` files besides the models (--max-external-files)."""
    tree = ArtifactTree(folder / "tree", max_bytes, max_files)
    tree.root.mkdir(parents=True)
    blobs = folder / "blobs"
    blobs.mkdir()
    for number, layer in enumerate(layers):
        blob = blobs / str(number)
        try:
            size = await registry.blob(repository, layer.digest, blob, tree.max_bytes - tree.used)
        except TooLarge:
            raise UploadTooLarge(f"layer {layer.digest} would make the artifact larger than {tree.max_bytes} bytes "
                                 "(--max-upload-total)", limit="max_upload_total") from None  # fmt: skip
        except OciRefused as error:
            raise Refused(f"layer {layer.digest} could not be pulled: {error}") from None
        await anyio.to_thread.run_sync(_take_layer, tree, layer, blob, size)
    if not tree.models:
        raise Refused("the artifact's layers hold no .onnx file")
    return tree


async def pulled_in_time(registry: OciRegistry, repository: str, layers: list[Layer], folder: Path, settings: Settings) -> ArtifactTree:
    """`pull_tree` within the import's limits and `--worker-timeout` (the OCI gate's and the Harbor scanner's pull)."""
    try:
        with anyio.fail_after(settings.worker_timeout):
            return await pull_tree(registry, repository, layers, folder, settings.max_upload_total, settings.max_external_files)
    except TimeoutError:
        raise Refused(f"the artifact's layers were not pulled within {settings.worker_timeout:.0f} s (--worker-timeout)") from None


def _take_layer(tree: ArtifactTree, layer: Layer, blob: Path, size: int) -> None:
    with open(blob, "rb") as source:
        head = source.read(TAR_MAGIC_AT + 8)
    what = f"layer {layer.digest}"
    if head.startswith(ZSTD_MAGIC):
        raise Refused(f"{what} is zstd-compressed: the gate unpacks tar and gzip-compressed tar layers only")
    if head.startswith(GZIP_MAGIC) or head[TAR_MAGIC_AT : TAR_MAGIC_AT + 5] == b"ustar":
        try:
            _unpack(tree, blob, what)
        except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error) as error:
            raise Refused(f"{what} is not a readable tar archive: {error}") from None
        blob.unlink()
        return
    if not layer.path:
        raise Refused(f"{what} ({layer.media_type[:100]}) has no file path annotation and is not a tar archive")
    tree.take(size, f"{what} ({layer.path[:200]})")
    os.rename(blob, tree.add(layer.path, size, what))


class BoundedMember(tarfile.TarInfo):
    """A tar member whose header `tarfile` reads only within bounds: a pax or GNU long-name header of at most
    `MAX_TAR_HEADER` bytes (read whole into memory otherwise), and no sparse member (its map grows with the archive)."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise Refused(f"the tar member {self.name[:200]!r} is sparse: only files and folders are unpacked")
        extended = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
        if self.type in extended and self.size > MAX_TAR_HEADER:
            raise Refused(f"a tar header of {self.size} bytes: at most {MAX_TAR_HEADER} are read")
        member: tarfile.TarInfo = super()._proc_member(tarfile_)  # type: ignore[misc]
        return member


def _unpack(tree: ArtifactTree, blob: Path, what: str) -> None:
    """The archive's members into the tree, each checked before anything of it is written (see the module comment)."""
    folders = 0
    with tarfile.open(blob, mode="r|*", tarinfo=BoundedMember) as archive:
        for member in archive:
            name = member.name.rstrip("/")
            if member.isdir():
                folders += 1
                if folders > MAX_TAR_FOLDERS:
                    raise Refused(f"{what} has more than {MAX_TAR_FOLDERS} folder entries")
                if name in ("", "."):
                    continue
                try:
                    check_location(name)
                except PathRefused as error:
                    raise Refused(f"{what}: the folder {member.name[:200]!r} leaves the artifact: {error}") from None
                continue  # made when a file is put in it
            if not member.isreg():
                kind = "a symbolic link" if member.issym() else "a hard link" if member.islnk() else "a device or FIFO"
                raise Refused(f"{what}: the member {member.name[:200]!r} is {kind}: only files and folders are unpacked")
            tree.take(member.size, f"{what}: {member.name[:200]!r}")
            target = tree.add(name, member.size, f"{what}: the member")
            extracted = archive.extractfile(member)
            assert extracted is not None  # a regular file
            _write_new(target, extracted)


def _write_new(target: Path, source: IO[bytes]) -> None:
    descriptor = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        while chunk := source.read(CHUNK):
            out.write(chunk)
