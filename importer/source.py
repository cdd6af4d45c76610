"""Opening input files: the only module of the reader that touches the disk.

Owns `open_file`: open without blocking (a FIFO is refused, never waited on),
check on the open descriptor that it is a regular file, take its size from
that descriptor, then read it (up to 1 MiB) or map it read-only. Returns a
`DataOwner` whose `close()` releases the mapping.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import stat

from importer.data_owner import DataOwner
from importer.errors import ErrorKind, ModelImportError
from importer.limits import MAX_PROTOBUF_BYTES

READ_INSTEAD_OF_MAP_BYTES = 1 << 20


def _io_error(name: str, message: str) -> ModelImportError:
    return ModelImportError(ErrorKind.IO, message, input_name=name)


def open_file(path: str | os.PathLike[str], name: str, *, max_bytes: int = MAX_PROTOBUF_BYTES) -> DataOwner:
    """Open `path` for reading as one buffer (see the module header)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise _io_error(name, "no such file") from None
    except IsADirectoryError:
        raise _io_error(name, "is a directory, not a file") from None
    except OSError as error:
        raise _io_error(name, f"cannot open: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise _io_error(name, "not a regular file")
        size = info.st_size
        if size > max_bytes:
            raise ModelImportError(
                ErrorKind.UNSUPPORTED,
                f"file is {size} bytes, more than the protobuf limit of {max_bytes} (keep weights in external data)",
                input_name=name,
            )
        if size <= READ_INSTEAD_OF_MAP_BYTES:
            return DataOwner(name, memoryview(_read_exactly(fd, size, name)))
        mapping = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        return DataOwner(name, memoryview(mapping), on_close=lambda: _close_mapping(mapping))
    except OSError as error:
        raise _io_error(name, f"cannot read: {error.strerror}") from None
    finally:
        os.close(fd)


def _read_exactly(fd: int, size: int, name: str) -> bytes:
    chunks = []
    remaining = size
    while remaining:
        chunk = os.read(fd, remaining)
        if not chunk:
            raise _io_error(name, "file shrank while it was read")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _close_mapping(mapping: mmap.mmap) -> None:
    """Unmap now, unless a caller still holds a view (then it is unmapped when
    the last view is released)."""
    with contextlib.suppress(BufferError):
        mapping.close()
