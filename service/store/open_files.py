"""The files tensors are served from, kept open across requests.

Owns `OpenFiles`: a bounded cache, least recently used out first, of files
opened by `service.store.client_paths.open_checked` (below a root, no link followed,
checked to be the file read at import). A hit is checked again, for a few
microseconds instead of an open per path component: the descriptor's file
still has the recorded identity (fstat: a regular file of the same size,
mtime and inode) and the path still leads to that very file through the
very folders it did (an lstat per component: same device and inode, so a
folder swapped for a link is seen); else the file is opened afresh, which
answers as `open_checked` does (gone, changed). Each borrower gets a descriptor of its own (`os.dup`),
so an eviction never closes one in use.

A removed file's descriptors are closed by `forget(paths)`; `sweep()`, at
most every SWEEP_SECONDS, closes those whose path no longer names their file
(a model deleted by another process, a data-root file removed), so their
space is freed.
"""

from __future__ import annotations

import os
import stat
import threading
import time
from collections import OrderedDict

from service.store.client_paths import open_checked
from service.store.records import SourceFile

FileKey = tuple[str, str, int, int, int]  # root, path below it, size, mtime_ns, inode
Chain = tuple[tuple[str, int, int], ...]  # each folder below the root, then the file: (its path, inode, device)


def _chain(root: str, relative: str) -> Chain | None:
    """The path's components below `root`, each as lstat sees it; None if a
    folder among them is not a folder (a link, say)."""
    links: list[tuple[str, int, int]] = []
    path, parts = root, relative.split("/")
    for index, part in enumerate(parts):
        path = f"{path}/{part}"
        info = os.lstat(path)
        if index < len(parts) - 1 and not stat.S_ISDIR(info.st_mode):
            return None
        links.append((path, info.st_ino, info.st_dev))
    return tuple(links)


def _names_it(chain: Chain, fd: int) -> bool:
    """The path still leads to the file open on `fd` through the very folders
    it did (each component lstat-ed in order, so a folder swapped for a link
    shows as another inode), as `open_under`'s walk would find it."""
    try:
        for path, inode, device in chain:
            info = os.lstat(path)
            if (info.st_ino, info.st_dev) != (inode, device):
                return False
        held = os.fstat(fd)
    except OSError:
        return False
    return (held.st_ino, held.st_dev) == chain[-1][1:]


def _unchanged(fd: int, identity: SourceFile) -> bool:
    info = os.fstat(fd)
    return stat.S_ISREG(info.st_mode) and (info.st_size, info.st_mtime_ns, info.st_ino) == (
        identity.size,
        identity.mtime_ns,
        identity.inode,
    )


class OpenFiles:
    SWEEP_SECONDS = 1.0

    def __init__(self, capacity: int = 128) -> None:
        self.capacity = capacity
        self.open: OrderedDict[FileKey, tuple[int, Chain]] = OrderedDict()  # key -> (descriptor, the path's components)
        self.lock = threading.Lock()
        self.swept = time.monotonic()

    def borrow(self, root: str, identity: SourceFile) -> int:
        """A descriptor of the file `identity` names below `root` (the caller
        closes it); TensorSourceGone or TensorSourceChanged as `open_checked`."""
        if time.monotonic() - self.swept > self.SWEEP_SECONDS:
            self.sweep()
        key = (root, identity.path, identity.size, identity.mtime_ns, identity.inode)
        with self.lock:
            entry = self.open.get(key)
            if entry is not None:
                self.open.move_to_end(key)
                fd = os.dup(entry[0])  # under the lock: an eviction cannot close it meanwhile
        if entry is not None:
            if _unchanged(fd, identity) and _names_it(entry[1], fd):
                return fd
            os.close(fd)
            self._close([key])
        fd = open_checked(root, identity)
        try:
            chain = _chain(root, identity.path)
        except OSError:
            chain = None
        if chain is None or not _names_it(chain, fd):
            return fd  # changed under us meanwhile: served once, not kept
        kept = os.dup(fd)
        with self.lock:
            replaced = self.open.pop(key, None)
            self.open[key] = (kept, chain)
            evicted = [self.open.popitem(last=False)[1] for _ in range(len(self.open) - self.capacity)]
        for descriptor, _ in [*evicted, *([replaced] if replaced else [])]:
            os.close(descriptor)
        return fd

    def sweep(self) -> None:
        """Close the descriptors whose path no longer names their file."""
        with self.lock:
            self.swept = time.monotonic()
            stale = [key for key, (fd, chain) in self.open.items() if not _names_it(chain, fd)]
        self._close(stale)

    def forget(self, paths: set[str]) -> None:
        """Close every descriptor of these files (whole paths: removed ones)."""
        with self.lock:
            named = [key for key in self.open if f"{key[0]}/{key[1]}" in paths]
        self._close(named)

    def close(self) -> None:
        with self.lock:
            every = list(self.open)
        self._close(every)

    def _close(self, keys: list[FileKey]) -> None:
        with self.lock:
            closing = [self.open.pop(key) for key in keys if key in self.open]
        for fd, _ in closing:
            os.close(fd)
