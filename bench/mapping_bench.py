"""The runtime and smoke stages at onnxruntime's own cost: a check worker's peak memory and time against onnxruntime alone (issue 57).

One model of GPT-2 small's shape in external data (made by this script into
`--folder`, default /tmp/mapping-bench, never into the repository; kept if
present): the token and position embeddings, 12 decoder layers of
LayerNormalization, attention projections (768 x 2304 and 768 x 768) and a
768 x 3072 x 768 MLP with their biases, the final LayerNormalization and the
LM head tied to the token embedding: 148 weights of 124.4 million float32
values (475 MiB), plus the positions and the attention's scale, each of
the 150 in an external file of its own (`--one-file`: all in one file, as
an exporter's `save_as_external_data(all_tensors_to_one_file=True)`
writes). Input `input_ids` [1, 8] int64 (no symbolic dimension: one smoke run).

Three ways, in rounds (the order rotated each round), after one untimed
warm-up round (the files in the page cache), median of `--runs`:

1. **onnxruntime alone**, in a fresh process: import onnxruntime and numpy,
   `InferenceSession(path, providers=["CPUExecutionProvider"])`, one run on
   ones. Timed: the whole process (the parent's wall time around it); its
   peak resident memory: its own VmHWM at the end (not `ru_maxrss`, which
   Linux keeps across `execve`: the bench's own peak, as it makes the model);
2. **check worker, mapped**: the service's `check_worker_results` with the
   stages `runtime,smoke` through a started `Sandbox` (its fork server warm,
   as in the service): the `externals` worker that reads which files the
   model names, then the check worker, which binds them and lets
   onnxruntime make its session from the path. Timed: the call; the check
   worker's peak resident memory: its VmHWM (/proc/PID/status, polled every
   2 ms while it lives; it never falls);
3. **check worker, handed over**: the same check worker given no files to
   bind (`Sandbox.run_checks` on the job as it was before: the importer's
   mapped bytes handed over as OrtValues, which onnxruntime 1.32 copies).

Printed: per way the median seconds and peak MiB, and the ratios of the
worker's to onnxruntime's (targets: peak at most 1.25x, time at most 1.0x).

    .venv/bin/python bench/mapping_bench.py [--runs 3] [--one-file] [--folder /tmp/mapping-bench] [--model-only]
        [--steps] [--wait-load 1.5]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save_model
from onnx.external_data_helper import set_external_data

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

VOCABULARY, POSITIONS, WIDTH, LAYERS, INNER, SEQUENCE = 50_257, 1_024, 768, 12, 3_072, 8
OPSET = 18

ALONE = f"""
import sys
import numpy as np
import onnxruntime
session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
session.run(None, {{"input_ids": np.ones((1, {SEQUENCE}), np.int64)}})
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
print(int(status["VmHWM"].split()[0]) * 1024, flush=True)  # not ru_maxrss, which keeps the parent's peak across exec
"""


# --- the model


def _weights(rng: np.random.Generator) -> list[tuple[str, np.ndarray]]:
    """GPT-2 small's 148 weights, random, in the order a graph uses them."""

    def normal(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)

    weights = [("wte", normal(VOCABULARY, WIDTH)), ("wpe", normal(POSITIONS, WIDTH))]
    for layer in range(LAYERS):
        prefix = f"h{layer}"
        weights += [
            (f"{prefix}.ln1.g", np.ones(WIDTH, np.float32)), (f"{prefix}.ln1.b", np.zeros(WIDTH, np.float32)),
            (f"{prefix}.attn.w", normal(WIDTH, 3 * WIDTH)), (f"{prefix}.attn.b", normal(3 * WIDTH)),
            (f"{prefix}.proj.w", normal(WIDTH, WIDTH)), (f"{prefix}.proj.b", normal(WIDTH)),
            (f"{prefix}.ln2.g", np.ones(WIDTH, np.float32)), (f"{prefix}.ln2.b", np.zeros(WIDTH, np.float32)),
            (f"{prefix}.fc.w", normal(WIDTH, INNER)), (f"{prefix}.fc.b", normal(INNER)),
            (f"{prefix}.out.w", normal(INNER, WIDTH)), (f"{prefix}.out.b", normal(WIDTH)),
        ]  # fmt: skip
    weights += [("lnf.g", np.ones(WIDTH, np.float32)), ("lnf.b", np.zeros(WIDTH, np.float32))]
    weights += [("positions", np.arange(SEQUENCE, dtype=np.int64)), ("scale", np.array(0.125, np.float32))]
    return weights


def _nodes() -> list[Any]:
    """Embeddings, 12 layers (attention reduced to its projections: the weights are what is measured), the tied head."""
    nodes = [
        helper.make_node("Gather", ["wte", "input_ids"], ["tokens"]),
        helper.make_node("Gather", ["wpe", "positions"], ["places"]),
        helper.make_node("Add", ["tokens", "places"], ["x0"]),
    ]
    for layer in range(LAYERS):
        p, x = f"h{layer}", f"x{layer}"
        nodes += [
            helper.make_node("LayerNormalization", [x, f"{p}.ln1.g", f"{p}.ln1.b"], [f"{p}.n1"], axis=-1),
            helper.make_node("MatMul", [f"{p}.n1", f"{p}.attn.w"], [f"{p}.qkv0"]),
            helper.make_node("Add", [f"{p}.qkv0", f"{p}.attn.b"], [f"{p}.qkv"]),
            helper.make_node("Split", [f"{p}.qkv"], [f"{p}.q", f"{p}.k", f"{p}.v"], axis=-1, num_outputs=3),
            helper.make_node("Mul", [f"{p}.q", f"{p}.k"], [f"{p}.qk1"]),
            helper.make_node("Mul", [f"{p}.qk1", "scale"], [f"{p}.qk"]),
            helper.make_node("Add", [f"{p}.qk", f"{p}.v"], [f"{p}.a"]),
            helper.make_node("MatMul", [f"{p}.a", f"{p}.proj.w"], [f"{p}.o0"]),
            helper.make_node("Add", [f"{p}.o0", f"{p}.proj.b"], [f"{p}.o"]),
            helper.make_node("Add", [x, f"{p}.o"], [f"{p}.r1"]),
            helper.make_node("LayerNormalization", [f"{p}.r1", f"{p}.ln2.g", f"{p}.ln2.b"], [f"{p}.n2"], axis=-1),
            helper.make_node("MatMul", [f"{p}.n2", f"{p}.fc.w"], [f"{p}.f0"]),
            helper.make_node("Add", [f"{p}.f0", f"{p}.fc.b"], [f"{p}.f1"]),
            helper.make_node("Relu", [f"{p}.f1"], [f"{p}.f"]),
            helper.make_node("MatMul", [f"{p}.f", f"{p}.out.w"], [f"{p}.m0"]),
            helper.make_node("Add", [f"{p}.m0", f"{p}.out.b"], [f"{p}.m"]),
            helper.make_node("Add", [f"{p}.r1", f"{p}.m"], [f"x{layer + 1}"]),
        ]
    nodes += [
        helper.make_node("LayerNormalization", [f"x{LAYERS}", "lnf.g", "lnf.b"], ["final"], axis=-1),
        helper.make_node("Transpose", ["wte"], ["head"], perm=[1, 0]),
        helper.make_node("MatMul", ["final", "head"], ["logits"]),
    ]
    return nodes


def make_model(folder: Path, one_file: bool) -> Path:
    """The model (see the module's text) in `folder`, made unless it is there."""
    path = folder / "model.onnx"
    if path.exists():
        return path
    folder.mkdir(parents=True, exist_ok=True)
    initializers = []
    data = folder / "model.onnx.data"
    offset = 0
    with open(data, "wb") if one_file else open(os.devnull, "wb") as together:
        for index, (name, values) in enumerate(_weights(np.random.default_rng(0))):
            tensor = numpy_helper.from_array(values, name)
            raw = tensor.raw_data
            if one_file:
                together.write(raw)
                set_external_data(tensor, data.name, offset=offset, length=len(raw))
                offset += len(raw)
            else:
                location = f"weights/{index:03d}.bin"
                (folder / "weights").mkdir(exist_ok=True)
                (folder / location).write_bytes(raw)
                set_external_data(tensor, location)
            tensor.ClearField("raw_data")
            tensor.data_location = TensorProto.EXTERNAL
            initializers.append(tensor)
    graph = helper.make_graph(
        _nodes(),
        "gpt2_shape",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, SEQUENCE])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, SEQUENCE, VOCABULARY])],
        initializers,
    )
    save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]), str(path))
    return path


# --- the three ways


def alone(path: Path) -> tuple[float, int]:
    """onnxruntime alone in a fresh process: its seconds and peak resident bytes."""
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", ALONE, str(path)], capture_output=True, text=True, check=True)
    return time.monotonic() - started, int(done.stdout.split()[-1])


def _peak_watcher(pid: int, peaks: dict[int, int]) -> None:
    """Poll the worker's VmHWM until it is gone (a zombie has none)."""
    status = f"/proc/{pid}/status"
    while True:
        try:
            with open(status) as file:
                text = file.read()
        except OSError:
            return
        line = next((line for line in text.splitlines() if line.startswith("VmHWM:")), None)
        if line is None:
            return
        peaks[pid] = max(peaks.get(pid, 0), int(line.split()[1]) * 1024)
        time.sleep(0.002)


def measured_sandbox() -> Any:
    """A started Sandbox whose check workers' peaks are watched."""
    from service.sandbox.supervisor import Sandbox
    from service.settings import Settings

    class Measured(Sandbox):
        peaks: dict[int, int]
        checks: list[int]

        def _fork(self, job: Any) -> Any:
            forked = super()._fork(job)
            pid = forked[0].pid
            assert pid is not None
            if job.task == "checks":
                self.checks.append(pid)
            threading.Thread(target=_peak_watcher, args=(pid, self.peaks), daemon=True).start()
            return forked

    sandbox = Measured(Settings(worker_timeout=300.0))
    sandbox.peaks, sandbox.checks = {}, []
    sandbox.start()
    return sandbox


def worker(sandbox: Any, path: Path, mapped: bool) -> tuple[float, int, str]:
    """The check worker's stages runtime and smoke: seconds, its peak resident bytes, how the weights went."""
    from service.checks.check_worker import check_worker_results

    job = sandbox.job("checks", directory=str(path.parent), model=path.name, display_name=path.name, checks=("runtime", "smoke"))
    started = time.monotonic()
    if mapped:
        results = check_worker_results(sandbox, job)
    else:
        reports, outcome = sandbox.run_checks(replace(job, hash_sources=False))
        results = [report.result() for report in reports]
        logging.getLogger("service.sandbox").info("%s", outcome.logged("checks", path.name))
    seconds = time.monotonic() - started
    time.sleep(0.05)
    peak = sandbox.peaks.get(sandbox.checks[-1], 0)
    statuses = {result.stage: result.status for result in results}
    if statuses != {"runtime": "pass", "smoke": "pass"}:
        raise SystemExit(f"the check worker did not pass: {[(r.stage, r.status, r.reason) for r in results]}")
    return seconds, peak, results[0].weights


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--one-file", action="store_true")
    parser.add_argument("--folder", type=Path, default=Path("/tmp/mapping-bench"))
    parser.add_argument("--model-only", action="store_true", help="make the model and stop")
    parser.add_argument("--steps", action="store_true", help="log each worker's steps")
    parser.add_argument("--wait-load", type=float, default=0.0, help="first wait, up to 10 minutes, for the load average to fall below")
    options = parser.parse_args(arguments)
    folder = options.folder / ("one-file" if options.one_file else "file-per-weight")
    started = time.monotonic()
    path = make_model(folder, options.one_file)
    files = sum(1 for item in folder.rglob("*") if item.is_file()) - 1
    size = sum(item.stat().st_size for item in folder.rglob("*") if item.is_file())
    print(f"model: {path} ({size / 2**20:.0f} MiB in {files} external file(s); made or found in {time.monotonic() - started:.1f} s)")
    if options.model_only:
        return 0
    waited_until = time.monotonic() + 600
    while options.wait_load and os.getloadavg()[0] >= options.wait_load and time.monotonic() < waited_until:
        time.sleep(5)
    print(f"load average at the start: {os.getloadavg()[0]:.2f}")
    if options.steps:  # each worker's steps, as the service logs them
        logging.basicConfig(level=logging.INFO, format="%(message)s")
    sandbox = measured_sandbox()
    ways: dict[str, Callable[[], tuple[float, int, str]]] = {
        "onnxruntime alone": lambda: (*alone(path), ""),
        "check worker, mapped": lambda: worker(sandbox, path, True),
        "check worker, handed over": lambda: worker(sandbox, path, False),
    }
    for run in ways.values():
        run()  # warm-up: the files in the page cache
    taken: dict[str, list[tuple[float, int, str]]] = {name: [] for name in ways}
    names = list(ways)
    for round_ in range(options.runs):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            taken[name].append(ways[name]())
    base_seconds = statistics.median(seconds for seconds, _, _ in taken["onnxruntime alone"])
    base_peak = statistics.median(peak for _, peak, _ in taken["onnxruntime alone"])
    print(f"\n| way | weights | seconds (median of {options.runs}) | x onnxruntime | peak MiB | x onnxruntime |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for name, rounds in taken.items():
        seconds = statistics.median(seconds for seconds, _, _ in rounds)
        peak = statistics.median(peak for _, peak, _ in rounds)
        weights = rounds[-1][2] or "-"
        print(f"| {name} | {weights} | {seconds:.3f} | {seconds / base_seconds:.2f} | {peak / 2**20:.0f} | {peak / base_peak:.2f} |")
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
