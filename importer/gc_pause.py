"""Pausing Python's cyclic garbage collector while a model is imported.

Owns `pause_gc` and `resume_gc` (plain calls rather than a context manager:
they run once per import, and on a tiny model every microsecond shows).

Importing creates hundreds of thousands of small container objects and no
garbage; left on, the collector walks them again and again
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


def pause_gc() -> bool:
    """Stop the collector; return whether it was running (for `resume_gc`)."""
    was_enabled = gc.isenabled()
    gc.disable()
    return was_enabled


def resume_gc(was_enabled: bool) -> None:
    """Move what was allocated meanwhile to the oldest generation, unscanned,
    and restart the collector if it was running before."""
    if gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
    if was_enabled:
        gc.enable()
