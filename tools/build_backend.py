"""The project's PEP 517 backend: setuptools', choosing the importer's build from IMPORTER_BUILD.

IMPORTER_BUILD=compiled (mypyc; fails when no C compiler works), pure (no
compilation), or auto (the default: compiled where a C compiler works, else
pure). Only a compiled build asks for mypy (which ships mypyc) and numpy (its
types) in the build environment; an editable build first removes compiled
modules left in importer/ by an earlier one. setup.py compiles what
`compiled_sources` lists.
"""

from __future__ import annotations

import contextvars
import functools
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
import warnings
from collections.abc import Callable
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import ParamSpec, TypeVar

from setuptools import build_meta
from setuptools.build_meta import build_sdist, build_wheel, get_requires_for_build_sdist

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
    "prepare_metadata_for_build_editable",
    "prepare_metadata_for_build_wheel",
]

P = ParamSpec("P")
R = TypeVar("R")
BUILDS = ("compiled", "pure", "auto")
# What a compiled build needs, pinned for reproducible builds: mypyc ships with
# mypy, and importer/ is type-checked against numpy's own annotations.
COMPILE_REQUIRES = ["mypy==2.4.1", "numpy==2.4.6"]
PACKAGE = "importer"
NOT_COMPILED = {"__init__.py", "__main__.py", "build_info.py"}  # imported first, run as a script, or inspects the build
GROUP = "importer._native"  # mypyc's shared library: importer/_native__mypyc.<suffix>
ConfigSettings = dict[str, str | list[str] | None] | None
# True while setuptools runs setup.py only for its requirements (mypyc is not installed yet) or
# its metadata (which no extension module changes): setup.py then neither compiles nor looks up.
metadata_only = contextvars.ContextVar("metadata_only", default=False)


def compiler_problem() -> str | None:
    """Why no C extension can be built here (None: a C compiler compiles against Python.h)."""
    compiler = shlex.split(os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc")
    include = sysconfig.get_paths()["include"]
    with tempfile.TemporaryDirectory() as folder:
        source = Path(folder, "probe.c")
        source.write_text("#include <Python.h>\nint main(void) { return 0; }\n")
        try:
            result = subprocess.run(
                [*compiler, "-I", include, "-c", str(source), "-o", str(Path(folder, "probe.o"))], capture_output=True, timeout=120
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            return f"no working C compiler ({shlex.join(compiler)}: {error})"
        if result.returncode != 0:
            why = result.stderr.decode(errors="replace").strip()[:300]
            return f"{shlex.join(compiler)} cannot compile against {include}/Python.h: {why}"
    return None


@functools.cache
def decide() -> tuple[str, str]:
    """compiled or pure, from IMPORTER_BUILD (see the module's docstring), and why pure under auto."""
    requested = os.environ.get("IMPORTER_BUILD", "").strip().lower() or "auto"
    if requested not in BUILDS:
        raise SystemExit(f"IMPORTER_BUILD={requested!r}: use one of {', '.join(BUILDS)}")
    if requested == "pure":
        return "pure", ""
    problem = compiler_problem()
    if problem is None:
        return "compiled", ""
    if requested == "compiled":
        raise SystemExit(f"IMPORTER_BUILD=compiled: {problem}; install a C compiler and Python's headers, or use IMPORTER_BUILD=pure")
    return "pure", f"note: IMPORTER_BUILD=auto: building the pure-Python importer, as {problem}"


def chosen_build() -> str:
    return decide()[0]


def without_extensions(hook: Callable[P, R], *arguments: P.args, **keywords: P.kwargs) -> R:
    """A setuptools hook run with setup.py's extension modules left out (metadata_only)."""
    token = metadata_only.set(True)
    try:
        return hook(*arguments, **keywords)
    finally:
        metadata_only.reset(token)


def requirements(ask: Callable[[ConfigSettings], list[str]], config_settings: ConfigSettings) -> list[str]:
    """setuptools' requirements (setup.py run without compiling), and mypyc's for a compiled build."""
    build, note = decide()
    if note:
        print(note, file=sys.stderr)  # once per build: the frontend asks for requirements first
    return [*without_extensions(ask, config_settings), *(COMPILE_REQUIRES if build == "compiled" else [])]


def compiled_sources(root: Path = Path()) -> list[str]:
    """The importer's modules mypyc compiles, as paths relative to `root`."""
    return sorted(str(path.relative_to(root)) for path in (root / PACKAGE).glob("*.py") if path.name not in NOT_COMPILED)


def remove_compiled(root: Path = Path()) -> list[Path]:
    """Delete compiled modules from the source tree (an editable build leaves them there); the paths removed."""
    removed = [path for path in (root / PACKAGE).iterdir() if path.name.endswith(tuple(EXTENSION_SUFFIXES))]
    for path in removed:
        path.unlink()
    return removed


def get_requires_for_build_wheel(config_settings: ConfigSettings = None) -> list[str]:
    return requirements(build_meta.get_requires_for_build_wheel, config_settings)


def get_requires_for_build_editable(config_settings: ConfigSettings = None) -> list[str]:
    return requirements(build_meta.get_requires_for_build_editable, config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    return without_extensions(build_meta.prepare_metadata_for_build_wheel, metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory: str, config_settings: ConfigSettings = None) -> str:
    return without_extensions(build_meta.prepare_metadata_for_build_editable, metadata_directory, config_settings)


def build_editable(wheel_directory: str, config_settings: ConfigSettings = None, metadata_directory: str | None = None) -> str:
    """A compiled build writes fresh modules next to the sources; a pure one leaves none behind."""
    for path in remove_compiled():
        print(f"removed {path} (an earlier compiled build)", file=sys.stderr)
    with warnings.catch_warnings():
        # setuptools' banner on every editable install ("be careful with folders in your
        # working directory..."): `python -m service` from the checkout runs these very folders.
        warnings.filterwarnings("ignore", message="Editable installation")
        return build_meta.build_editable(wheel_directory, config_settings, metadata_directory)
