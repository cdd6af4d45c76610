"""Runs the import benchmarks: both builds of our importer against onnx.load.

Every measurement is a fresh process (bench/probe.py) run RUNS times; wall
time is taken around the process and peak RSS from wait4's rusage. Time is
net of start-up: the median of a process that imports the same package and
loads nothing is subtracted. Peak RSS is reported as the operating system's
figure for the whole process (runtime included). Medians, then ratios
loader / reference, with the targets.

The importer is measured in both builds: `compiled` is the checkout itself
when its modules are compiled (`IMPORTER_BUILD=compiled`, what tools/dev.sh
installs where there is a C compiler), `pure` a copy of its Python sources
in .cache/bench/pure/ (made here), each chosen by PYTHONPATH and checked by
the probe. onnx_ir is measured when installed.

Usage: python bench/run.py [--runs N] [--only NAME ...]
(first: python bench/make_models.py; BENCH_CACHE overrides .cache/bench for
both).
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

from importer import BUILD

REPO = Path(__file__).resolve().parent.parent
CACHE = Path(os.environ.get("BENCH_CACHE", REPO / ".cache" / "bench"))
PROBE = REPO / "bench" / "probe.py"
PURE_COPY = REPO / ".cache" / "bench" / "pure"


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


@dataclass(frozen=True)
class Loader:
    label: str
    probe_name: str  # bench/probe.py's LOADER
    path: Path | None = None  # put first on PYTHONPATH (an importer build)
    build: str | None = None


@dataclass
class Sample:
    seconds: float
    peak_mb: float


def make_pure_copy() -> Path:
    """The importer's Python sources and package data, without any compiled module."""
    subprocess.run(["bash", str(REPO / "tools" / "pure_copy.sh"), str(PURE_COPY)], check=True)
    return PURE_COPY


def importer_loaders() -> list[Loader]:
    loaders = []
    if BUILD == "compiled":  # the checkout's importer, which this process imports
        loaders.append(Loader("importer (compiled)", "importer", REPO, "compiled"))
    else:
        print("note: the checkout's importer is not compiled (IMPORTER_BUILD=compiled pip install -e .): only the pure build is measured")
    loaders.append(Loader("importer (pure)", "importer", make_pure_copy(), "pure"))
    return loaders


def measure(loader: Loader, nothing: bool, workload: Path) -> Sample:
    env = dict(os.environ)
    if loader.path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(loader.path), env.get("PYTHONPATH")]))
    if loader.build is not None:
        env["IMPORTER_EXPECT_BUILD"] = loader.build
    name = loader.probe_name + ("-nothing" if nothing else "")
    start = time.perf_counter()
    process = subprocess.Popen([sys.executable, str(PROBE), name, str(workload)], cwd=REPO, env=env)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.perf_counter() - start
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise SystemExit(f"{loader.label} failed on {workload} (exit {process.returncode})")
    return Sample(seconds, usage.ru_maxrss / 1024)


def median_of(loader: Loader, nothing: bool, workload: Path, runs: int) -> Sample:
    samples = [measure(loader, nothing, workload) for _ in range(runs)]
    return Sample(statistics.median(s.seconds for s in samples), statistics.median(s.peak_mb for s in samples))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--only", nargs="*", default=None, help="workload name prefixes")
    args = parser.parse_args()
    loaders = [*importer_loaders(), Loader("onnx.load", "onnx"), Loader("onnx + checker", "onnx+checker")]
    if importlib.util.find_spec("onnx_ir"):
        loaders.append(Loader("onnx_ir", "onnx_ir"))
    references = {"onnx": "onnx.load", "onnx+checker": "onnx + checker"}
    baseline = {loader.label: median_of(loader, True, CACHE / "nodes.onnx", args.runs) for loader in loaders}
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.platform()}")
    print("start-up (import only): " + ", ".join(f"{k} {v.seconds * 1000:.0f} ms / {v.peak_mb:.0f} MB" for k, v in baseline.items()))
    print()
    print("| workload | loader | time (net) | peak RSS | time ratio | memory ratio | target |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for workload in WORKLOADS:
        if args.only and not any(workload.name.startswith(prefix) for prefix in args.only):
            continue
        reference_label = references[workload.reference]
        results = {}
        for loader in loaders:
            if loader.probe_name == "onnx+checker" and workload.reference != "onnx+checker":
                continue
            sample = median_of(loader, False, workload.path, args.runs)
            results[loader.label] = Sample(max(sample.seconds - baseline[loader.label].seconds, 0.0), sample.peak_mb)
        reference = results[reference_label]
        for label, sample in results.items():
            time_ratio = sample.seconds / reference.seconds if reference.seconds else float("nan")
            memory_ratio = sample.peak_mb / reference.peak_mb
            target = ""
            if label.startswith("importer"):
                met = time_ratio <= workload.time_target and (workload.memory_target is None or memory_ratio <= workload.memory_target)
                memory = f", memory <= {workload.memory_target}" if workload.memory_target else ""
                target = f"time <= {workload.time_target}{memory} vs {reference_label}: {'met' if met else 'MISSED'}"
            print(
                f"| {workload.name} | {label} | {sample.seconds * 1000:.0f} ms | {sample.peak_mb:.0f} MB "
                f"| {time_ratio:.3f} | {memory_ratio:.3f} | {target} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
