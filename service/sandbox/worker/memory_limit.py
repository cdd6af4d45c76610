"""The worker's own memory watchdog (the front end's side: `service.sandbox.memory_watch`,
which says why both exist).

Owns `watch_memory` (a daemon thread that ends the worker with `EXIT_MEMORY`
once its data segment reaches 97% of its limit), `open_own_statm` and
`data_bytes`. The thread is started before the limits are set: under
RLIMIT_NPROC 0 an unprivileged process may not start a thread.
"""

from __future__ import annotations

import os
import threading
import time

EXIT_MEMORY = 86  # the worker ran out of memory (the parent's ResourceLimit "memory")
THRESHOLD = 0.97
INTERVAL_SECONDS = 0.02
_PAGE = os.sysconf("SC_PAGE_SIZE")


def data_bytes(statm_fd: int) -> int:
    """The data segment's size: statm's sixth field (data + stack), in bytes."""
    return int(os.pread(statm_fd, 256, 0).split()[5]) * _PAGE


def open_own_statm() -> int:
    """The worker's /proc/self/statm, opened before its file policy forbids it."""
    return os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)


def watch_memory(limit: int, statm_fd: int) -> None:
    """Start the watchdog thread for a worker limited to `limit` bytes of data."""
    threshold = int(limit * THRESHOLD)

    def watch() -> None:
        while data_bytes(statm_fd) < threshold:
            time.sleep(INTERVAL_SECONDS)
        os._exit(EXIT_MEMORY)

    threading.Thread(target=watch, name="memory-watch", daemon=True).start()
