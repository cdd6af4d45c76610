"""The layering rule: importer/ imports nothing from service/, onnx, sockets
or subprocesses, and only importer/source.py touches the file system; the
service never imports onnx. (ruff's banned-api rule enforces the same on every
lint run; this test proves the rule holds on the tree as committed.)"""

from __future__ import annotations

import ast
from pathlib import Path

from support.paths import REPO

BANNED_IN_IMPORTER = {"service", "onnx", "socket", "subprocess", "multiprocessing", "fastapi", "starlette", "http", "urllib"}
FILE_SYSTEM_CALLS = {"open", "mmap", "realpath", "stat", "fstat", "listdir", "scandir", "exists", "isfile"}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_importer_imports_nothing_it_must_not() -> None:
    for path in sorted((REPO / "importer").rglob("*.py")):
        assert not _imports(path) & BANNED_IN_IMPORTER, path


def test_only_the_source_module_touches_the_file_system() -> None:
    for path in sorted((REPO / "importer").rglob("*.py")):
        if path.name == "source.py":
            continue
        tree = ast.parse(path.read_text())
        calls = {
            node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
        }
        assert not calls & FILE_SYSTEM_CALLS, f"{path.name} calls {calls & FILE_SYSTEM_CALLS}"


def test_service_never_imports_onnx() -> None:
    for path in sorted((REPO / "service").rglob("*.py")):
        assert "onnx" not in _imports(path), path
