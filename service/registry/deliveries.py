"""Which deliveries the MLflow hook has taken, shared by every front-end process: `Deliveries`.

A folder of marker files, one per delivery id (its SHA-256, so any id makes a
file name), each created with O_CREAT | O_EXCL: of all the processes given
the same delivery, exactly one creates its marker and validates. A marker
outlives the delivery's timestamp window (`signature.MAX_SKEW`): past that a
replay is refused as stale anyway, so `prune` removes markers older than
`KEEP_SECONDS`.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

from service.registry.signature import MAX_SKEW

KEEP_SECONDS = 4 * MAX_SKEW


class Deliveries:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def first(self, delivery_id: str) -> bool:
        """Mark `delivery_id` taken; False if it was already (by any process)."""
        name = hashlib.sha256(delivery_id.encode()).hexdigest()
        try:
            os.close(os.open(self.folder / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        except FileExistsError:
            return False
        return True

    def prune(self, now: float | None = None) -> int:
        """Remove markers older than KEEP_SECONDS; how many went."""
        cutoff = (now if now is not None else time.time()) - KEEP_SECONDS
        removed = 0
        for entry in os.scandir(self.folder):
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
                    removed += 1
            except FileNotFoundError:
                pass  # another process pruned it
        return removed
