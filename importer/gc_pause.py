"""Pausing Python's cyclic garbage collector while a model is imported.

Owns `gc_paused`. Importing creates hundreds of thousands of small container
objects and no garbage; left on, the collector walks them again and again
(more than half the import time of a 200,000-node model). It is switched off
for the duration of one import and restored to its previous state after, so a
caller that disabled it keeps it disabled. The pause is process-wide: another
thread allocating meanwhile is not collected until the import ends.

Re-enabling alone would make the next young collection scan every object the
import created (0.3 s for 200,000 nodes). Instead, `gc.freeze()` followed by
`gc.unfreeze()` moves them straight into the oldest generation, where they
wait for the next full collection like any long-lived object. That trick
would also unfreeze objects a host application froze itself, so it is skipped
when the permanent generation is not empty.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if was_enabled:
            gc.enable()
