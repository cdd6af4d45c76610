"""The worker's profile: how long each of its steps took (`WorkerHeader.steps`).

Owns `Steps`: `done(step)` records the seconds since the step before ended
(for the first, since the front end asked for the worker: `WorkerJob.asked_at`,
so "fork" is the fork server's fork and the worker's start). The clock is
`time.monotonic()`, the one clock the front end and its workers share. The
front end logs the steps beside the worker's wall time; bench/validation_bench.py
reads them there.
"""

from __future__ import annotations

import time


class Steps:
    def __init__(self, started: float = 0.0) -> None:
        self.last = started or time.monotonic()
        self.taken: dict[str, float] = {}

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.taken[step] = round(now - self.last, 4)
        self.last = now
