"""The product holds no test hook (issue 55).

What the tests inject (a held or spinning worker, a pause before the commit,
a hold between a content's upload and its record, forbidden actions or a
probe's code in a walled worker) is test-only code, tests/support/faults.py
and tests/support/fault_worker.py, put in through the service's generic
seams: `create_app(sandbox=..., steps=...)`, `Sandbox(worker="module:function")`
and the app factory a front end serves. Here, over every file under service/:
no `exec` or `eval` (a worker that runs a string from its job is a door,
whoever is meant to use it), no identifier naming a test (`test_...`), no
X-Test-* header, no test-hook setting or variable.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from support.paths import REPO

SERVICE = REPO / "service"
FORBIDDEN_TEXT = ("x-test", "test hook", "test_hooks", "onnx_service_test", "onnx_test", "debug-worker-sleep", "debug_worker_sleep")


def _python_files() -> list[Path]:
    return sorted(SERVICE.rglob("*.py"))


def _identifiers(tree: ast.AST) -> Iterator[tuple[int, str]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            yield node.lineno, node.id
        elif isinstance(node, ast.Attribute):
            yield node.lineno, node.attr
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield node.lineno, node.name
        elif isinstance(node, ast.arg | ast.keyword) and node.arg is not None:  # a parameter, a keyword argument
            yield getattr(node, "lineno", 0), node.arg
        elif isinstance(node, ast.alias):
            yield node.lineno, node.asname or node.name


def test_no_exec_or_eval_in_the_service() -> None:
    found = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("exec", "eval", "compile"):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.func.id}(")
    assert not found, found


def test_no_identifier_names_a_test() -> None:
    found = []
    for path in _python_files():
        for line, name in _identifiers(ast.parse(path.read_text(), str(path))):
            if "test_" in name.lower() or name.lower().startswith("test"):
                found.append(f"{path.relative_to(REPO)}:{line}: {name}")
    assert not found, found


def test_no_test_header_setting_or_variable_in_any_file() -> None:
    """Every file the package ships (Python, the explorer's scripts and pages)."""
    found = []
    for path in sorted(p for p in SERVICE.rglob("*") if p.is_file() and p.suffix in (".py", ".js", ".html", ".css", ".json", ".toml")):
        text = path.read_text(errors="replace").lower()
        found += [f"{path.relative_to(REPO)}: {word!r}" for word in FORBIDDEN_TEXT if word in text]
    assert not found, found


def test_the_check_sees_what_it_looks_for() -> None:
    """The checks above on a module that breaks each."""
    hooked = ast.parse('def run(job):\n    if job.test_code:\n        exec(job.test_code)\n    sleep = headers["X-Test-Worker-Sleep"]\n')
    names = [name for _, name in _identifiers(hooked)]
    assert "test_code" in names
    assert any(isinstance(node, ast.Call) and getattr(node.func, "id", "") == "exec" for node in ast.walk(hooked))
    assert "x-test" in ast.unparse(hooked).lower()
