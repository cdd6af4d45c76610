"""One measured process: import one package, then load one workload with it.

Usage: python bench/probe.py LOADER WORKLOAD, where LOADER is `importer`,
`onnx`, `onnx+checker` or `onnx_ir` (each with `-nothing`: import the package
and load nothing, the start-up baseline), and WORKLOAD is a model path or a
file listing model paths (one process loads them all). bench/run.py runs it
in fresh processes and reads wall time and peak RSS from outside.

Every loader leaves the way `python -m importer` and the service's workers
do: once its output is flushed, with `os._exit`, without tearing down the
heap (for onnx that teardown is a few milliseconds of C++ frees; for a
resolved graph it was most of a second). Leaving the same way for all keeps
the comparison even.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _paths(workload: str) -> list[str]:
    if workload.endswith(".txt"):
        return [line for line in Path(workload).read_text().splitlines() if line]
    return [workload]


def main() -> None:
    loader, workload = sys.argv[1], sys.argv[2]
    nothing = loader.endswith("-nothing")
    loader = loader.removesuffix("-nothing")
    if loader == "importer":
        from importer import BUILD, load_model

        expected = os.environ.get("IMPORTER_EXPECT_BUILD")
        if expected and expected != BUILD:
            raise SystemExit(f"expected the {expected} build of the importer, found the {BUILD} one")
        if not nothing:
            for path in _paths(workload):
                load_model(path).close()
    elif loader in ("onnx", "onnx+checker"):
        import onnx
        import onnx.checker

        if not nothing:
            for path in _paths(workload):
                model = onnx.load(path)
                if loader == "onnx+checker":
                    onnx.checker.check_model(model)
    elif loader == "onnx_ir":
        import onnx_ir

        if not nothing:
            for path in _paths(workload):
                onnx_ir.load(path)
    else:
        raise SystemExit(f"unknown loader {loader}")


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
