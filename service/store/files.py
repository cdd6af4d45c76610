"""File helpers of the store: durable writes and the shape of a model id.

Owns `MODEL_ID`, `write_file_atomically` (temporary file, fsync, rename;
nothing left behind on failure), `fsync_tree` (many fsyncs at once),
`fsync_dir`, `fsync_path` and `tree_bytes`. Used by the local backend
(`service.store.local`) and the work area, which own the layout.
"""

from __future__ import annotations

import os
import re
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

MODEL_ID = re.compile(r"[0-9a-f]{64}")

_FSYNC_POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="fsync")


def fsync_path(path: str) -> None:
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
    for _ in _FSYNC_POOL.map(fsync_path, paths):
        pass


def fsync_dir(path: Path) -> None:
    fsync_path(str(path))


def tree_bytes(root: Path) -> int:
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            total += os.lstat(os.path.join(folder, name)).st_size
    return total


def write_file_atomically(path: Path, data: bytes, *, durable: bool = True) -> None:
    """Temporary file, fsync (unless not `durable`), rename over `path`; the
    temporary file is removed if any step fails (a full file system)."""
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if durable:
        fsync_dir(path.parent)
