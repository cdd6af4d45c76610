"""What every message reader needs: the buffer, its owner and the limits.

Owns `ReadContext` and the nesting check shared by all readers.
"""

from __future__ import annotations

from dataclasses import dataclass

from importer.data_owner import DataOwner
from importer.errors import malformed
from importer.limits import Limits


@dataclass(slots=True)
class ReadContext:
    buf: memoryview
    owner: DataOwner
    limits: Limits


def check_nesting(ctx: ReadContext, depth: int) -> None:
    """Refuse a message nested deeper than `Limits.max_nesting` levels."""
    if depth > ctx.limits.max_nesting:
        raise malformed(f"messages nested deeper than max_nesting={ctx.limits.max_nesting} levels", None)
