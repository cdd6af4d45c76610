"""A run's CPU budget, enforced with onnxruntime's own cancellation.

Owns `start_watchdog()` and `cpu_budget(run_options, seconds)`. One daemon
thread per process, the watchdog, waits idle until a run is watched; then it
reads the process's CPU time (`time.process_time()`: every thread's,
onnxruntime's included) every POLL_SECONDS, and once that has grown by the
budget since the run began it sets the run's `RunOptions.terminate`:
onnxruntime ends the run (between kernels, and at each iteration of a
`Loop`) with an error, "Exiting due to terminate flag being set to true".
The smoke stage runs under it (`--smoke-cpu-seconds`), so that a small model
asking for endless work (a `Loop` of 10^15 trips) ends in a few seconds,
not at the worker's own CPU limit.

A check worker starts the watchdog before its limits
(`service.sandbox.worker.confinement.confine`): under RLIMIT_NPROC 0 no
thread may start afterwards. Elsewhere (a test's process) the first
watched run starts it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

POLL_SECONDS: Final = 0.015


class Budget:
    """One watched run: its `RunOptions`, the process CPU time it may reach,
    and whether the watchdog stopped it (`spent`)."""

    __slots__ = ("run_options", "until", "spent")

    def __init__(self, run_options: Any, until: float) -> None:
        self.run_options = run_options
        self.until = until
        self.spent = False


class _Watchdog:
    """The thread, and the runs it watches (guarded by `changed`)."""

    def __init__(self) -> None:
        self.changed = threading.Condition()
        self.watched: list[Budget] = []
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        with self.changed:
            if self.thread is None:
                thread = threading.Thread(target=self.watch, name="cpu-budget", daemon=True)
                thread.start()
                self.thread = thread

    def watch(self) -> None:
        with self.changed:
            while True:
                if not self.watched:
                    self.changed.wait()
                    continue
                self.stop_spent(time.process_time())
                self.changed.wait(POLL_SECONDS)

    def stop_spent(self, now: float) -> None:
        """Terminate every watched run whose budget `now` has reached (the lock held)."""
        for budget in [budget for budget in self.watched if now >= budget.until]:
            budget.run_options.terminate = True
            budget.spent = True
            self.watched.remove(budget)


_WATCHDOG: Final = _Watchdog()


def start_watchdog() -> None:
    """Start the process's watchdog thread, if it is not running yet (RuntimeError where no thread may start)."""
    _WATCHDOG.start()


@contextmanager
def cpu_budget(run_options: Any, seconds: float) -> Iterator[Budget]:
    """Watch the run made with `run_options` (onnxruntime's `RunOptions`) inside
    the block: once the process has used `seconds` of CPU time more than at
    its start, the watchdog sets `run_options.terminate`, and the `Budget`
    yielded is `spent`. The watch ends with the block."""
    start_watchdog()
    budget = Budget(run_options, time.process_time() + seconds)
    with _WATCHDOG.changed:
        _WATCHDOG.watched.append(budget)
        _WATCHDOG.changed.notify_all()
    try:
        yield budget
    finally:
        with _WATCHDOG.changed:
            if budget in _WATCHDOG.watched:
                _WATCHDOG.watched.remove(budget)
