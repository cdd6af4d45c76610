"""Pausing Python's cyclic garbage collector while a model is imported.

Owns `pause_gc` and `resume_gc` (plain calls rather than a context manager:
they run once per import, and on a tiny model every microsecond shows).

Importing creates hundreds of thousands of small container objects and no
garbage; left on, the collector walks them again and again (more than half
the import time of a 200,000-node model). It is switched off for one import
and restored to its previous state after, so a caller that disabled it keeps
it disabled. The pause is process-wide: another thread allocating meanwhile
is not collected until the import ends.

Re-enabling alone would make the next young collection scan every object the
import created (0.3 s for 200,000 nodes). Instead, `gc.freeze()` followed by
`gc.unfreeze()` moves them straight into the oldest generation. The resolved
graph holds no reference cycle (importer/graph.py), so a dropped model is
freed by reference counting and leaves nothing there for the collector. But
CPython does not count objects moved that way toward its next full
collection, so cyclic garbage that another thread made during an import would
wait longer than usual: as a safety net this module keeps the count itself and
runs a full collection at the start of an import once the objects moved since
the last one outnumber those that survived it, and at least a million (the
amortized rule of CPython, with a floor that a process importing thousands of
small models, which frees them as it goes, reaches only every few thousand
imports). The trick would also unfreeze objects a host application froze
itself, so it is skipped (plain re-enabling) once the permanent generation is
found not empty, and from then on for the life of the process: CPython counts
that generation by walking it (`gc.get_freeze_count`, 9 ms for a million
frozen objects), which a host that froze its start-up (as the service's front
end does) would otherwise pay on every import. An empty generation costs
nothing to count.
"""

from __future__ import annotations

import gc
from typing import ClassVar, Final

_MIN_OBJECTS_BEFORE_COLLECTING: Final = 1_000_000


class _Accounts:
    """What the collector was not told: objects moved since its last full run."""

    moved_since_full_collection: ClassVar[int] = 0
    survivors_of_last_full_collection: ClassVar[int] = 0
    host_froze_objects: ClassVar[bool] = False


def pause_gc() -> bool:
    """Stop the collector (after a full collection, when one is owed and the
    caller has not switched the collector off); return whether it was
    running, for `resume_gc`."""
    was_enabled = gc.isenabled()
    owed = max(_Accounts.survivors_of_last_full_collection, _MIN_OBJECTS_BEFORE_COLLECTING)
    if was_enabled and _Accounts.moved_since_full_collection > owed:
        gc.collect()
        _Accounts.moved_since_full_collection = 0
        _Accounts.survivors_of_last_full_collection = len(gc.get_objects())
    gc.disable()
    return was_enabled


def resume_gc(was_enabled: bool) -> None:
    """Move what was allocated meanwhile to the oldest generation, unscanned
    (and counted), unless the host froze objects, and restart the collector
    if it was running before."""
    if not _Accounts.host_froze_objects and gc.get_freeze_count() != 0:
        _Accounts.host_froze_objects = True
    if not _Accounts.host_froze_objects:
        _Accounts.moved_since_full_collection += gc.get_count()[0]
        gc.freeze()
        gc.unfreeze()
    if was_enabled:
        gc.enable()
