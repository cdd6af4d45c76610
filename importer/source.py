"""Opening input files: the only module of the reader that touches the disk.

Owns `open_file` (the model or tensor file a caller names) and
`open_confined` (an external data file, which must stay inside its
directory), whose first half, `confined_descriptor` (resolve, check, open),
a caller may have done elsewhere: by a process that may read the file when
the one that parses may not. Both open without blocking, so a FIFO is refused and never waited
on; check on the open descriptor that it is a regular file; take the size
from that descriptor; then read the file (up to 1 MiB) or map it read-only.
They return a `DataOwner` whose `close()` releases the mapping, and whose
`identity` is the fstat of the descriptor that was read (device, inode, size,
mtime, links) with the path the kernel gives that descriptor: what a caller
records of the file is what was read, never a second look at the path.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat
from collections.abc import Callable
from typing import Final

from importer.data_owner import DataOwner, FileIdentity
from importer.errors import HARD_LINKED, NOT_FOUND, ErrorKind, ModelImportError
from importer.limits import MAX_PROTOBUF_BYTES

READ_INSTEAD_OF_MAP_BYTES: Final = 1 << 20
_OPEN_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_NO_FOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)


def _refusal(kind: ErrorKind, name: str, message: str, reason: str | None = None) -> ModelImportError:
    return ModelImportError(kind, message, input_name=name, reason=reason)


def open_file(path: str | os.PathLike[str], name: str, *, max_bytes: int = MAX_PROTOBUF_BYTES, allow_hard_links: bool = True) -> DataOwner:
    """Open the file a caller named (links followed) as one buffer."""
    fd = _open(path, _OPEN_FLAGS, ErrorKind.IO, name)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refusal(ErrorKind.IO, name, "not a regular file")
        if info.st_nlink > 1 and not allow_hard_links:
            raise _refusal(ErrorKind.IO, name, f"has {info.st_nlink} hard links (refused unless allowed)", HARD_LINKED)
        return _owner_from(fd, info, _opened_path(fd, path), name, max_bytes)
    finally:
        os.close(fd)


def _opened_path(fd: int, path: str | os.PathLike[str]) -> str:
    """The absolute path of the file `fd` holds, every link resolved: on
    Linux the kernel's own name for the very file opened (one readlink of
    /proc/self/fd, where resolving the path again costs a look-up per
    component); elsewhere, or for a file deleted since, `realpath`."""
    try:
        opened = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)
    if not opened.startswith("/") or opened.endswith(" (deleted)"):
        return os.path.realpath(path)
    return opened


ConfinedOpener = Callable[[str, str], tuple[int, str]]  # (directory, location) -> (open descriptor, its resolved path)


def confined_descriptor(directory: str, location: str) -> tuple[int, str]:
    """Open `location` inside `directory`: every link resolved, the result
    inside the resolved directory and a regular file, and the file opened the
    very one that was checked (same device and inode, not a link). The
    descriptor (the caller closes it) and the resolved path."""
    kind = ErrorKind.EXTERNAL_DATA
    root = os.path.realpath(directory)
    path = os.path.realpath(os.path.join(root, location))
    if path == root or os.path.commonpath([root, path]) != root:
        raise _refusal(kind, location, "resolves outside the external data directory")
    try:
        checked = os.stat(path)
    except FileNotFoundError:
        raise _refusal(kind, location, "no such file", NOT_FOUND) from None
    except OSError as error:
        raise _refusal(kind, location, f"cannot be examined: {error.strerror}") from None
    if not stat.S_ISREG(checked.st_mode):
        raise _refusal(kind, location, "is not a regular file")
    fd = _open(path, _OPEN_FLAGS | _NO_FOLLOW, kind, location)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or (info.st_dev, info.st_ino) != (checked.st_dev, checked.st_ino):
        os.close(fd)
        raise _refusal(kind, location, "changed between its check and its opening")
    return fd, path


def open_confined(
    directory: str, location: str, *, allow_hard_links: bool, max_bytes: int, opener: ConfinedOpener = confined_descriptor
) -> DataOwner:
    """`location` inside `directory`, opened by `opener` (`confined_descriptor`:
    its rules), then checked on the descriptor (a regular file; one hard link
    unless allowed) and read or mapped."""
    fd, path = opener(directory, location)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _refusal(ErrorKind.EXTERNAL_DATA, location, "is not a regular file")
        if info.st_nlink > 1 and not allow_hard_links:
            raise _refusal(ErrorKind.EXTERNAL_DATA, location, f"has {info.st_nlink} hard links (refused unless allowed)", HARD_LINKED)
        return _owner_from(fd, info, path, location, max_bytes)
    finally:
        os.close(fd)


def _open(path: str | os.PathLike[str], flags: int, kind: ErrorKind, name: str) -> int:
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        raise _refusal(kind, name, "no such file", NOT_FOUND) from None
    except IsADirectoryError:
        raise _refusal(kind, name, "is a directory, not a file") from None
    except OSError as error:
        raise _refusal(kind, name, f"cannot be opened: {error.strerror}") from None


def _owner_from(fd: int, info: os.stat_result, path: str, name: str, max_bytes: int) -> DataOwner:
    size = info.st_size
    identity = FileIdentity(path, info.st_dev, info.st_ino, size, info.st_mtime_ns, info.st_nlink)
    if size > max_bytes:
        raise _refusal(
            ErrorKind.UNSUPPORTED,
            name,
            f"file is {size} bytes, more than the limit of {max_bytes} (keep weights in external data)",
        )
    try:
        if size <= READ_INSTEAD_OF_MAP_BYTES:
            return DataOwner(name, memoryview(_read_exactly(fd, size, name)), identity=identity)
        mapping = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    except OSError as error:
        raise _refusal(ErrorKind.IO, name, f"cannot be read: {error.strerror}") from None
    return DataOwner(name, memoryview(mapping), on_close=lambda: _close_mapping(mapping), current_size=mapping.size, identity=identity)


def _read_exactly(fd: int, size: int, name: str) -> bytes:
    first = os.read(fd, size)
    if len(first) == size:  # the usual case: one read
        return first
    chunks = [first]
    remaining = size - len(first)
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            raise _refusal(ErrorKind.IO, name, "file shrank while it was read")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _close_mapping(mapping: mmap.mmap) -> None:
    """Unmap now, unless a caller still holds a view (then it is unmapped when
    the last view is released)."""
    with contextlib.suppress(BufferError):
        mapping.close()
