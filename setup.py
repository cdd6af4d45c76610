"""The importer's extension modules: compiled with mypyc when tools/build_backend.py chooses
the compiled build (IMPORTER_BUILD), none for the pure one. pyproject.toml holds everything else."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from setuptools import setup


def extensions() -> list[Any]:  # setuptools' Extensions (mypyc's are setuptools' or distutils')
    """mypyc's modules for importer/ (one shared library, importer/_native__mypyc), or none."""
    sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
    from build_backend import GROUP, chosen_build, compiled_sources, requirements_only

    if chosen_build() != "compiled" or requirements_only.get():
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as error:
        raise SystemExit(f"IMPORTER_BUILD=compiled needs mypyc (mypy) in the build environment: {error}") from error
    # mypy's settings are pyproject.toml's [tool.mypy] (strict); the paths named here replace its
    # `files`; its cache stays in build/, beside mypyc's C, away from the checkout's .mypy_cache.
    options = ["--config-file", "pyproject.toml", "--cache-dir", "build/mypy-cache"]
    return mypycify([*options, *compiled_sources()], opt_level="3", group_name=GROUP)


setup(ext_modules=extensions())
