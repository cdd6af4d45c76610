"""The store's local work area: one folder per live service process.

Owns `WorkArea`, under `<store>/tmp/`:
    tmp/<process>/...     work folders of one live service process (a
                          request's upload, the worker's streams, a render)
    tmp/<process>.lock    held (flock) while that process lives
Each process owns only its own folder, and at start removes the folders
whose owner's lock is free (a process that crashed). A work folder is laid
out as a model's (`ModelFolder`) and removed on every path out, unless the
store installed its files. Also the local file system's free space, which
the store's free-space floor (`--store-min-free`) watches.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

from service.errors import is_full
from service.store.files import write_file_atomically
from service.store.layout import ModelFolder

log = logging.getLogger("service.store")

PROBE_PREFIX = "probe-"  # the readiness check's file (`WorkArea.writable`), there for an instant


def is_probe(path: Path) -> bool:
    """The readiness check's probe, or the temporary file it is written through."""
    return path.name.removeprefix(".").startswith(PROBE_PREFIX)


class WorkArea:
    def __init__(self, root: Path) -> None:
        self.root = root  # the store's tmp/ folder
        self.process_id = uuid.uuid4().hex
        self.folder = root / self.process_id
        self._lock_fd: int | None = None

    def open(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / f"{self.process_id}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._lock_fd = fd
        self.folder.mkdir()
        self.clean_crashed()

    def close(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.root / f"{self.process_id}.lock").unlink()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def clean_crashed(self) -> None:
        """Remove the work folders of processes that are gone."""
        for lock_path in self.root.glob("*.lock"):
            owner = lock_path.stem
            if owner == self.process_id:
                continue
            try:
                fd = os.open(lock_path, os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # its owner is alive
            try:
                shutil.rmtree(self.root / owner, ignore_errors=True)
                lock_path.unlink(missing_ok=True)
                log.info("removed the temporary files of a stopped service process (%s)", owner)
            finally:
                os.close(fd)
        for entry in self.root.iterdir():  # folders whose lock file is gone
            if entry.is_dir() and not (self.root / f"{entry.name}.lock").exists():
                shutil.rmtree(entry, ignore_errors=True)

    @contextlib.contextmanager
    def work_folder(self) -> Iterator[ModelFolder]:
        """A fresh folder for one request, laid out as a model's; removed on
        every path out (its files are gone from it once installed)."""
        folder = self.folder / uuid.uuid4().hex
        folder.mkdir()
        try:
            yield ModelFolder(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def trash(self, what: str) -> Path:
        """A fresh path in this process's folder to move something into before deleting it."""
        return self.folder / f"{what}-{uuid.uuid4().hex[:8]}"

    def free_bytes(self) -> int:
        """Bytes an unprivileged writer may still use on the work area's file system."""
        info = os.statvfs(self.root)
        return info.f_bavail * info.f_frsize

    def writable(self) -> bool:
        """A file can be written here (a full file system counts as writable:
        the free-space floor reports that, and stops at once when space returns)."""
        probe = self.folder / f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        try:
            write_file_atomically(probe, b"ok")
            probe.unlink()
            return True
        except OSError as error:
            with contextlib.suppress(OSError):
                probe.unlink()
            return is_full(error)

    def temporary_files(self) -> list[Path]:
        """Everything in this process's folder but a readiness probe being
        written (tests: nothing after a request)."""
        return sorted(path for path in self.folder.rglob("*") if not is_probe(path))
