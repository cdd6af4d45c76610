"""The content-addressed store: imported models by id, on disk.

Layout under the store root:
    models/<id>/record.json   what the service needs to answer (summary, tensors, files)
    models/<id>/summary.json  the summary, served as is
    models/<id>/graph.json    the full resolved graph, served as is
    models/<id>/files/...     an uploaded model and its external data
    models/<id>/tensors/N.bin converted tensor bytes (typed fields, strings)
    models/<id>/lru           its mtime is the model's last use; it holds the
                              bytes the model takes in the store (decimal)
    tmp/<process>/...         work folders of one live service process
    tmp/<process>.lock        held (flock) while that process lives
    lock, usage               flock for commits and eviction; the byte total
                              (a cache: recomputed from the lru files at start)

Rules: a model folder appears whole or not at all (its files are written and
fsynced in a work folder, which is then renamed into models/); a model is never
modified after that; eviction renames a folder out of models/ before deleting
it, so a reader sees a model whole or not at all (an open file stays readable).
Several service processes may share one store: commits, the byte total and
eviction are serialized by an exclusive flock on `lock`; each process owns only
its own tmp folder, and at start removes tmp folders whose owner's lock is free
(a process that crashed).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

log = logging.getLogger("service.store")

MODEL_ID = re.compile(r"[0-9a-f]{64}")


class StoreFullError(Exception):
    """The model alone is larger than the store's size cap."""


_FSYNC_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fsync")


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file and folder under `root` (and `root`), several at once
    (the file system commits concurrent fsyncs together: one journal commit
    instead of one per file)."""
    paths: list[str] = []
    for folder, _, files in os.walk(root):
        paths.extend(os.path.join(folder, name) for name in files)
        paths.append(folder)
    for _ in _FSYNC_POOL.map(_fsync_path, paths):
        pass


def fsync_dir(path: Path) -> None:
    _fsync_path(str(path))


def tree_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(folder, name)).st_size
    return total


def write_file_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Temporary file, fsync (unless not `durable`), rename over `path`."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
    if durable:
        fsync_dir(path.parent)


class Store:
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.models = root / "models"
        self.tmp = root / "tmp"
        self.process_id = uuid.uuid4().hex
        self.work_root = self.tmp / self.process_id
        self._process_lock_fd: int | None = None

    # --- life cycle

    def open(self) -> None:
        self.models.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.tmp / f"{self.process_id}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._process_lock_fd = fd
        self.work_root.mkdir()
        self.clean_crashed()
        with self.locked():
            self._write_usage(self._scan_usage())

    def close(self) -> None:
        shutil.rmtree(self.work_root, ignore_errors=True)
        with contextlib.suppress(FileNotFoundError):
            (self.tmp / f"{self.process_id}.lock").unlink()
        if self._process_lock_fd is not None:
            os.close(self._process_lock_fd)
            self._process_lock_fd = None

    def clean_crashed(self) -> None:
        """Remove the tmp folders of processes that are gone."""
        for lock_path in self.tmp.glob("*.lock"):
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
                shutil.rmtree(self.tmp / owner, ignore_errors=True)
                lock_path.unlink(missing_ok=True)
                log.info("removed the temporary files of a stopped service process (%s)", owner)
            finally:
                os.close(fd)
        for entry in self.tmp.iterdir():  # folders whose lock file is gone
            if entry.is_dir() and not (self.tmp / f"{entry.name}.lock").exists():
                shutil.rmtree(entry, ignore_errors=True)

    def writable(self) -> bool:
        probe = self.work_root / f"probe-{uuid.uuid4().hex}"
        try:
            write_file_atomically(probe, b"ok")
            probe.unlink()
            return True
        except OSError:
            return False

    @contextlib.contextmanager
    def work_folder(self) -> Iterator[Path]:
        """A fresh folder for one request; removed on every path out."""
        folder = self.work_root / uuid.uuid4().hex
        folder.mkdir()
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def temporary_files(self) -> list[Path]:
        """Everything in this process's tmp folder (tests: nothing after a request)."""
        return sorted(self.work_root.rglob("*"))

    # --- locking and the byte total

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _scan_usage(self) -> int:
        return sum(self._size_of(folder) for folder in self.models.iterdir() if folder.is_dir())

    @staticmethod
    def _size_of(folder: Path) -> int:
        try:
            return int((folder / "lru").read_text())
        except (OSError, ValueError):
            return 0

    def _read_usage(self) -> int:
        try:
            return int((self.root / "usage").read_text())
        except (OSError, ValueError):
            return self._scan_usage()

    def _write_usage(self, total: int) -> None:
        write_file_atomically(self.root / "usage", str(max(0, total)).encode(), durable=False)

    # --- models

    def folder(self, model_id: str) -> Path:
        if not MODEL_ID.fullmatch(model_id):
            raise KeyError(model_id)
        return self.models / model_id

    def has(self, model_id: str) -> bool:
        return MODEL_ID.fullmatch(model_id) is not None and (self.models / model_id / "record.json").is_file()

    def read_record(self, model_id: str) -> dict[str, Any] | None:
        """The record of a stored model (and mark it used), or None."""
        if not MODEL_ID.fullmatch(model_id):
            return None
        folder = self.models / model_id
        try:
            record: dict[str, Any] = json.loads((folder / "record.json").read_bytes())
        except FileNotFoundError:
            return None
        self.touch(model_id)
        return record

    def replace_record(self, model_id: str, record: dict[str, Any]) -> None:
        """Rewrite a stored record whole (same content, files found elsewhere now)."""
        with self.locked():
            folder = self.models / model_id
            if folder.is_dir():
                write_file_atomically(folder / "record.json", json.dumps(record).encode())

    def touch(self, model_id: str) -> None:
        with contextlib.suppress(OSError):
            os.utime(self.models / model_id / "lru")

    def commit(self, work: Path, model_id: str, record: dict[str, Any], summary: bytes) -> bool:
        """Move the finished work folder `work` into the store as `model_id`.
        True if stored now, False if the model was there already."""
        (work / "record.json").write_bytes(json.dumps(record).encode())
        (work / "summary.json").write_bytes(summary)
        size = tree_bytes(work)
        size += len(str(size + 20))
        (work / "lru").write_text(str(size))
        if size > self.max_bytes:
            raise StoreFullError(f"the model takes {size} bytes, more than the store's cap of {self.max_bytes}")
        fsync_tree(work)
        target = self.models / model_id
        with self.locked():
            if target.exists():
                return False
            try:
                os.rename(work, target)
            except OSError as error:
                if error.errno in (errno.EEXIST, errno.ENOTEMPTY):
                    return False
                raise
            fsync_dir(self.models)
            self._write_usage(self._read_usage() + size)
            self._evict(keep=model_id)
        return True

    def _evict(self, keep: str) -> None:
        """Least recently used first, until the total is within the cap (lock held)."""
        total = self._read_usage()
        if total <= self.max_bytes:
            return
        candidates = []
        for folder in self.models.iterdir():
            if folder.name == keep or not folder.is_dir():
                continue
            try:
                used = (folder / "lru").stat().st_mtime_ns
            except OSError:
                used = 0
            candidates.append((used, folder))
        for _, folder in sorted(candidates):
            if total <= self.max_bytes:
                break
            size = self._size_of(folder)
            trash = self.work_root / f"evicted-{folder.name}-{uuid.uuid4().hex[:8]}"
            try:
                os.rename(folder, trash)
            except OSError:
                continue
            shutil.rmtree(trash, ignore_errors=True)
            total -= size
            log.info("evicted model %s (%d bytes) from the store", folder.name, size)
        fsync_dir(self.models)
        self._write_usage(total)
