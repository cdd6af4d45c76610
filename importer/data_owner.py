"""Who holds the bytes that tensor views point into.

Owns: `DataOwner`, one per underlying buffer (the model file's mapping or
bytes, the caller's byte array, or one external data file). Views are handed
out only while the owner is open; after `close()` asking for one raises
`ModelImportError` (kind Io) instead of touching released memory.

A mapped file that shrinks under its mapping: each new view first checks the
file's current size (`current_size`, an fstat of the mapping's descriptor)
and refuses a range that is no longer backed by the file (kind Io). A view
handed out before the file shrank cannot be protected: touching its missing
pages raises SIGBUS, which ends the process (Python's faulthandler, when on,
prints "Bus error" and the traceback). The service reads tensors in worker
processes and checks size, mtime and inode before serving for that reason.
"""

from __future__ import annotations

import hashlib
import mmap
from collections.abc import Callable
from typing import Final

from importer.errors import ErrorKind, ModelImportError

HASH_CHUNK: Final = 1 << 22


class FileIdentity:
    """A file as it was when opened (an fstat of the descriptor that was
    read). An immutable value, compared and hashed by its fields; a plain
    class rather than a frozen dataclass so that making one (one per file)
    runs no interpreted code in the compiled build."""

    __slots__ = ("path", "device", "inode", "size", "mtime_ns", "links")

    def __init__(self, path: str, device: int, inode: int, size: int, mtime_ns: int, links: int) -> None:
        self.path = path  # the path opened, every link resolved
        self.device = device
        self.inode = inode
        self.size = size
        self.mtime_ns = mtime_ns
        self.links = links

    def _fields(self) -> tuple[str, int, int, int, int, int]:
        return (self.path, self.device, self.inode, self.size, self.mtime_ns, self.links)

    def __eq__(self, other: object) -> bool:
        return self._fields() == other._fields() if type(other) is FileIdentity else NotImplemented

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        path, device, inode, size, mtime_ns, links = self._fields()
        return f"FileIdentity(path={path!r}, device={device}, inode={inode}, size={size}, mtime_ns={mtime_ns}, links={links})"


class DataOwner:
    """A buffer shared by the tensors that view into it. `identity`: the file
    the buffer was read or mapped from (None for a caller's bytes)."""

    __slots__ = ("name", "identity", "_buffer", "_on_close", "_closed", "_current_size")

    def __init__(
        self,
        name: str,
        buffer: memoryview,
        on_close: Callable[[], None] | None = None,
        current_size: Callable[[], int] | None = None,
        identity: FileIdentity | None = None,
    ) -> None:
        self.name = name
        self.identity = identity
        self._buffer = buffer
        self._on_close = on_close
        self._closed = False
        self._current_size = current_size

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def size(self) -> int:
        return len(self._buffer)

    def parse_buffer(self) -> bytes | bytearray | mmap.mmap:
        """The object the reader parses: the bytes, bytearray or mapping behind
        the view when the view is all of it, else a copy (a caller's partial
        memoryview; tensor views still point into the caller's memory)."""
        underlying = self._buffer.obj
        if isinstance(underlying, (bytes, bytearray, mmap.mmap)) and len(underlying) == len(self._buffer):
            return underlying
        return self._buffer.tobytes()

    def sha256(self) -> str:
        """The SHA-256 hex digest of the bytes that were read (or mapped)."""
        digest = hashlib.sha256()
        for start in range(0, len(self._buffer), HASH_CHUNK):
            digest.update(self.view(start, min(len(self._buffer), start + HASH_CHUNK)))
        return digest.hexdigest()

    def view(self, start: int, stop: int) -> memoryview:
        """A zero-copy, read-only view of buffer[start:stop]."""
        if self._closed:
            raise ModelImportError(
                ErrorKind.IO,
                "the model was closed; its tensor data can no longer be read",
                input_name=self.name,
            )
        if self._current_size is not None and self._current_size() < stop:
            raise ModelImportError(
                ErrorKind.IO,
                f"the file shrank to {self._current_size()} bytes since it was mapped; bytes {start} to {stop} are gone",
                input_name=self.name,
            )
        return self._buffer[start:stop]

    def close(self) -> None:
        """Release the buffer (and its mapping, if any). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._buffer.release()
        if self._on_close is not None:
            self._on_close()
