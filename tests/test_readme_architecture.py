"""The README's service architecture table is the one the docstrings give
(tools/architecture.py), so it names every module and cannot drift."""

from __future__ import annotations

import architecture  # tools/, on the path (conftest)


def test_the_readme_table_is_generated_from_the_docstrings() -> None:
    text = architecture.README.read_text(encoding="utf-8")
    assert architecture.readme_section(text) == architecture.service_table(), (
        "README.md's service architecture is stale: run `python tools/architecture.py --write`"
    )


def test_every_service_module_says_what_it_owns() -> None:
    for path in sorted((architecture.REPO / "service").rglob("*.py")):
        assert architecture.first_sentence(path), f"{path}: no docstring"
