"""The worker's root file system: only what its job reads, read-only.

Owns `pivot_to_minimal_root(folders)`, called in a worker's own mount
namespace (`service.sandbox.worker.namespaces`) before it leaves its privileges. The new
root is an empty tmpfs; each folder named (the model's folder, its
external-data folder, the Python code the worker may import lazily) is bound
into it at its own path (and at its real path, where links lead elsewhere),
read-only, without devices or set-uid programs; then the worker pivots into
it and detaches the host's tree, and the tmpfs itself is made read-only.
From then on `stat`, `inotify` and `fanotify` find nothing else: not the
store's other folders, not the API-key file, not `/etc`, `/proc` or `/dev`.

The folders are opened (O_PATH) before the tmpfs is mounted and bound
through `/proc/self/fd`, so a folder beneath the tmpfs's own mount point is
bound all the same. Mount events stay in the worker's namespace (the tree is
made private first). Raises OSError where the kernel refuses a step; the
caller then runs without the minimal root and reports so.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable
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


def pivot_to_minimal_root(folders: Iterable[str]) -> None:
    """Make the root a read-only tmpfs holding only `folders`, each read-only."""
    targets = bind_targets(folders)
    opened = {source: os.open(source, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) for source in set(targets.values())}
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        base = next(point for point in MOUNT_POINTS if os.path.isdir(point))
        _mount("tmpfs", base, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"mode=0755,size={ROOT_BYTES}")
        for path, source in targets.items():
            target = base + path
            os.makedirs(target, mode=0o755, exist_ok=True)
            _mount(f"/proc/self/fd/{opened[source]}", target, None, MS_BIND | MS_REC)
            _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | _kept_flags(opened[source]))
    finally:
        for fd in opened.values():
            os.close(fd)
    os.chdir(base)
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")  # the old root is stacked beneath the new one
    _check(_libc.umount2(b".", MNT_DETACH), "umount the host's root")
    os.chdir("/")
    _mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def _kept_flags(folder: int) -> int:
    """The flags a bind must keep from the mount the opened `folder` is on (a
    user namespace may not clear them): noexec, which the code's folders never have."""
    return MS_NOEXEC if os.fstatvfs(folder).f_flag & os.ST_NOEXEC else 0
