"""A data root that is a folder on this machine (`--data-root /models`).

Owns `FolderRoot`, the `DataRoot` of a folder: its path with links resolved
once at start, and the files tensors are served from kept open
(`service.store.open_files.OpenFiles`, each use checked to be the file read
at import). Every path below it is walked one component at a time with no
link followed (`service.store.client_paths.open_under`), so a link planted in the folder
never leads out of it. Imports read its models in place (`local_folder`:
`service.imports.sources.folder`); `fetch` and `list` serve what reads a
root's files by key (MLflow artifacts).
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from service.errors import ImportTooLarge, ModelSourceChanged, NotFound, PathForbidden, TensorSourceChanged, TensorSourceGone, bounded
from service.store.byte_source import ByteSource, FileSource
from service.store.client_paths import PathChanged, open_checked, open_under
from service.store.data_root import Entry, FetchedObject, key_of
from service.store.open_files import OpenFiles
from service.store.records import SourceFile

CHUNK_BYTES = 1 << 20


class FolderRoot:
    local_reads = True

    def __init__(self, folder: str) -> None:
        self.url = os.path.realpath(folder)  # links resolved once: the paths recorded are below this
        self.files = OpenFiles()

    @property
    def local_folder(self) -> str:
        """The folder, read in place by the worker."""
        return self.url

    def open(self, item: SourceFile) -> ByteSource:
        return FileSource(self.files.borrow(self.url, item))

    def fetch(self, key: str, target: Path, max_bytes: int, expected: SourceFile | None = None) -> FetchedObject:
        key = key_of(key)
        try:
            fd = open_checked(self.url, expected) if expected is not None else open_under(self.url, key)
        except (FileNotFoundError, TensorSourceGone):
            raise NotFound(f"no such file under the data root: {bounded(repr(key), 200)}") from None
        except TensorSourceChanged:
            raise ModelSourceChanged(f"the file {bounded(repr(key), 200)} changed since the import; import it again") from None
        except (PathChanged, OSError):  # a link on the way (never followed), a folder where a file was
            raise PathForbidden(f"{bounded(repr(key), 200)} is not a file reached without links below the data root") from None
        with open(fd, "rb") as source:
            info = os.fstat(source.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise NotFound(f"not a regular file under the data root: {bounded(repr(key), 200)}")
            if info.st_size > max_bytes:
                raise ImportTooLarge(f"the file {bounded(repr(key), 200)} has {info.st_size} bytes, more than the {max_bytes} left")
            digest, size = hashlib.sha256(), 0
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as out:
                while chunk := source.read(CHUNK_BYTES):
                    size += len(chunk)
                    if size > max_bytes:
                        raise ImportTooLarge(f"the file {bounded(repr(key), 200)} grew past the {max_bytes} bytes left")
                    digest.update(chunk)
                    out.write(chunk)
        return FetchedObject(key, "", "", size, digest.hexdigest())

    def list(self, prefix: str) -> list[Entry]:
        directory = self._folder(tuple(key_of(prefix).split("/")) if prefix.strip("/") else ())
        if directory < 0:
            return []
        try:
            entries = []
            with os.scandir(directory) as items:
                for item in items:
                    info = item.stat(follow_symlinks=False)
                    if stat.S_ISDIR(info.st_mode):
                        entries.append(Entry(item.name, True, 0))
                    elif stat.S_ISREG(info.st_mode):  # a link is no entry: it is never followed
                        entries.append(Entry(item.name, False, info.st_size))
            return sorted(entries, key=lambda entry: entry.name)
        finally:
            os.close(directory)

    def _folder(self, parts: tuple[str, ...]) -> int:
        """A descriptor of the folder `parts` names below the root, walked with no link followed; -1 if there is none."""
        directory = os.open(self.url, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        for part in parts:
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=directory)
            except OSError:  # missing, a link, not a folder
                inner = -1
            os.close(directory)
            if inner < 0:
                return -1
            directory = inner
        return directory

    def close(self) -> None:
        self.files.close()
