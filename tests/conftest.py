"""Shared fixtures: the repository paths, the reference tools, the backend data.

The ONNX backend test data is generated once per machine into the ignored
cache `.cache/onnx-backend` by `tools/gen_backend_data.py` (idempotent).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
TOOLS = REPO / "tools"
CACHE = REPO / ".cache"
BACKEND_DATA = CACHE / "onnx-backend"

if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))

SWEEP_REPORT: list[str] = []


@pytest.fixture(scope="session")
def backend_manifest() -> dict[str, Any]:
    """The manifest of the generated backend test data (see gen_backend_data.py)."""
    import gen_backend_data

    return gen_backend_data.build(BACKEND_DATA)


@pytest.fixture(scope="session")
def backend_dir(backend_manifest: dict[str, Any]) -> Path:
    return BACKEND_DATA


@pytest.fixture()
def report() -> Iterator[list[str]]:
    """Lines a test wants shown in the run's closing summary (counts, timings)."""
    lines: list[str] = []
    yield lines
    SWEEP_REPORT.extend(lines)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if SWEEP_REPORT:
        terminalreporter.section("figures")
        for line in SWEEP_REPORT:
            terminalreporter.write_line(line)
