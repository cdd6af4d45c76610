"""A stored file's bytes, read by range: what a tensor response reads from.

Owns `ByteSource` (the protocol: a small range read at once, a large one
begun before its response starts, then as chunks with constant memory, then
closed) and `FileSource`, a source over an
open local file (a model's folder in the local store, a data-root file) read
with `os.pread` in 1 MiB chunks in a worker thread. An object-storage
backend gives its own source (`service.store.s3.objects`): ranged GETs.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from typing import Protocol

import anyio.to_thread

CHUNK_BYTES = 1 << 20


class ByteSource(Protocol):
    def read(self, offset: int, length: int) -> bytes:
        """Bytes [offset, offset + length) (blocking; fewer if the source is shorter)."""

    def begin(self, offset: int, length: int) -> None:
        """Before a response of these bytes starts (blocking): what would fail
        the stream fails here, as its problem (a source gone: 410), not as a
        body cut short once the headers are sent; `chunks` of the range follows."""

    def chunks(self, offset: int, length: int) -> AsyncIterator[bytes | memoryview]:
        """The same bytes as an async stream of chunks, memory bounded by a chunk."""

    def close(self) -> None: ...


class FileSource:
    """An open local file (the source owns the descriptor)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read(self, offset: int, length: int) -> bytes:
        return os.pread(self.fd, length, offset) if length > 0 else b""

    def begin(self, offset: int, length: int) -> None:
        pass  # open already: a file removed meanwhile is still read whole

    async def chunks(self, offset: int, length: int) -> AsyncIterator[bytes | memoryview]:
        position, end = offset, offset + length
        while position < end:
            chunk = await anyio.to_thread.run_sync(os.pread, self.fd, min(CHUNK_BYTES, end - position), position)
            if not chunk:
                return  # the file shrank under us: the client sees a short body
            position += len(chunk)
            yield chunk

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
