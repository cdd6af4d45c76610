"""A second layout of a folder's bytes, written for the tests: one flat folder.

`FlatBlobs` is a whole `service.store.interface.Blobs` backend in one
module, which is what adding a backend takes (the store's policy, the
content's layout and the index are the service's own): the object `a/b/c`
is the file `<root>/a%2Fb%2Fc`. tests/service/unit/test_store.py runs the
store's whole policy over it, beside the folder and the fleet backends.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from urllib.parse import quote, unquote

from service.errors import TensorSourceChanged, TensorSourceGone
from service.store.byte_source import ByteSource, FileSource
from service.store.files import fsync_path
from service.store.records import SourceFile


class FlatBlobs:
    local = True  # files beside the work area

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        return self.root / quote(key, safe="")

    def open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)

    def close(self) -> None:
        pass

    def check(self) -> None:
        pass

    def put(self, key: str, source: Path) -> None:
        fsync_path(str(source))
        os.rename(source, self._path(key))
        fsync_path(str(self.root))

    def reader(self, folder: str, item: SourceFile) -> ByteSource:
        try:
            fd = os.open(self._path(f"{folder}/{item.path}"), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise TensorSourceGone("the file holding the tensor no longer exists") from None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (info.st_size, info.st_mtime_ns, info.st_ino) != (item.size, item.mtime_ns, item.inode):
            os.close(fd)
            raise TensorSourceChanged("the file holding the tensor changed since the import")
        return FileSource(fd)

    def local_path(self, key: str) -> Path:
        path = self._path(key)
        if not path.is_file():
            raise FileNotFoundError(key)
        return path

    def fetch(self, key: str, target: Path) -> None:
        source = self.local_path(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(source, "rb") as bytes_in, open(target, "ab") as out:
            shutil.copyfileobj(bytes_in, out)

    def keys(self, folder: str) -> list[str]:
        return [key for key in map(unquote, os.listdir(self.root)) if key.startswith(folder)]

    def delete(self, keys: list[str]) -> None:
        for key in keys:
            self._path(key).unlink(missing_ok=True)
