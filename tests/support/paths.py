"""The repository's folders, as the tests see them."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
TOOLS = REPO / "tools"
CACHE = REPO / ".cache"
BACKEND_DATA = CACHE / "onnx-backend"
SUPPORT = TESTS / "support"
