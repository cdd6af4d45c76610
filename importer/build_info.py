"""Which build of the importer is running: `BUILD` is "compiled" when its hot
modules were loaded from mypyc's extension modules, "pure" when from Python
sources, and "mixed" when some were and some were not (a tree whose compiled
modules are half removed or half built: rebuild it). Never compiled itself."""

from __future__ import annotations

import importlib
from importlib.machinery import EXTENSION_SUFFIXES

HOT_MODULES = ("importer.wire", "importer.read_model", "importer.read_tensor", "importer.resolve")


def compiled_modules() -> dict[str, bool]:
    """Each hot module -> whether it was loaded from an extension module."""
    return {name: str(importlib.import_module(name).__file__ or "").endswith(tuple(EXTENSION_SUFFIXES)) for name in HOT_MODULES}


def _build() -> str:
    compiled = set(compiled_modules().values())
    return "mixed" if len(compiled) > 1 else "compiled" if compiled == {True} else "pure"


BUILD: str = _build()
