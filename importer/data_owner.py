"""Who holds the bytes that tensor views point into.

Owns: `DataOwner`, one per underlying buffer (the model file's mapping or
bytes, the caller's byte array, or one external data file). Views are handed
out only while the owner is open; after `close()` asking for one raises
`ModelImportError` (kind Io) instead of touching released memory.
"""

from __future__ import annotations

from collections.abc import Callable

from importer.errors import ErrorKind, ModelImportError


class DataOwner:
    """A buffer shared by the tensors that view into it."""

    __slots__ = ("name", "_buffer", "_on_close", "_closed")

    def __init__(self, name: str, buffer: memoryview, on_close: Callable[[], None] | None = None) -> None:
        self.name = name
        self._buffer = buffer
        self._on_close = on_close
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def size(self) -> int:
        return len(self._buffer)

    def view(self, start: int, stop: int) -> memoryview:
        """A zero-copy, read-only view of buffer[start:stop]."""
        if self._closed:
            raise ModelImportError(
                ErrorKind.IO,
                "the model was closed; its tensor data can no longer be read",
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
