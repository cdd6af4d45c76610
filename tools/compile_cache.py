"""A content-addressed cache of the importer's compiled modules, for the builds
that ask for one: IMPORTER_COMPILE_CACHE names its folder (unset: no cache,
every compiled build compiles).

mypyc's analysis and gcc take about a minute of CPU for each compiled build.
An entry's key is a digest of everything that compilation reads: the compiled
sources, setup.py, this backend's files, pyproject.toml (mypy's settings), the
Python (version, ABI, platform), mypy's and numpy's versions in the build
environment, and the compiler's environment variables. A build whose key is
stored copies its modules instead of compiling; one that is not compiles and
stores them, whole or not at all (written beside, then renamed). A build
holds its key's lock from the look-up to the store or the copy, so a second build of the
same sources waits for the first and copies. The newest KEPT entries stay.

tools/dev.sh points it at .cache/compiled-importer (the editable install and
the test wheels then share one compilation); the Dockerfile at a cache mount
(a change outside importer/ rebuilds the image without compiling).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import IO

VARIABLE = "IMPORTER_COMPILE_CACHE"
KEPT = 4
COMPILER_VARIABLES = ("CC", "CFLAGS", "CPPFLAGS", "LDFLAGS", "LDSHARED", "ARCHFLAGS")
KEY_FILES = ("setup.py", "pyproject.toml", "tools/build_backend.py", "tools/compile_cache.py")
MANIFEST = "modules.json"


def compile_key(sources: list[str], root: Path = Path()) -> str:
    """The digest of what a compiled build of `sources` reads."""
    digest = hashlib.sha256()

    def add(label: str, value: bytes) -> None:
        digest.update(f"{label}\0{len(value)}\0".encode() + value)

    for name in [*KEY_FILES, *sources]:
        add(name, (root / name).read_bytes())
    add("python", f"{sys.version}|{sysconfig.get_config_var('SOABI')}|{sys.platform}|{platform.machine()}".encode())
    for package in ("mypy", "numpy"):
        add(package, importlib.metadata.version(package).encode())
    for name in sorted(name for name in os.environ if name in COMPILER_VARIABLES or name.startswith("MYPYC_")):
        add(name, os.environ[name].encode())
    return digest.hexdigest()


class CompileCache:
    """One key's entry in the cache folder: look it up under its lock, then copy or store."""

    def __init__(self, folder: Path, key: str) -> None:
        self.folder = folder
        self.entry = folder / key
        self.lock: IO[bytes] | None = None

    @classmethod
    def from_environment(cls, sources: list[str]) -> CompileCache | None:
        folder = os.environ.get(VARIABLE)
        return cls(Path(folder).resolve(), compile_key(sources)) if folder else None

    def claim(self) -> bool:
        """Take the key's lock (until `release`, or this process's end) and say whether its modules are stored."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self.lock = open(self.entry.with_suffix(".lock"), "wb")  # noqa: SIM115 - closed by release
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        if not (self.entry / MANIFEST).is_file():
            return False
        os.utime(self.entry)  # recently used: kept longest
        return True

    def release(self) -> None:
        if self.lock is not None:
            self.lock.close()  # and with it the lock
            self.lock = None

    def module_names(self) -> list[str]:
        names: list[str] = json.loads((self.entry / MANIFEST).read_text())
        return names

    def copy(self, name: str, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(self.entry / name, target)

    def store(self, built: dict[str, Path]) -> None:
        """Keep the modules just built (extension name -> file), then drop all but the newest KEPT entries."""
        partial = self.entry.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for name, path in built.items():
            shutil.copyfile(path, partial / name)
        (partial / MANIFEST).write_text(json.dumps(sorted(built)))
        shutil.rmtree(self.entry, ignore_errors=True)
        partial.rename(self.entry)
        print(f"compile cache: {len(built)} modules stored as {self.entry.name[:12]}", file=sys.stderr)
        entries = sorted((path for path in self.folder.iterdir() if (path / MANIFEST).is_file()), key=lambda path: path.stat().st_mtime)
        for old in entries[:-KEPT]:
            shutil.rmtree(old, ignore_errors=True)
