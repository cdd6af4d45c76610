"""Values made once for a key they never change under, bounded by a count.

Owns `Memo`: `get(key, make)` gives the value kept for `key`, or makes and
keeps it; past `most` keys it starts afresh (cleared whole: what is asked
again is made again, and a burst of new keys costs no bookkeeping per hit).
For what a stored model never changes: a parsed record of one version of
its file, a catalogue's lookups, a tensor's fixed headers.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Memo(Generic[K, V]):
    def __init__(self, most: int) -> None:
        self.most = most
        self.kept: dict[K, V] = {}

    def find(self, key: K) -> V | None:
        """The value kept for `key`, or None (for a value made elsewhere, as by an await)."""
        return self.kept.get(key)

    def get(self, key: K, make: Callable[[], V]) -> V:
        found = self.kept.get(key)
        if found is None:
            if len(self.kept) >= self.most:
                self.kept.clear()
            found = self.kept[key] = make()
        return found
