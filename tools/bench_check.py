# What the operator check (importer.check_model) adds to an import, measured.
#
# This module owns the check's benchmark: for each workload, fresh processes
# that import the model (or every model of a list, in one process) with and
# without checking it, as bench/run.py measures imports, the median of RUNS
# net of start-up (the median of a process that imports the package and loads
# nothing); both the wall time around the process and its CPU time (user +
# system, from wait4: steadier on a shared machine). The schema table's
# loading is part of the checking process's time. Also the check alone, in
# process: the fastest of RUNS checks of a model already imported (no
# start-up, no teardown; the same for the import it is compared with).
#
# Workloads (bench/make_models.py makes them in .cache/bench):
#   nodes.onnx           200,000 nodes, 1/3 with an attribute, value_info for half
#   backend-models.txt   the ONNX backend test data, 2,033 models in one process
#
# Usage: bench_check.py [--runs N] [--cache DIR]
# Internal: bench_check.py --probe MODE WORKLOAD (MODE: nothing, import, check,
# inprocess) is one measured process.
from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = REPO / ".cache" / "bench"
WORKLOADS = ("nodes.onnx", "backend-models.txt")


def _paths(workload: str) -> list[str]:
    if workload.endswith(".txt"):
        return [line for line in Path(workload).read_text().splitlines() if line]
    return [workload]


def _probe(mode: str, workload: str, runs: int) -> None:
    from importer import check_model, load_model
    from importer.op_schemas import schema_table

    paths = _paths(workload)
    if mode in ("import", "check"):
        for path in paths:
            with load_model(path) as model:
                if mode == "check":
                    check_model(model)
    elif mode == "inprocess":
        schema_table()
        imports, checks = [], []
        for _ in range(runs):
            gc.collect()
            start = time.perf_counter()
            models = [load_model(path) for path in paths]
            imports.append(time.perf_counter() - start)
            start = time.perf_counter()
            for model in models:
                check_model(model)
            checks.append(time.perf_counter() - start)
            for model in models:
                model.close()
            del models
        print(f"{min(imports)} {min(checks)}")


def _process_seconds(mode: str, workload: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one probe process."""
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, __file__, "--probe", mode, str(workload)], cwd=REPO)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"the {mode} probe failed on {workload} (exit {process.returncode})")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description="What the operator check adds to an import.")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--probe", nargs=2, metavar=("MODE", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        _probe(args.probe[0], args.probe[1], args.runs)
        return
    for name in WORKLOADS:
        workload = args.cache / name
        if not workload.exists():
            print(f"{name}: missing (run bench/make_models.py)")
            continue
        samples: dict[str, list[tuple[float, float]]] = {"nothing": [], "import": [], "check": []}
        for _ in range(args.runs):
            for mode, seconds in samples.items():  # interleaved, so that drift hits all three alike
                seconds.append(_process_seconds(mode, workload))
        figures = []
        for clock, label in ((0, "wall"), (1, "CPU")):
            nothing, imported, checked = (statistics.median(s[clock] for s in samples[mode]) for mode in ("nothing", "import", "check"))
            net_import, net_check = imported - nothing, checked - nothing
            figures.append(
                f"{label}: import {net_import * 1000:.0f} ms, import+check {net_check * 1000:.0f} ms "
                f"(+{(net_check - net_import) / net_import:.1%}; start-up {nothing * 1000:.0f} ms)"
            )
        inprocess = subprocess.run(
            [sys.executable, __file__, "--runs", str(args.runs), "--probe", "inprocess", str(workload)],
            check=True,
            cwd=REPO,
            capture_output=True,
            text=True,
        ).stdout.split()
        import_only, check_only = float(inprocess[0]), float(inprocess[1])
        print(f"{name}, processes (median of {args.runs}, net of start-up): {'; '.join(figures)}")
        print(
            f"{name}, in process (fastest of {args.runs}): import {import_only * 1000:.0f} ms, "
            f"check {check_only * 1000:.1f} ms (+{check_only / import_only:.1%})"
        )


if __name__ == "__main__":
    main()
