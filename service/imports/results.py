"""What an import answers: `Imported`, and the test hooks a request may carry (`ImportHooks`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Imported:
    model_id: str
    created: bool  # new for this tenant (201), or held already (200)
    summary: bytes  # the stored summary, under the name this request gave the model (empty for a graph render)


@dataclass(frozen=True, slots=True)
class ImportHooks:
    """Test hooks of one import (refused by the HTTP layer unless test hooks are on)."""

    sleep: float = 0.0  # the worker waits this long before reading
    spin: bool = False  # ... burning CPU instead of sleeping
    pause: float = 0.0  # wait between the worker's answer and the commit (to swap links under an import)
    hold_uploaded: float = 0.0  # wait between the content's upload and its record (to kill a replica mid-commit)
