"""A registry version's artifacts held in memory, as a `service.registry.folders.ArtifactFolder`: `MemoryFolder`."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from service.registry.folders import ObjectMissing
from service.registry.mlflow_api import Fetched


class MemoryFolder:
    """A version's artifacts, by path; every download asked is noted."""

    where = "memory"

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.downloads: list[str] = []

    async def listing(self) -> list[dict[str, Any]]:
        return [{"path": name, "is_dir": False, "file_size": len(data)} for name, data in self.files.items()]

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched:
        self.downloads.append(path)
        if path not in self.files:
            raise ObjectMissing(f"no {path!r}")
        data = self.files[path]
        target.write_bytes(data)
        return Fetched(len(data), hashlib.sha256(data).hexdigest())
