"""The local cache of an object-storage store (`service.store.s3.local_cache`):
catalogues and graphs as files, filled once, bounded, least recently used out first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from service.store.s3.local_cache import LocalCache


def test_files_are_filled_once_and_the_least_recently_used_go_first(tmp_path: Path) -> None:
    cache = LocalCache(tmp_path / "cache", max_bytes=3000)
    cache.open()
    fills: list[str] = []

    def filler(name: str) -> Callable[[Path], None]:
        def fill(path: Path) -> None:
            fills.append(name)
            path.write_bytes(b"x" * 1000)

        return fill

    for name in ("a", "b", "c"):
        cache.get(name, filler(name))
        time.sleep(0.01)  # distinct last uses
    assert cache.get("a", filler("a")).read_bytes() == b"x" * 1000
    assert fills == ["a", "b", "c"]  # a hit fills nothing
    cache.get("d", filler("d"))
    kept = sorted(entry.name for entry in (tmp_path / "cache").iterdir())
    assert kept == ["a", "c", "d"]  # b was the least recently used
    assert sum(os.path.getsize(tmp_path / "cache" / name) for name in kept) <= 3000


def test_a_failed_fill_leaves_nothing(tmp_path: Path) -> None:
    cache = LocalCache(tmp_path / "cache", max_bytes=1 << 20)
    cache.open()

    def gone(path: Path) -> None:
        path.write_bytes(b"half")
        raise FileNotFoundError("the object is gone")

    with pytest.raises(FileNotFoundError):
        cache.get("x", gone)
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_front_end_starting_beside_others_leaves_their_fills_alone(tmp_path: Path) -> None:
    """A front end that replaces a dead one opens the cache its siblings are
    filling: their parts stay (their reads would fail as if the model were
    gone); a dead process's part, or one nobody wrote for an hour, goes."""
    folder = tmp_path / "cache"
    folder.mkdir()
    filling = folder / f"m-1-catalog.sqlite.part-{os.getpid()}-7"
    dead_child = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_child.wait()
    dead = folder / f"m-2-catalog.sqlite.part-{dead_child.pid}-7"
    stale = folder / f"m-3-catalog.sqlite.part-{os.getpid()}-8"
    for part in (filling, dead, stale):
        part.write_bytes(b"half")
    os.utime(stale, (time.time() - 7200, time.time() - 7200))
    LocalCache(folder, max_bytes=1 << 20).open()
    assert sorted(path.name for path in folder.iterdir()) == [filling.name]
