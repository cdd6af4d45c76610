"""How a fuzz target starts atheris (shared by fuzz_model.py and fuzz_tensor.py).

libFuzzer's -fork mode re-runs argv[0] as a program, so tools/run_fuzz.sh
runs each target through a small runner script and names it in FUZZ_RUNNER.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import atheris


def fuzz(test_one_input: Callable[[bytes], None]) -> None:
    argv = [os.environ.get("FUZZ_RUNNER", sys.argv[0]), *sys.argv[1:]]
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()
