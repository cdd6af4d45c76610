"""The worker's own memory watchdog (the front end's side: `service.sandbox.memory_watch`,
which says why both exist).

Owns `watch_memory` (a daemon thread that ends the worker with `EXIT_MEMORY`
once the memory it counts reaches 97% of its limit), `open_own_status` and
`counted_bytes`: the worker's whole memory but the files it maps read-only,
from /proc/PID/status: its data segment (`VmData`: private writable
mappings, what RLIMIT_DATA counts) plus its resident shared memory
(`RssShmem`: shared anonymous mappings, System V and POSIX shared memory,
which neither RLIMIT_DATA nor `VmData` counts). The thread is started before
the limits are set: under RLIMIT_NPROC 0 an unprivileged process may not
start a thread.
"""

from __future__ import annotations

import os
import threading
import time

EXIT_MEMORY = 86  # the worker ran out of memory (the parent's ResourceLimit "memory")
THRESHOLD = 0.97
INTERVAL_SECONDS = 0.02
COUNTED = (b"VmData:", b"RssShmem:")  # in kB


def counted_bytes(status_fd: int) -> int:
    """The memory a worker is held to, in bytes, from its open /proc/PID/status."""
    text = os.pread(status_fd, 4096, 0)
    total = 0
    for field in COUNTED:
        start = text.find(field)
        if start >= 0:
            total += int(text[start + len(field) : text.index(b"kB", start)])
    return total * 1024


def open_own_status() -> int:
    """The worker's /proc/self/status, opened before its minimal root hides /proc."""
    return os.open("/proc/self/status", os.O_RDONLY | os.O_CLOEXEC)


def watch_memory(limit: int, status_fd: int) -> None:
    """Start the watchdog thread for a worker limited to `limit` bytes."""
    threshold = int(limit * THRESHOLD)

    def watch() -> None:
        while counted_bytes(status_fd) < threshold:
            time.sleep(INTERVAL_SECONDS)
        os._exit(EXIT_MEMORY)

    threading.Thread(target=watch, name="memory-watch", daemon=True).start()
