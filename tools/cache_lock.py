"""One process at a time fills a shared cache folder.

The test data caches under .cache/ (the backend models, the torch exports,
the held-in models) are filled on first use by whichever process needs them
first: with the suite spread over several pytest processes (pytest-xdist),
or a tool run beside the tests, two of them may start at once. Each filler
holds an exclusive lock on `<folder>.lock`, beside the folder, while it
checks and fills it, so the second waits and then finds the folder complete.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def cache_lock(folder: Path) -> Iterator[None]:
    """Hold the lock of the cache `folder` (created with its parents if missing)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "ab") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
