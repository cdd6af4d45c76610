"""The terminal progress bar of the command line (and of `progress=True`).

Owns `TerminalBar`: a tqdm bar on standard error showing the percentage,
bytes done and in all (SI units: MB is 10^6 bytes), the time spent and left,
and the rate. It is a `Progress` callback: each call sets the bar to the
bytes done, which may go back (a retried or resumed upload). The only module
of the client that imports tqdm, and only the command line or a caller
asking for a bar imports it.
"""

from __future__ import annotations

import sys

from tqdm import tqdm  # type: ignore[import-untyped]  # no inline types; its stubs are a package of their own

MIN_INTERVAL = 0.2  # seconds between redraws


class TerminalBar:
    def __init__(self, label: str) -> None:
        self._bar = tqdm(
            desc=label,
            total=None,
            unit="B",
            unit_scale=True,
            unit_divisor=1000,
            file=sys.stderr,
            dynamic_ncols=True,
            mininterval=MIN_INTERVAL,
        )

    def __call__(self, done: int, total: int) -> None:
        if total and self._bar.total != total:
            self._bar.total = total
            self._bar.refresh()
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        self._bar.close()
