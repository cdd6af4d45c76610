"""Places that processes share, kept as Linux open-file-description locks
(`F_OFD_SETLK`, never the waiting kind), which the kernel drops when a process
dies: a killed process never keeps a place.

Every user of a folder holds one byte of its `members` file, its index; in a
lock file, the places it holds are the first bytes of its own region, one lock
on its own open file description. A total is the length of the locks another
description sees (`F_OFD_GETLK`): a few calls per process holding places,
however many places there are. Owns `Membership`, `SharedCount` (take a place
within a limit, release it, the total) and `Marks` (a byte marked, such as a
waiter's arrival time, and whether another mark is before it).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from struct import Struct

_FLOCK = Struct("hhqqi0q")  # struct flock, native layout: type, whence, start, length, pid (0 for OFD locks)
MEMBERS = 1 << 16  # users of one folder at once
REGION = 1 << 40  # one member's bytes: more places than it ever holds
END = MEMBERS * REGION


def _open(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _lock(fd: int, kind: int, start: int, length: int = 1) -> bool:
    """Lock (F_WRLCK) or unlock (F_UNLCK) the `length` bytes at `start`; False if another description holds one."""
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, _FLOCK.pack(kind, os.SEEK_SET, start, length, 0))
    except BlockingIOError:
        return False
    return True


def _a_lock_in(probe: int, start: int, stop: int) -> tuple[int, int] | None:
    """A lock of another description meeting [start, stop), clipped to it."""
    answer = fcntl.fcntl(probe, fcntl.F_OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, start, stop - start, 0))
    kind, _, lock_start, lock_length, _ = _FLOCK.unpack(answer)
    return None if kind == fcntl.F_UNLCK else (max(start, lock_start), min(stop, lock_start + lock_length))


class Membership:
    """This user's index among the folder's live users (the first free byte of `members`)."""

    def __init__(self, folder: Path) -> None:
        self.fd = _open(folder / "members")
        self.index = next((index for index in range(MEMBERS) if _lock(self.fd, fcntl.F_WRLCK, index)), -1)
        if self.index < 0:
            os.close(self.fd)
            raise OSError(f"{MEMBERS} users of {folder} already")

    def close(self) -> None:
        os.close(self.fd)


class SharedCount:
    """The places every member holds in one lock file."""

    def __init__(self, path: Path, member: int) -> None:
        self.path = path
        self.base = member * REGION
        self.held = 0  # by this member: the bytes [base, base + held), one lock
        self.own = _open(path)
        self.probe = _open(path)  # locks nothing: sees every member's locks, this one's too

    def total(self) -> int:
        found, gaps = 0, [(0, END)]
        while gaps:  # any lock found splits its gap in two: 2 calls per lock, plus 1
            start, stop = gaps.pop()
            lock = _a_lock_in(self.probe, start, stop) if stop > start else None
            if lock is not None:
                found += lock[1] - lock[0]
                gaps += [(start, lock[0]), (lock[1], stop)]
        return found

    def take(self, limit: int, places: int = 1) -> bool:
        """`places` more (one, or units of a quantity such as memory) if that makes at most `limit`:
        taken, then counted, so never more than `limit`, but two members taking the last ones at
        once may both be refused."""
        if not _lock(self.own, fcntl.F_WRLCK, self.base + self.held, places):  # its own region: nobody else locks there
            raise OSError(f"a byte of member {self.base // REGION}'s region in {self.path} is locked by another")
        self.held += places
        if self.total() <= limit:
            return True
        self.release(places)
        return False

    def close(self) -> None:
        os.close(self.own)
        os.close(self.probe)

    def release(self, places: int = 1) -> None:
        self.held -= places
        _lock(self.own, fcntl.F_UNLCK, self.base + self.held, places)


class Marks:
    """Bytes that members mark in one lock file, one at a time each."""

    def __init__(self, path: Path) -> None:
        self.own = _open(path)
        self.probe = _open(path)

    def mark(self, offset: int) -> int:
        """Mark the first byte from `offset` on that no other member marked; the byte."""
        while not _lock(self.own, fcntl.F_WRLCK, offset):
            offset += 1
        return offset

    def unmark(self, offset: int) -> None:
        _lock(self.own, fcntl.F_UNLCK, offset)

    def any_before(self, offset: int) -> bool:
        return offset > 0 and _a_lock_in(self.probe, 0, offset) is not None

    def close(self) -> None:
        os.close(self.own)
        os.close(self.probe)
