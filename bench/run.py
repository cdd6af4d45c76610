"""Runs the import benchmarks: our importer against onnx.load, side by side.

Every measurement is a fresh process (bench/probe.py) run RUNS times; wall
time is taken around the process and peak RSS from wait4's rusage. Time is
net of start-up: the median of a process that imports the same package and
loads nothing is subtracted. Peak RSS is reported as the operating system's
figure for the whole process (runtime included). Medians, then ratios
importer / reference, with the targets of issue 3.

Usage: python bench/run.py [--runs N] [--only NAME ...]
(first: python bench/make_models.py; BENCH_CACHE overrides .cache/bench for
both). onnx_ir is measured when installed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("BENCH_CACHE", REPO / ".cache" / "bench"))
PROBE = REPO / "bench" / "probe.py"


@dataclass(frozen=True)
class Workload:
    name: str
    path: Path
    reference: str  # the loader the target ratio is taken against
    time_target: float
    memory_target: float | None


WORKLOADS = [
    Workload("weights-inline (800 MB raw_data)", CACHE / "weights-inline.onnx", "onnx", 0.05, 0.10),
    Workload("weights-external (800 MB external)", CACHE / "weights-external.onnx", "onnx", 0.05, 0.10),
    Workload("nodes (200,000 nodes)", CACHE / "nodes.onnx", "onnx+checker", 1.0, None),
    Workload("backend data (2,033 models, one process)", CACHE / "backend-models.txt", "onnx", 1.5, None),
]


@dataclass
class Sample:
    seconds: float
    peak_mb: float


def measure(loader: str, workload: Path) -> Sample:
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, str(PROBE), loader, str(workload)], cwd=REPO)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{loader} failed on {workload} (exit {process.returncode})")
    return Sample(seconds, usage.ru_maxrss / 1024)


def median_of(loader: str, workload: Path, runs: int) -> Sample:
    samples = [measure(loader, workload) for _ in range(runs)]
    return Sample(statistics.median(s.seconds for s in samples), statistics.median(s.peak_mb for s in samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=None, help="workload name prefixes")
    args = parser.parse_args()
    loaders = ["importer", "onnx", "onnx+checker"] + (["onnx_ir"] if importlib.util.find_spec("onnx_ir") else [])
    baseline = {loader: median_of(f"{loader}-nothing", CACHE / "nodes.onnx", args.runs) for loader in loaders}
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.platform()}")
    print("start-up (import only): " + ", ".join(f"{k} {v.seconds * 1000:.0f} ms / {v.peak_mb:.0f} MB" for k, v in baseline.items()))
    print()
    print("| workload | loader | time (net) | peak RSS | time ratio | memory ratio | target |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for workload in WORKLOADS:
        if args.only and not any(workload.name.startswith(prefix) for prefix in args.only):
            continue
        results = {}
        for loader in loaders:
            if loader == "onnx+checker" and workload.reference != "onnx+checker":
                continue
            sample = median_of(loader, workload.path, args.runs)
            results[loader] = Sample(max(sample.seconds - baseline[loader].seconds, 0.0), sample.peak_mb)
        reference = results[workload.reference]
        for loader, sample in results.items():
            time_ratio = sample.seconds / reference.seconds if reference.seconds else float("nan")
            memory_ratio = sample.peak_mb / reference.peak_mb
            target = ""
            if loader == "importer":
                met = time_ratio <= workload.time_target and (workload.memory_target is None or memory_ratio <= workload.memory_target)
                memory = f", memory <= {workload.memory_target}" if workload.memory_target else ""
                target = f"time <= {workload.time_target}{memory} vs {workload.reference}: {'met' if met else 'MISSED'}"
            print(
                f"| {workload.name} | {loader} | {sample.seconds * 1000:.0f} ms | {sample.peak_mb:.0f} MB "
                f"| {time_ratio:.3f} | {memory_ratio:.3f} | {target} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
