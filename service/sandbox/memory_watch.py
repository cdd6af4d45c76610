"""The front end's watch over each worker's memory: a worker leaves promptly at its limit.

Owns `WorkerMemoryWatch` (in the front end, one per running worker); the
worker's side is `service.sandbox.worker.memory_limit`. RLIMIT_DATA alone does not always end a worker
that outgrows it: once `brk` is refused, glibc's malloc falls back to fresh
mappings for small requests and pymalloc's arenas churn. Nothing fails hard,
so Python never raises MemoryError and crawls through failing `mmap` and
`mprotect` calls until the CPU limit ends it (seen on a 400,000-node model
mapped from disk under a 128 MiB cap: 226,000 `mmap`s in 20 s). And where it
does fail, the compiled importer's runtime (mypyc) does not always raise
MemoryError: an allocation it cannot recover from aborts the process
(SIGABRT). So the limit is enforced by watching the memory the worker holds
(`service.sandbox.worker.memory_limit.counted_bytes`: the data segment RLIMIT_DATA counts, plus
the shared memory it does not; not the read-only mapping of the model)
every 10 to 20 ms, at 97% of the limit, from two sides (where the kernel's
own count is at hand too, a worker's memory cgroup, `service.sandbox.cgroups`, ends it
first for whatever it holds):

- in the worker, a daemon thread ends the process with `EXIT_MEMORY`. It
  needs the GIL, which compiled code holds for as long as it runs: on its
  own it would often be too late;
- in the front end, `WorkerMemoryWatch` kills the worker, and the sandbox
  reports the import as ResourceLimit (memory). A worker that RLIMIT_DATA
  stopped first, aborted (SIGABRT) after the watch saw it grow past half its
  limit, is reported the same way.

The worker that does the job is the first process of its own PID namespace,
a child of the process the supervisor forked (`service.sandbox.worker.namespaces`): the
watch follows it there once it exists (/proc/PID/task/PID/children).
The worker's thread is started before the limits are set: under
RLIMIT_NPROC 0 an unprivileged process may not start a thread.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable
from pathlib import Path

from service.sandbox.worker.memory_limit import THRESHOLD, counted_bytes

PARENT_INTERVAL_SECONDS = 0.01
ABORT_AS_MEMORY = 0.5  # a SIGABRT after growing past this fraction of the limit: out of memory


class WorkerMemoryWatch:
    """Watches one worker from the front end: kills it (`kill`) once the
    memory it holds reaches 97% of `limit`. `peak` is the largest size seen, `hit`
    whether it was killed for its memory. Ends with the worker, or `stop()`."""

    def __init__(self, pid: int, limit: int, kill: Callable[[], None]) -> None:
        self.peak = 0
        self.hit = False
        self._limit = limit
        self._kill = kill
        self._stopped = threading.Event()
        self._pid = pid
        self._followed = False
        try:
            self._status_fd = os.open(f"/proc/{pid}/status", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no /proc, or the worker ended already: the worker's own watchdog and the rlimit remain
            return
        threading.Thread(target=self._watch, name=f"memory-watch-{pid}", daemon=True).start()

    def _follow(self) -> None:
        """Watch the worker's child once it has one (the first process of its PID namespace)."""
        try:
            children = Path(f"/proc/{self._pid}/task/{self._pid}/children").read_text().split()
            if not children:
                return
            child = os.open(f"/proc/{children[0]}/status", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return
        os.close(self._status_fd)
        self._status_fd, self._followed = child, True

    def _watch(self) -> None:
        threshold = int(self._limit * THRESHOLD)
        try:
            while not self._stopped.is_set():
                if not self._followed:
                    self._follow()
                size = counted_bytes(self._status_fd)
                self.peak = max(self.peak, size)
                if size >= threshold:
                    self.hit = True
                    self._kill()
                    return
                self._stopped.wait(PARENT_INTERVAL_SECONDS)
        except (OSError, ValueError, IndexError):  # the worker is gone (its status reads empty or fails)
            return
        finally:
            with contextlib.suppress(OSError):
                os.close(self._status_fd)

    def ran_out(self, exit_signal: int | None) -> bool:
        """Whether the worker's end was its memory: killed here, or aborted
        (the compiled importer's runtime, out of memory) after growing past
        half its limit."""
        return self.hit or (exit_signal == signal.SIGABRT and self.peak >= self._limit * ABORT_AS_MEMORY)

    def stop(self) -> None:
        self._stopped.set()
