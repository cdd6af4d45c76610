"""The test hooks an import request may carry (`ImportHooks`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ImportHooks:
    """Test hooks of one import (refused by the HTTP layer unless test hooks are on)."""

    sleep: float = 0.0  # the worker waits this long before reading
    spin: bool = False  # ... burning CPU instead of sleeping
    pause: float = 0.0  # wait between the worker's answer and the commit (to swap links under an import)
    hold_uploaded: float = 0.0  # wait between the content's upload and its record (to kill a replica mid-commit)
