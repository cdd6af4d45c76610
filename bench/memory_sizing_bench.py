"""Large models through the service at its defaults: the check worker's memory sized to the model (issue 57).

For each model of bench/large_models.py (written once into `--folder`, by
default /tmp/onnx-large-models, never the repository; removed at the end
unless `--keep`):

1. **onnxruntime alone**, in a fresh process: `InferenceSession(path)`
   (onnxruntime maps the external files itself) and one run at batch 1 on
   ones. Its wall time and peak resident memory (`ru_maxrss`);
2. **the service at its defaults**: one `python -m service` (no flag but
   the data root: `--worker-memory 2GiB`, `--worker-memory-per-model-byte
   2.5`, `--worker-memory-share 50%`), `POST /models?checks=schema,security,shape,runtime,smoke`
   with `{"path": ...}`. Timed: the request's wall time; each stage's
   status and seconds from the summary; the check worker's cap from the
   service's log; and the peak resident memory (`VmHWM`) of every process
   the service started for the request, polled every 20 ms (the largest is
   the check worker: the import worker maps the model and copies none of it).

One model at a time, one run each by default (`--runs`): memory is shared.

Usage: python bench/memory_sizing_bench.py [--only external,inline] [--runs 1] [--folder DIR] [--keep]
       [--service-args "--worker-memory-share 20%"]   (the service's flags: a bound the model does not fit, say)
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "tools"), str(REPO / "bench")]

import large_models  # noqa: E402  (bench/, on the path above)

ALL_STAGES = "schema,security,shape,runtime,smoke"
MODELS = {"external": large_models.write_external_model, "inline": large_models.write_inline_model}
TIMEOUT = 900.0
GIB = 1 << 30
CAP_LINE = re.compile(r"checks of '(?P<name>[^']*)': memory cap (?P<cap>[0-9.]+ [GMK]iB)")
WORKER_LINE = re.compile(r"(?:import|checks|externals) of '[^']*': .*")

ALONE = """
import resource, sys, time
import numpy as np
import onnxruntime as ort
started = time.perf_counter()
session = ort.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
session.run(None, {"x": np.ones((1, WIDTH), np.float32)})
print(time.perf_counter() - started, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
""".replace("WIDTH", str(large_models.WIDTH))


def serving(store: Path, data_root: Path, *args: str) -> contextlib.AbstractContextManager[Any]:
    """tests/support/service_harness.py's started `python -m service` (imported at run time: mypy checks this script alone)."""
    harness = importlib.import_module("support.service_harness")
    started: contextlib.AbstractContextManager[Any] = harness.serving(store, data_root, *args)
    return started


def descendants(root: int) -> set[int]:
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                parents[int(entry.name)] = int(Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[1].split()[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


class PeakWatch:
    """The largest VmHWM of the processes below `root` that were not there when it started."""

    def __init__(self, root: int) -> None:
        self.root = root
        self.before = descendants(root)
        self.peak = 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopped.wait(0.02):
            for pid in descendants(self.root) - self.before:
                with contextlib.suppress(OSError, ValueError):
                    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.peak = max(self.peak, int(line.split()[1]) * 1024)

    def stop(self) -> int:
        self.stopped.set()
        self.thread.join()
        return self.peak


def alone(model: Path) -> tuple[float, int]:
    done = subprocess.run([sys.executable, "-c", ALONE, str(model)], capture_output=True, text=True, timeout=TIMEOUT, check=True)
    seconds, peak = done.stdout.split()
    return float(seconds), int(peak)


def through_service(started: Any, client: httpx.Client, relative: str) -> dict[str, Any]:
    offset = started.log.stat().st_size
    watch = PeakWatch(started.process.pid)
    began = time.perf_counter()
    answer = client.post("/models", params={"checks": ALL_STAGES}, json={"path": relative})
    wall = time.perf_counter() - began
    peak = watch.stop()
    if answer.status_code not in (200, 201):
        raise RuntimeError(f"POST /models: {answer.status_code} {answer.text[:500]}")
    summary = answer.json()
    with started.log.open("rb") as log:
        log.seek(offset)
        logged = log.read().decode(errors="replace")
    caps = [match.group("cap") for match in CAP_LINE.finditer(logged) if match.group("name") == relative]
    client.delete(f"/models/{summary['id']}")
    checks = summary["checks"]
    return {
        "wall": wall,
        "peak": peak,
        "verdict": summary["verdict"],
        "stages": {name: (entry["status"], entry.get("seconds", 0.0), entry.get("reason", "")) for name, entry in checks.items()},
        "cap": caps[0] if caps else "--worker-memory (not sized)",
        "workers": WORKER_LINE.findall(logged),  # each worker's wall time and steps, as the service logged them
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="external,inline")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "onnx-large-models")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--service-args", default="", help="flags for the service beside its data root (default: none)")
    args = parser.parse_args()
    names = [name for name in args.only.split(",") if name]
    results: dict[str, Any] = {}
    try:
        for name in names:
            model = args.folder / name / "model.onnx"
            if not model.exists():
                began = time.perf_counter()
                MODELS[name](args.folder / name)
                print(f"{name}: written in {time.perf_counter() - began:.1f} s", flush=True)
            size = sum(path.stat().st_size for path in (args.folder / name).iterdir())
            alone_runs = [alone(model) for _ in range(args.runs)]
            with contextlib.ExitStack() as stack:
                scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="sizing-bench-")))
                started = stack.enter_context(serving(scratch / "store", args.folder, *args.service_args.split()))
                client = stack.enter_context(httpx.Client(base_url=started.url, timeout=TIMEOUT))
                service_runs = [through_service(started, client, f"{name}/model.onnx") for _ in range(args.runs)]
            results[name] = {"bytes": size, "alone": alone_runs, "service": service_runs}
            report(name, results[name])
    finally:
        if not args.keep:
            shutil.rmtree(args.folder, ignore_errors=True)
    print(json.dumps(results, indent=1))


def report(name: str, result: dict[str, Any]) -> None:
    alone_wall = statistics.median(seconds for seconds, _ in result["alone"])
    alone_peak = statistics.median(peak for _, peak in result["alone"])
    wall = statistics.median(run["wall"] for run in result["service"])
    peak = statistics.median(run["peak"] for run in result["service"])
    last = result["service"][-1]
    print(f"\n{name}: {result['bytes'] / GIB:.2f} GiB; verdict {last['verdict']}; check worker's cap {last['cap']}")
    print(f"  onnxruntime alone: {alone_wall:.2f} s, peak {alone_peak / GIB:.2f} GiB")
    print(f"  service, all five stages: {wall:.2f} s, peak worker {peak / GIB:.2f} GiB ({peak / alone_peak:.2f}x onnxruntime alone)")
    for stage, (status, seconds, reason) in last["stages"].items():
        print(f"    {stage}: {status} {seconds:.2f} s {reason[:400]}")
    for line in last["workers"]:
        print(f"  {line[:400]}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
