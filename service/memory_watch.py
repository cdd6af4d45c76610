"""The worker's memory watchdog: leave promptly at the memory limit.

Owns `watch_memory`. RLIMIT_DATA alone does not always end a worker that
outgrows it: once `brk` is refused, glibc's malloc falls back to fresh
mappings for small requests and pymalloc's arenas churn. Nothing fails hard,
so Python never raises MemoryError and crawls through failing `mmap` and
`mprotect` calls until the CPU limit ends it (seen on a 400,000-node model
mapped from disk under a 128 MiB cap: 226,000 `mmap`s in 20 s). So a
daemon thread reads the data segment's size (`/proc/self/statm`: what
RLIMIT_DATA counts; not the read-only mapping of the model) every 20 ms and
ends the process with `EXIT_MEMORY` at 97% of the limit. The parent reports
that as ResourceLimit (memory). Started before the limits are set: under
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


def watch_memory(limit: int) -> None:
    """Start the watchdog thread for a worker limited to `limit` bytes of data."""
    statm_fd = os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC)
    threshold = int(limit * THRESHOLD)

    def watch() -> None:
        while data_bytes(statm_fd) < threshold:
            time.sleep(INTERVAL_SECONDS)
        os._exit(EXIT_MEMORY)

    threading.Thread(target=watch, name="memory-watch", daemon=True).start()
