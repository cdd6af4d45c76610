"""The worker's root file system: only what its job reads, read-only.

Owns `pivot_to_minimal_root(folders)`, called in a worker's own mount
namespace (`service.sandbox.worker.namespaces`) before it leaves its privileges. The new
root is an empty tmpfs; each folder named (the model's folder, its
external-data folder, the Python code the worker may import lazily) is bound
into it at its own path (and at its real path, where links lead elsewhere),
read-only, without devices or set-uid programs; then the worker pivots into
it and detaches the host's tree, and the tmpfs itself is made read-only.
A check worker whose model's external data is bound for onnxruntime
(`service.sandbox.worker.bound_files`) gets no folder of its inputs: only
its model file and those external files, each bound from the descriptor
that was checked (opened again in the worker's own mount namespace, which
a bind must come from, and refused unless it is the same inode; bound
through `/proc/self/fd/N`: that inode, not what the path names by then),
read-only, noexec, and a procfs of its own PID namespace, process folders
only, for onnxruntime's check of the files it opens (`_mount_own_proc`).
From then on `stat`, `inotify` and
`fanotify` find nothing else: not the
store's other folders, not the API-key file, not `/etc`, `/proc` or `/dev`.

The folders are opened (O_PATH) before the tmpfs is mounted and bound
through `/proc/self/fd`, so a folder beneath the tmpfs's own mount point is
bound all the same. Mount events stay in the worker's namespace (the tree is
made private first). Raises OSError where the kernel refuses a step (the
new root's tmpfs taken away again if it was mounted); the caller then runs
without the minimal root, or tries without the files, and reports so.
"""

from __future__ import annotations

import ctypes
import errno
import os
from collections.abc import Iterable, Mapping
from typing import Final

MS_RDONLY: Final = 0x1
MS_NOSUID: Final = 0x2
MS_NODEV: Final = 0x4
MS_NOEXEC: Final = 0x8
MS_REMOUNT: Final = 0x20
MS_BIND: Final = 0x1000
MS_REC: Final = 0x4000
MS_PRIVATE: Final = 0x40000
MNT_DETACH: Final = 0x2
SYS_PIVOT_ROOT: Final = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine, -1)
MOUNT_POINTS: Final = ("/tmp", "/mnt", "/run", "/var/tmp")  # where the new root's tmpfs is first mounted
ROOT_BYTES: Final = 1 << 20  # the tmpfs holds only the folders' mount points

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")


def _mount(source: str | None, target: str, kind: str | None, flags: int, data: str | None = None) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            kind.encode() if kind else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {target}",
    )


def bind_targets(folders: Iterable[str]) -> dict[str, str]:
    """Each folder's mount points in the new root ({path: source}): its path as
    named and its real path; a folder inside another one named is bound once
    more all the same (its own flags)."""
    targets: dict[str, str] = {}
    for folder in folders:
        if not folder:
            continue
        real = os.path.realpath(folder)
        if not os.path.isdir(real):
            continue
        for path in (os.path.normpath(folder), real):
            targets.setdefault(path, real)
    return dict(sorted(targets.items()))  # parents before what lies beneath them


def pivot_to_minimal_root(folders: Iterable[str], files: Mapping[str, int] | None = None) -> None:
    """Make the root a read-only tmpfs holding only `folders`, each read-only,
    and `files` ({path: an open descriptor}): each the descriptor's own inode,
    bound at its path, read-only, without devices, set-uid or execution."""
    targets = bind_targets(folders)
    opened = {source: os.open(source, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for source in set(targets.values())}
    here = {}
    try:
        for path, fd in sorted((files or {}).items()):
            here[path] = _in_this_namespace(fd)
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        base = next(point for point in MOUNT_POINTS if os.path.isdir(point))
        _mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"mode=0755,size={ROOT_BYTES}")
        try:
            for path, source in targets.items():
                target = base + path
                os.makedirs(target, mode=0o755, exist_ok=True)
                _mount(f"/proc/self/fd/{opened[source]}", target, None, MS_BIND | MS_REC)
                _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | _kept_flags(opened[source]))
            for path, fd in here.items():
                _bind_file(fd, base + path)
            if here:
                _mount_own_proc(base + "/proc")
        except OSError:
            _libc.umount2(base.encode(), MNT_DETACH)  # the host's tree in view again, as before: the caller may try otherwise
            raise
    finally:
        for fd in [*opened.values(), *here.values()]:
            os.close(fd)
    os.chdir(base)
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")  # the old root is stacked beneath the new one
    _check(_libc.umount2(b".", MNT_DETACH), "umount the host's root")
    os.chdir("/")
    _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _in_this_namespace(fd: int) -> int:
    """The file `fd` holds, opened again (O_PATH) in this mount namespace: the
    kernel binds only from a mount of the caller's own namespace, and `fd` was
    opened in the host's (by the file broker). The same inode, or OSError (the
    path names another file by now: nothing is bound)."""
    again = os.open(os.readlink(f"/proc/self/fd/{fd}"), os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    checked, found = os.fstat(fd), os.fstat(again)
    if (found.st_dev, found.st_ino) != (checked.st_dev, checked.st_ino):
        os.close(again)
        raise OSError(errno.ESTALE, "the file bound is not the one checked")
    return again


def _mount_own_proc(target: str) -> None:
    """A procfs of the worker's own PID namespace, its process folders only
    (`subset=pid`, Linux 5.8), read-only: onnxruntime 1.32 reads the link
    /proc/self/fd/N of each external file it opens to check where it lies
    ("secure opened-file canonicalization"), and refuses the file without it.
    Landlock grants no right beneath it: a link read or a stat, never a file
    read or a listing."""
    os.makedirs(target, mode=0o555, exist_ok=True)
    _mount("proc", target, "proc", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "subset=pid,hidepid=invisible")


def _bind_file(fd: int, target: str) -> None:
    """Bind the file `fd` holds (not whatever its path names now) at `target`, read-only."""
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o444))  # the mount point
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _kept_flags(folder: int) -> int:
    """The flags a bind must keep from the mount the opened `folder` is on (a
    user namespace may not clear them): noexec, which the code's folders never have."""
    return MS_NOEXEC if os.fstatvfs(folder).f_flag & os.ST_NOEXEC else 0
