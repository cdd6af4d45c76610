"""How a fuzz target starts atheris (shared by fuzz_model.py and fuzz_tensor.py).

libFuzzer's -fork mode re-runs argv[0] as a program, so tools/run_fuzz.sh
runs each target through a small runner script and names it in FUZZ_RUNNER.
atheris instruments Python bytecode, so the targets fuzz the pure build of
the importer (a compiled one would be fuzzed blind): tools/run_fuzz.sh puts
a pure copy first on the path and sets IMPORTER_EXPECT_BUILD, checked here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import atheris


def fuzz(test_one_input: Callable[[bytes], None]) -> None:
    import importer

    expected = os.environ.get("IMPORTER_EXPECT_BUILD")
    if expected and expected != importer.BUILD:
        raise SystemExit(f"the fuzz targets need the {expected} build of the importer, found {importer.BUILD} in {importer.__file__}")
    argv = [os.environ.get("FUZZ_RUNNER", sys.argv[0]), *sys.argv[1:]]
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()
