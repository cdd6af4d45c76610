"""Early writeback of a file being written: `start_writeback(fd, offset, length)`.

A large upload's pages are sent to disk while it is still arriving, so the
fsync that commits it has little left to wait for (an 805 MB upload's
commit went from 0.35 s to 0.04 s). sync_file_range(2) with
SYNC_FILE_RANGE_WRITE, through ctypes: Python's os module lacks it.
"""

from __future__ import annotations

import ctypes

_SYNC_FILE_RANGE_WRITE = 2  # linux/fs.h: start writeback of the range's dirty pages, do not wait
_sync_file_range = getattr(ctypes.CDLL(None, use_errno=True), "sync_file_range", None)
if _sync_file_range is not None:
    _sync_file_range.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)


def start_writeback(fd: int, offset: int, length: int) -> None:
    """Ask the kernel to start writing `length` bytes of `fd` at `offset` to
    disk, without waiting; the pages stay cached. A hint: where the call is
    missing or fails, nothing happens."""
    if _sync_file_range is not None:
        _sync_file_range(fd, offset, length, _SYNC_FILE_RANGE_WRITE)
