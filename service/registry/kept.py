"""Writes a registry did not take, kept on disk until it does, for both gates: `KeptWrites`, `Outcome`.

A kept write is a dataclass (`Keepable`) whose `key()` names what it writes
to: one JSON file per key in the gate's folder under the service's state (a
later write of the same key replaces it, unless `keep(..., replace=False)`),
written to a temporary name and renamed. A write is kept within the gate's
`max_bytes` (read back within the same bound: never a part of it) and while
fewer than `MAX_WAITING` wait; past either it is not kept, logged.
`drain` tries each again (the hook's background loop, in every front-end
process: a file is taken under a non-waiting `flock`, so one process writes
it) through the gate's `attempt`, which says what became of it (`Outcome`):
written, or dropped (refused for good: the file removed), kept (the service's
credentials, which can be fixed: tried again next time), or down (the
registry does not answer: kept, and the rest wait too). The MLflow gate's
kept writes are `service.registry.pending`'s, the OCI gate's
`service.registry.oci_pending`'s.
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import hashlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

log = logging.getLogger("service")

AUTH_REFUSALS = (401, 403)  # a registry refusing the service's credentials: a write is kept until they are fixed
MAX_WAITING = 1000  # kept writes of one gate


class Keepable(Protocol):
    __dataclass_fields__: ClassVar[dict[str, Any]]

    def key(self) -> str:
        """What the write is to: one kept write per key."""
        ...

    def described(self) -> str:
        """What the write is to, for the log."""
        ...


Write = TypeVar("Write", bound=Keepable)


class Outcome(enum.Enum):
    WRITTEN = "written"
    DROPPED = "dropped"  # refused for good: nothing to write it to any more
    KEPT = "kept"  # refused for the service's credentials: tried again next time
    DOWN = "down"  # the registry did not answer: kept, and the others wait too


class KeptWrites(Generic[Write]):
    def __init__(self, folder: Path, kind: type[Write], max_bytes: int, gate: str) -> None:
        self.folder = folder
        self.kind = kind
        self.max_bytes = max_bytes
        self.gate = gate
        folder.mkdir(parents=True, exist_ok=True)

    def _path(self, write: Write) -> Path:
        return self.folder / (hashlib.sha256(write.key().encode()).hexdigest() + ".json")

    def keep(self, write: Write, *, replace: bool = True) -> bool:
        """Keep `write` until `drain` writes it, in place of an earlier one of the same key
        (`replace=False`: unless there is one); False if it is not kept (logged: past a bound)."""
        path = self._path(write)
        if path.exists():
            if not replace:
                return True
        elif len(self.waiting()) >= MAX_WAITING:
            log.error("%s: %s is not kept: %d writes wait already", self.gate, write.described(), MAX_WAITING)
            return False
        data = json.dumps(asdict(write)).encode()
        if len(data) > self.max_bytes:
            log.error("%s: %s is not kept: %d bytes, more than %d", self.gate, write.described(), len(data), self.max_bytes)
            return False
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        with open(temporary, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        return True

    def waiting(self) -> list[Path]:
        return sorted(self.folder.glob("*.json"))

    async def drain(self, attempt: Callable[[Write], Awaitable[Outcome]]) -> int:
        """`attempt` every kept write (until one says the registry is down); how many were written."""
        written = 0
        for path in self.waiting():
            with _taken(path) as fd:
                if fd is None:
                    continue  # another process is writing it, or wrote it
                try:
                    write = self.kind(**json.loads(_read(fd, self.max_bytes)))
                except (ValueError, TypeError) as error:
                    log.error("%s: a kept write %s is unreadable (%s); dropped", self.gate, path.name, error)
                    path.unlink(missing_ok=True)
                    continue
                outcome = await attempt(write)
                if outcome is Outcome.DOWN:
                    return written
                if outcome is Outcome.KEPT:
                    continue
                written += outcome is Outcome.WRITTEN
                path.unlink(missing_ok=True)
        return written


def _read(fd: int, max_bytes: int) -> bytes:
    """The kept write's bytes (ValueError past `max_bytes`: never a part of it)."""
    with os.fdopen(os.dup(fd), "rb") as kept:
        data = kept.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ValueError(f"more than {max_bytes} bytes")
    return data


@contextlib.contextmanager
def _taken(path: Path) -> Iterator[int | None]:
    """`path` open and locked by this process, or None (gone, or locked elsewhere)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield None
            return
        if not os.path.exists(path) or os.fstat(fd).st_ino != os.stat(path).st_ino:
            yield None  # written and removed, or replaced, meanwhile
            return
        yield fd
    finally:
        os.close(fd)
