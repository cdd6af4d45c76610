"""Local copies of stored objects that must be files: catalogues, graphs, summaries.

Owns `LocalCache`: a folder of immutable files named after their key,
filled on first use (downloaded to a temporary name, then renamed: a reader
never sees half a file), marked used on each use (mtime), and kept
within `--cache-max-bytes`, least recently used out first. Several
processes may share the folder: a file is only ever renamed in whole, and
one removed while open stays readable to whoever has it open (SQLite
connections too) until closed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger("service.store")
LEFTOVER_SECONDS = 3600.0  # a part this old is a dead fill's, whoever's pid it names now


class LocalCache:
    def __init__(self, folder: Path, max_bytes: int) -> None:
        self.folder = folder
        self.max_bytes = max_bytes
        self.lock = threading.Lock()
        self.total = 0  # bytes of the files this process knows of (recounted when it trims)

    def open(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        for leftover in self.folder.glob("*.part-*"):
            if _cut_short(leftover):
                leftover.unlink(missing_ok=True)
        self.trim()

    def get(self, name: str, fill: Callable[[Path], None]) -> Path:
        """The cached file `name`, made by `fill(temporary_path)` on first use
        (which raises FileNotFoundError when the object is gone)."""
        path = self.folder / name
        try:
            os.utime(path)
            return path
        except FileNotFoundError:
            pass
        part = self.folder / f"{name}.part-{os.getpid()}-{threading.get_ident()}"
        try:
            fill(part)
            size = part.stat().st_size
            os.rename(part, path)
        finally:
            part.unlink(missing_ok=True)
        with self.lock:
            self.total += size
            over = self.total > self.max_bytes
        if over:
            self.trim(keep=path)
        return path

    def drop(self, name: str) -> None:
        """Remove the cached file `name` (a deleted object's), if there is one."""
        (self.folder / name).unlink(missing_ok=True)

    def trim(self, keep: Path | None = None) -> None:
        """Remove least recently used files until the folder is within its bound."""
        entries = []
        for entry in os.scandir(self.folder):
            if ".part-" in entry.name:  # being filled
                continue
            with contextlib.suppress(FileNotFoundError):
                info = entry.stat()
                entries.append((info.st_mtime_ns, entry.path, info.st_size))
        total = sum(size for _, _, size in entries)
        for _, path, size in sorted(entries):
            if total <= self.max_bytes:
                break
            if keep is not None and path == str(keep):
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                total -= size
                log.debug("dropped %s from the local cache", os.path.basename(path))
        with self.lock:
            self.total = total


def _cut_short(part: Path) -> bool:
    """A fill's temporary file whose process is gone (`<name>.part-<pid>-<thread>`),
    or that nobody wrote for an hour. A front end started beside others (one
    replaced after it died) must not remove what they are filling now: their
    reads would fail as if the model were gone."""
    pid = part.name.rpartition(".part-")[2].partition("-")[0]
    try:
        if time.time() - part.stat().st_mtime > LEFTOVER_SECONDS:
            return True
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return True
    except (FileNotFoundError, PermissionError):
        return False  # gone already, or a live process of another user
    return False
