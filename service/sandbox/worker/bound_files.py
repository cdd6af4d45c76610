"""The files a check worker binds for onnxruntime: its model and the external data files the broker opened.

Owns `BoundFiles` and `open_bound_files(job, model, broker)`. A check job
that asks for its files bound (`WorkerJob.bind_for_runtime`) has its model
file opened again, and the external data files it names
(`WorkerJob.mapped_files`, the locations a sandboxed `externals` worker read
from the model; none for a model whose weights are inline) opened by the file broker (`service.sandbox.worker.file_broker`, with the
importer's rules) before its walls, while the worker still holds the
privilege to mount in its own namespace. The minimal root
(`service.sandbox.worker.minimal_root`) then binds each descriptor's file,
read-only, at the path onnxruntime resolves it to (the location beside the
model file), and the model file at its own path: a bind of
`/proc/self/fd/N` binds the inode that descriptor holds, so the file
onnxruntime opens by name is the one checked, whatever is swapped in on the
host afterwards. Landlock then grants reading those files and nothing else
of the inputs (`confinement.confine_files`). The importer reads the same
descriptors (`opener`), so what the check stages read is what onnxruntime maps.

Where a file cannot be opened (the broker refuses it), or the worker's own
identity may not read it by name (a root service's 0600 upload: the worker
reads as uid 65534), nothing is bound: the worker hands the weights over as
today (and the importer reports a refusal).
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections.abc import Callable
from typing import Final

from importer import ModelImportError
from importer.data_owner import DataOwner
from importer.source import ConfinedOpener
from service.sandbox.protocol import WorkerJob

FILES_MAPPED: Final = "files-mapped"  # the isolation's part: the check worker's inputs are bound for onnxruntime


class BoundFiles:
    """Open descriptors of the model and its external data files, by the path each is bound at."""

    def __init__(self, model_path: str, model_fd: int, externals: dict[str, tuple[int, str]]) -> None:
        self.model_path = model_path
        self._externals = externals  # normalised location -> (descriptor, the path the broker resolved)
        folder = os.path.dirname(model_path)
        self.targets: dict[str, int] = {model_path: model_fd}
        for location, (fd, _) in externals.items():
            self.targets[os.path.normpath(os.path.join(folder, location))] = fd

    @property
    def locations(self) -> frozenset[str]:
        return frozenset(self._externals)

    def opener(self, fallback: ConfinedOpener) -> ConfinedOpener:
        """An opener that gives the importer a duplicate of the bound descriptor
        of a location (the very inode bound), and asks `fallback` for any other."""

        def open_bound(directory: str, location: str) -> tuple[int, str]:
            bound = self._externals.get(posixpath.normpath(location))
            if bound is None:
                return fallback(directory, location)
            fd, path = bound
            return os.dup(fd), path

        return open_bound

    def close(self) -> None:
        for fd in set(self.targets.values()):
            os.close(fd)
        self.targets.clear()
        self._externals.clear()


def open_bound_files(job: WorkerJob, model: DataOwner, broker: Callable[[str, str], tuple[int, str]]) -> BoundFiles | None:
    """The model (opened again and checked to be the inode `model` holds) and
    each of `job.mapped_files` opened by `broker`; None if any is refused."""
    if job.task != "checks" or not (job.bind_for_runtime or job.mapped_files) or model.identity is None:
        return None
    model_path = os.path.join(job.directory, job.model)
    try:
        model_fd = os.open(model_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError:
        return None
    info = os.fstat(model_fd)
    if (info.st_dev, info.st_ino) != (model.identity.device, model.identity.inode):
        os.close(model_fd)
        return None
    externals: dict[str, tuple[int, str]] = {}
    directory = job.external_dir or job.directory
    try:
        for location in job.mapped_files:
            externals[posixpath.normpath(location)] = broker(directory, location)
    except ModelImportError:
        for fd, _ in externals.values():
            os.close(fd)
        os.close(model_fd)
        return None
    bound = BoundFiles(model_path, model_fd, externals)
    if not all(readable_as(job.worker_uid, job.worker_gid, fd) for fd in bound.targets.values()):
        bound.close()
        return None
    return bound


def readable_as(uid: int, gid: int, fd: int) -> bool:
    """Whether the worker, once it has left root for `uid` and `gid`, may open
    the file `fd` holds by name (a bind keeps the file's owner and mode: a
    root service's 0600 upload is not the worker's to open). A worker of a
    service that is not root keeps the service's own identity."""
    info = os.fstat(fd)
    if os.geteuid() != 0:
        uid, gid = os.geteuid(), os.getegid()
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IRUSR)
    if info.st_gid == gid:
        return bool(info.st_mode & stat.S_IRGRP)
    return bool(info.st_mode & stat.S_IROTH)
