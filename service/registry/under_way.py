"""The validations under way, on disk, so that one whose process died still gets a verdict: `UnderWay`.

Each validation writes a marker (the version, and its process's pid and
start time from /proc) before it starts, and removes it once its verdict is
written or kept. `orphans()` takes the markers of processes that are gone
(killed, crashed: their shutdown could not keep a verdict), so the hook keeps
the verdict `incomplete` for them. Every front end of a service shares the
folder (the store's local root), on one machine: a pid with its start time
names one process.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def _started(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), or None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return stat.rpartition(")")[2].split()[19]  # field 22, counted after the command's closing parenthesis


class UnderWay:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.pid = os.getpid()
        self.started = _started(self.pid)

    def begin(self, name: str, version: str) -> Path:
        digest = hashlib.sha256(f"{name}\0{version}".encode()).hexdigest()[:32]
        path = self.folder / f"{digest}.{self.pid}.{os.urandom(4).hex()}.json"
        path.write_text(json.dumps({"name": name, "version": version, "pid": self.pid, "started": self.started}))
        return path

    @staticmethod
    def end(path: Path) -> None:
        path.unlink(missing_ok=True)

    def orphans(self) -> list[tuple[str, str]]:
        """The versions whose validating process is gone (their markers removed)."""
        found = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                marker = json.loads(path.read_text())
            except (FileNotFoundError, ValueError):
                continue  # removed meanwhile, or being written
            if _started(int(marker["pid"])) == marker["started"]:
                continue  # its process still runs
            try:
                path.unlink()
            except FileNotFoundError:
                continue  # another front end took it
            found.append((str(marker["name"]), str(marker["version"])))
        return found
