"""The project's wheels as the Dockerfile builds them: from a copy of exactly
the files its builder stage copies, by `pip wheel` (the project's own backend,
tools/build_backend.py, in an isolated build environment), with
IMPORTER_BUILD. `Wheels` builds each kind once for each content of those
files (conftest's `wheels` fixture: .cache/wheels/<context_digest()>/), by
whichever process asks first: tools/prebuild_wheels.py, which
`bash tools/dev.sh test` starts beside its setup, or a test process;
tests/e2e/test_builds.py and tests/e2e/test_packaged_service.py share them. A
compiled wheel takes about a minute on 2 cores.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

from cache_lock import cache_lock

from support.deploy_files import read_dockerfile
from support.paths import CACHE, REPO

BUILD_SECONDS = 900
WHEELS = CACHE / "wheels"
NOT_COPIED = ("__pycache__", "*.pyc", "*.so", "*.pyd")  # the checkout's own byproducts


def copied_sources() -> list[tuple[str, str]]:
    """The builder stage's `COPY` sources and their target folder, in order."""
    return [
        (name, target)
        for instruction in read_dockerfile().stage("builder").all("COPY")
        for *sources, target in [instruction.arguments.split()]
        for name in sources
    ]


def context_digest() -> str:
    """What a wheel is made of: the names and bytes of the files copied, and the interpreter and platform that build it."""
    digest = hashlib.sha256(f"{sys.implementation.cache_tag} {sysconfig.get_platform()}\0".encode())
    for name, target in copied_sources():
        origin = REPO / name
        for path in files_copied(origin) if origin.is_dir() else [origin]:
            digest.update(f"{target} {path.relative_to(REPO).as_posix()}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def files_copied(folder: Path) -> list[Path]:
    """The files a folder `COPY` takes from `folder` (the checkout's byproducts left out), in a stable order:
    what `copy_build_context` copies and `context_digest` reads."""
    ignored = shutil.ignore_patterns(*NOT_COPIED)
    files = []
    for parent, folders, names in os.walk(folder):
        folders[:] = sorted(set(folders) - ignored(parent, folders))
        files += [Path(parent, name) for name in sorted(set(names) - ignored(parent, names))]
    return files


def copy_build_context(destination: Path) -> Path:
    """What the Dockerfile's builder stage copies (`COPY a b dir/`: files into
    dir/, a folder's contents into dir/), copied into `destination`."""
    for name, target in copied_sources():
        origin = REPO / name
        for path in files_copied(origin) if origin.is_dir() else [origin]:
            copy = destination / target / (path.relative_to(origin) if origin.is_dir() else path.name)
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, copy)
    return destination


def pip_wheel(source: Path, wheels: Path, environment: dict[str, str], *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "wheel", "--no-deps", *options, "--wheel-dir", str(wheels)]
    folder = source if source.is_dir() else source.parent  # a source tree, or an sdist
    return subprocess.run([*command, str(source)], capture_output=True, text=True, timeout=BUILD_SECONDS, env=environment, cwd=folder)


def build_environment(build: str, **extra: str) -> dict[str, str]:
    """This process's environment, with IMPORTER_BUILD set and nothing that would put this checkout's importer on a path."""
    environment = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    return environment | {"IMPORTER_BUILD": build} | extra


class Wheels:
    """One wheel per IMPORTER_BUILD value, built on first request into `root`
    (by default, the folder of today's build context under .cache/wheels)."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or WHEELS / context_digest()
        self.built: dict[str, Path] = {}
        self.seconds: dict[str, float] = {}

    def __call__(self, build: str) -> Path:
        if build not in self.built:
            folder = self.root / build
            with cache_lock(folder):  # another test process of this run may be building it
                if not (done := folder / "seconds").exists():
                    shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
                    source = copy_build_context(folder / "src")
                    started = time.monotonic()
                    result = pip_wheel(source, folder / "wheels", build_environment(build))
                    seconds = time.monotonic() - started
                    failed = f"IMPORTER_BUILD={build} pip wheel failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
                    assert result.returncode == 0, failed
                    shutil.rmtree(source)  # the copy and mypyc's C: only the wheel is kept
                    done.write_text(f"{seconds:.1f}")  # how long it took: the build's figure, and the mark that it is whole
            self.seconds[build] = float(done.read_text())
            (self.built[build],) = (folder / "wheels").glob("onnx_import_service-*.whl")
        return self.built[build]
