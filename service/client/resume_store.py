"""Where the client remembers its unfinished resumable uploads, so that a
process killed halfway and run again continues them.

Owns `ResumeStore`: one small JSON file per upload in a folder
(`$XDG_CACHE_HOME/onnx-import/uploads/`, else `~/.cache/onnx-import/uploads/`,
unless given), named by the SHA-256 of the upload's fingerprint (the
service's URL, the file's absolute path, size and mtime_ns, and the name or
location it is sent under) and holding the upload's URL. A file is written
whole under a temporary name and renamed into place; one that cannot be read
is as good as none (the upload starts anew). Nothing is written until an
upload is created, and an entry is forgotten once the import has answered.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path

from service.client._common import PathLike


def default_folder() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "onnx-import" / "uploads"


def fingerprint(service: str, path: Path, size: int, mtime_ns: int, name: str) -> str:
    """The key of one file's upload to one service under one name."""
    parts = {"service": service.rstrip("/"), "path": os.path.abspath(path), "size": size, "mtime_ns": mtime_ns, "name": name}
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


class ResumeStore:
    def __init__(self, folder: PathLike | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_folder()

    def _file(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> str | None:
        """The upload URL kept under `key`, or None."""
        try:
            kept = json.loads(self._file(key).read_text())
        except (OSError, ValueError):
            return None
        url = kept.get("upload") if isinstance(kept, dict) else None
        return url if isinstance(url, str) and url else None

    def put(self, key: str, url: str) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(prefix=f".{key}.", dir=self.folder)
        try:
            with os.fdopen(fd, "w") as out:
                json.dump({"upload": url}, out)
            os.replace(temporary, self._file(key))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def forget(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._file(key).unlink()
