"""Objects as files of a folder on this machine: the local store's bytes.

Owns `FolderBlobs` (`service.store.interface.Blobs`): the object `a/b/c` is
the file `<root>/a/b/c`. A put fsyncs the work area's file, renames it into
place (the store's folder and the work area share a file system) and fsyncs
the folders it changed, so a reader sees a file whole or not at all; a
delete unlinks the files and removes the folders left empty (never a
top-level one). The files tensors are read from stay open across requests
(`OpenFiles`, each use checked to be the file recorded).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from service.store.byte_source import ByteSource, FileSource
from service.store.files import fsync_path
from service.store.open_files import OpenFiles
from service.store.records import SourceFile

COPY_CHUNK = 1 << 20
PUT_ATTEMPTS = 3  # a delete may remove a folder left empty between a put's mkdir and its rename


def check_key(key: str) -> str:
    parts = key.split("/")
    if not key or key.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise KeyError(key)
    return key


class FolderBlobs:
    local = True

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root_text = str(root)
        self.files = OpenFiles()  # the files tensors are served from, kept open

    def open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        self.files.close()

    def check(self) -> None:
        pass  # a local folder: the readiness probe writes to it

    def put(self, key: str, source: Path) -> None:
        target = self.root / check_key(key)
        fsync_path(str(source))
        for attempt in range(PUT_ATTEMPTS):
            made = _make_folders(self.root, target.parent)
            try:
                os.rename(source, target)
                break
            except FileNotFoundError:
                if attempt == PUT_ATTEMPTS - 1 or not source.exists():
                    raise
        for folder in {target.parent, *(made_folder.parent for made_folder in made)}:
            fsync_path(str(folder))

    def reader(self, folder: str, item: SourceFile) -> ByteSource:
        return FileSource(self.files.borrow(f"{self.root_text}/{folder}", item))  # every tensor GET: no Path objects

    def local_path(self, key: str) -> Path:
        path = self.root / check_key(key)
        if not path.is_file():
            raise FileNotFoundError(key)
        return path

    def fetch(self, key: str, target: Path) -> None:
        source = self.local_path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(source, "rb") as bytes_in, open(target, "ab") as out:  # not a hard link: a worker refuses a file with two
            shutil.copyfileobj(bytes_in, out, COPY_CHUNK)

    def keys(self, folder: str) -> list[str]:
        top = f"{self.root_text}/{check_key(folder.rstrip('/'))}" if folder else self.root_text
        found = []
        for parent, _, names in os.walk(top):
            below = parent[len(self.root_text) + 1 :]
            found += [f"{below}/{name}" if below else name for name in names]
        return found

    def delete(self, keys: list[str]) -> None:
        paths = {f"{self.root_text}/{check_key(key)}" for key in keys}
        self.files.forget(paths)
        folders: set[str] = set()
        for path in paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                continue
            folders.add(os.path.dirname(path))
        for folder in sorted(folders, key=len, reverse=True):
            _remove_empty(self.root_text, folder)


def _make_folders(root: Path, folder: Path) -> list[Path]:
    """Make `folder` and the folders above it that are missing (below `root`): those it made."""
    missing: list[Path] = []
    while folder != root and not folder.is_dir():
        missing.append(folder)
        folder = folder.parent
    made = []
    for each in reversed(missing):
        try:
            each.mkdir()
            made.append(each)
        except FileExistsError:
            pass
    return made


def _remove_empty(root: str, folder: str) -> None:
    """Remove `folder` and the folders above it while empty, but never one directly below `root`."""
    while os.path.dirname(folder) != root and len(folder) > len(root):
        try:
            os.rmdir(folder)
        except OSError:  # not empty (another generation, a put meanwhile), or gone
            return
        folder = os.path.dirname(folder)
