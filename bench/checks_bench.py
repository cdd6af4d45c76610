"""The check stages against onnx and onnxruntime in a fresh process, side by side in one run (issue 22).

For each model, in rounds (the order of ours and the reference swapped every
round, so a change in the machine's load touches both alike):

1. `shape` alone, ours: `check_worker_results(sandbox, job)` for a job asking
   `checks=("shape",)`, a fresh check worker forked from the service's fork
   server (`service.sandbox.supervisor.Sandbox`, started once, onnx and
   onnxruntime preloaded in it as the service does): the wall time from the
   call to its results (fork, confinement, the model opened and mapped, the
   file policy narrowed, the stage, the report, the worker joined), and the
   stage's own seconds as the worker reports them.
   Reference: a fresh `python -c` process that imports onnx and runs
   `onnx.shape_inference.infer_shapes(onnx.load(path), check_type=True,
   strict_mode=True, data_prop=True)` (the options the stage runs inference
   with: the same work); an inference error ends it as a user sees it.
2. `runtime` + `smoke`, ours: the same for `checks=("runtime", "smoke")` (the
   security estimate that may refuse the run, the session from the model's
   bytes, one run on synthetic inputs, the outputs compared); the stages'
   seconds summed.
   Reference: a fresh `python -c` process that imports onnxruntime and numpy,
   creates `onnxruntime.InferenceSession(path,
   providers=["CPUExecutionProvider"])` (onnxruntime's default options: what
   a user gets; `--reference-threads 1` gives it the stage's one intra-op and
   one inter-op thread) and runs it once on inputs made as the smoke stage
   makes them (symbolic and unknown dimensions 1; 1 for floating-point
   types, bfloat16 as its bit pattern, 0 for integers and float8, False, "").

The reference is timed two ways: the whole process (the parent's wall time
around `subprocess.run`: interpreter start-up, the imports, the work, exit,
which leaves with `os._exit` once its answer is written, as the service's
workers do), and the work alone (measured inside it, from after its imports
to the end of the work). Ratios are ours / reference: the worker's wall time
against the whole process (a fresh process is the issue's reference, and our
fork server's preloaded onnx and onnxruntime are what the service pays once,
like the interpreter's start-up there), and the stages' seconds against the
work alone. Each figure is the median of `--runs` rounds, after a warm-up
round (untimed) that reads every model into the page cache and imports the
stage modules once in a worker.

Models: the ONNX backend test data's real models (`.cache/onnx-backend/real`
names its `light/light_*.onnx` files; `tools/gen_backend_data.py`), the
repository's exported models (`.cache/torch-exports/*/model.onnx`,
`tools/export_torch_models.py`; skipped when absent) and the 200,000-node
model (`.cache/bench/nodes.onnx`, made here by `bench/make_models.py`'s code
if missing). The machine may be shared: the run prints the load average and,
per model, the cores that other processes used meanwhile (the cores' busy
time less this run's own CPU time).

Usage: python bench/checks_bench.py [--runs 3] [--big-runs 3] [--only NAME,...]
       [--skip-big] [--reference-threads N] [--worker-uid N] [--wait-load 1.5]
       [--json FILE]
       python bench/checks_bench.py --from-json FILE   (the tables of a saved run)
(--worker-uid: the uid a check worker takes when the bench runs as root; the
service's default otherwise. --wait-load: first wait, up to 10 minutes, for
the 1-minute load average to fall below it.)
Targets (issue 22): runtime + smoke <= 1.5x onnxruntime's session creation
plus one run in a fresh process; shape <= 1.5x infer_shapes in a fresh
process; on the real models and the 200,000-node model.
"""

# Only the standard library at module level: the fork server's workers would
# run this module again before their task were it not for
# _workers_skip_this_script; should that ever fail, they pay little.
from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from service.sandbox.supervisor import Sandbox

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache"
BACKEND = CACHE / "onnx-backend"
TORCH_EXPORTS = CACHE / "torch-exports"
NODES_MODEL = CACHE / "bench" / "nodes.onnx"
TARGET = 1.5
REFERENCE_TIMEOUT = 900.0  # seconds one reference process may take

Kind = Literal["shape", "runtime"]
KINDS: tuple[Kind, ...] = ("shape", "runtime")
STAGES_OF: dict[Kind, tuple[str, ...]] = {"shape": ("shape",), "runtime": ("runtime", "smoke")}

# The reference processes. Their first statement starts the clock: the
# interpreter's own start-up is in the parent's wall time only.
SHAPE_REFERENCE = """
import time
started = time.perf_counter()
import json, os, sys
import onnx
imported = time.perf_counter()
status = "pass"
try:
    onnx.shape_inference.infer_shapes(onnx.load(sys.argv[1]), check_type=True, strict_mode=True, data_prop=True)
except Exception as error:
    status = "raised " + type(error).__name__
done = time.perf_counter()
sys.stdout.write(json.dumps({"imports": imported - started, "work": done - imported, "status": status}))
sys.stdout.flush()
os._exit(0)
"""

RUNTIME_REFERENCE = """
import time
started = time.perf_counter()
import json, os, sys
import numpy as np
import onnxruntime as ort
imported = time.perf_counter()
threads = int(sys.argv[2])
FLOATS = {"float": np.float32, "double": np.float64, "float16": np.float16}
INTEGERS = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64, "uint8": np.uint8,
            "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64, "bool": np.bool_}
BIT_PATTERNS = {"bfloat16": (np.uint16, 16, 0x3F80), "float8e4m3fn": (np.uint8, 17, 0), "float8e4m3fnuz": (np.uint8, 18, 0),
                "float8e5m2": (np.uint8, 19, 0), "float8e5m2fnuz": (np.uint8, 20, 0)}

def answer(status):
    done = time.perf_counter()
    sys.stdout.write(json.dumps({"imports": imported - started, "work": done - imported, "status": status}))
    sys.stdout.flush()
    os._exit(0)

options = None
if threads:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = threads
try:
    session = ort.InferenceSession(sys.argv[1], options, providers=["CPUExecutionProvider"])
except Exception as error:
    answer("load failed: " + type(error).__name__)
feeds, special = {}, False
for value in session.get_inputs():
    kind = value.type
    if not kind.startswith("tensor("):
        answer("not run: input " + value.name + " is " + kind)
    element = kind[len("tensor("):-1]
    shape = [size if isinstance(size, int) and size >= 0 else 1 for size in value.shape]
    if element in FLOATS:
        feeds[value.name] = np.ones(shape, FLOATS[element])
    elif element in INTEGERS:
        feeds[value.name] = np.zeros(shape, INTEGERS[element])
    elif element == "string":
        feeds[value.name] = np.full(shape, "", dtype=object)
    elif element in BIT_PATTERNS:
        dtype, code, bits = BIT_PATTERNS[element]
        feeds[value.name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.full(shape, bits, dtype), code)
        special = True
    else:
        answer("not run: input " + value.name + " is " + kind)
try:
    if special:
        values = {name: feed if isinstance(feed, ort.OrtValue) else ort.OrtValue.ortvalue_from_numpy(feed) for name, feed in feeds.items()}
        session.run_with_ort_values(None, values)
    else:
        session.run(None, feeds)
except Exception as error:
    answer("run failed: " + type(error).__name__)
answer("pass")
"""


@dataclass
class Model:
    name: str
    group: Literal["real", "exported", "big"]
    path: Path
    nodes: int = 0
    megabytes: float = 0.0


@dataclass
class Sample:
    """One measurement: ours (wall, stage seconds, statuses) or the reference's (whole, imports, work, status)."""

    wall: float
    work: float
    imports: float = 0.0
    status: str = ""


@dataclass
class Figures:
    model: Model
    ours: dict[str, list[Sample]] = field(default_factory=lambda: {kind: [] for kind in KINDS})
    reference: dict[str, list[Sample]] = field(default_factory=lambda: {kind: [] for kind in KINDS})
    other_cores: float = 0.0


# --- models


def real_models() -> list[Model]:
    """The backend's real models: each `real/test_X/data.json` names its light model's file."""
    models = []
    for data in sorted(BACKEND.glob("real/*/data.json")):
        url = str(json.loads(data.read_text())["url"])
        path = BACKEND / url.removeprefix("onnx/backend/test/data/")
        if path.is_file():
            models.append(Model(path.stem.removeprefix("light_"), "real", path))
    return models


def exported_models() -> list[Model]:
    return [Model(path.parent.name, "exported", path) for path in sorted(TORCH_EXPORTS.glob("*/model.onnx"))]


def nodes_model() -> Model:
    if not NODES_MODEL.exists():
        sys.path.insert(0, str(REPO / "bench"))
        import make_models

        NODES_MODEL.parent.mkdir(parents=True, exist_ok=True)
        make_models.make_node_model(small=False)
    return Model("200,000 nodes", "big", NODES_MODEL)


def describe(model: Model) -> None:
    """Its node count (main graph) and size on disk, external data included."""
    import onnx

    proto = onnx.load(str(model.path), load_external_data=False)
    model.nodes = len(proto.graph.node)
    size = model.path.stat().st_size
    size += sum(path.stat().st_size for path in model.path.parent.glob("*.data"))
    model.megabytes = size / 1e6


# --- the machine's load


def cpu_busy() -> int:
    """Busy jiffies of all cores (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(values[:8]) - values[3] - values[4]


def run_ticks() -> int:
    """CPU ticks of this run so far: this process, its reaped children (the
    reference processes) and every live descendant with its reaped children
    (the fork server and its workers)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        parents[int(entry.name)] = int(fields[1])
        ticks[int(entry.name)] = sum(int(v) for v in fields[11:15])
    me = os.getpid()

    def descends(pid: int) -> bool:
        for _ in range(64):
            pid = parents.get(pid, 0)
            if pid == me:
                return True
            if pid <= 1:
                return False
        return False

    own = os.times()
    total = round((own.user + own.system + own.children_user + own.children_system) * os.sysconf("SC_CLK_TCK"))
    return total + sum(value for pid, value in ticks.items() if descends(pid))


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def wait_for_load(below: float, longest: float) -> float:
    """Wait until the 1-minute load average is below `below` (at most `longest` seconds); the seconds waited."""
    started = time.monotonic()
    while float(load_average().split()[0]) >= below and time.monotonic() - started < longest:
        time.sleep(5.0)
    return time.monotonic() - started


# --- measuring


def _workers_skip_this_script() -> None:
    """A worker of multiprocessing's fork server runs the parent's main script
    again (as `__mp_main__`) before its task, unless the main module is a
    package's `__main__`. The service's is (`python -m service`), so none of
    its workers does; without its `__file__`, this script's workers do not
    either, and measure what the service's do."""
    main = sys.modules["__main__"]
    if getattr(main, "__spec__", None) is None and hasattr(main, "__file__"):
        delattr(main, "__file__")


def start_sandbox(args: argparse.Namespace, scratch: Path) -> tuple[Sandbox, float]:
    from service.sandbox.supervisor import Sandbox
    from service.settings import load_settings

    flags = ["--data-root", str(CACHE), "--store", str(scratch / "store"), "--workers", "1"]
    for option in ("worker_memory", "worker_cpu_seconds", "worker_timeout"):
        value = getattr(args, option)
        if value is not None:
            flags += [f"--{option.replace('_', '-')}", value]
    sandbox = Sandbox(load_settings(flags, environ={}))
    started = time.perf_counter()
    sandbox.start()
    return sandbox, time.perf_counter() - started


def ours(sandbox: Sandbox, model: Model, kind: Kind, worker_uid: int | None) -> Sample:
    from service.checks.check_worker import check_worker_results

    identity = {} if worker_uid is None else {"worker_uid": worker_uid, "worker_gid": worker_uid}
    job = sandbox.job(
        "import",
        directory=str(model.path.parent),
        model=model.path.name,
        display_name=model.path.name,
        allow_hard_links=True,
        checks=STAGES_OF[kind],
        dims=(),
        **identity,
    )
    started = time.perf_counter()
    results = check_worker_results(sandbox, job)
    wall = time.perf_counter() - started
    status = "/".join(result.status for result in results)
    reasons = [f"{result.stage}: {result.reason}" for result in results if result.status == "incomplete"]
    return Sample(wall, sum(result.seconds for result in results), status=status + (f" ({reasons[0][:120]})" if reasons else ""))


def reference(model: Model, kind: Kind, threads: int) -> Sample:
    code = SHAPE_REFERENCE if kind == "shape" else RUNTIME_REFERENCE
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code, str(model.path), str(threads)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=REFERENCE_TIMEOUT,
    )
    wall = time.perf_counter() - started
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        return Sample(wall, math.nan, status=f"died ({done.returncode}): {done.stderr.strip()[-200:]}")
    return Sample(wall, float(answer["work"]), float(answer["imports"]), str(answer["status"]))


def measure(sandbox: Sandbox, figures: Figures, runs: int, args: argparse.Namespace) -> None:
    model = figures.model
    busy, mine, started = cpu_busy(), run_ticks(), time.monotonic()
    for kind in KINDS:  # the warm-up: the file in the page cache, the stage modules read once (the big model: shape only)
        if kind == "shape" or model.group != "big":
            ours(sandbox, model, kind, args.worker_uid)
            reference(model, kind, args.reference_threads)
    for round_ in range(runs):
        for kind in KINDS:
            if round_ % 2 == 0:
                figures.ours[kind].append(ours(sandbox, model, kind, args.worker_uid))
                figures.reference[kind].append(reference(model, kind, args.reference_threads))
            else:
                figures.reference[kind].append(reference(model, kind, args.reference_threads))
                figures.ours[kind].append(ours(sandbox, model, kind, args.worker_uid))
    others = (cpu_busy() - busy) - (run_ticks() - mine)
    figures.other_cores = max(0.0, others / os.sysconf("SC_CLK_TCK") / max(1e-3, time.monotonic() - started))


# --- reporting


def median(samples: list[Sample], attribute: str) -> float:
    values = [getattr(sample, attribute) for sample in samples]
    return statistics.median(values) if values else math.nan


def ratios(figures: Figures, kind: Kind) -> tuple[float, float]:
    """(ours' wall / the reference's whole process, ours' stage seconds / its work alone)."""
    whole = median(figures.ours[kind], "wall") / median(figures.reference[kind], "wall")
    work = median(figures.ours[kind], "work") / median(figures.reference[kind], "work")
    return whole, work


def ms(seconds: float) -> str:
    return "" if math.isnan(seconds) else f"{seconds * 1000:,.0f} ms" if seconds < 10 else f"{seconds:,.1f} s"


def statuses(samples: list[Sample]) -> str:
    return ", ".join(sorted({sample.status for sample in samples}))


def table(all_figures: list[Figures]) -> list[str]:
    """Both measurements of every model, medians: ours' wall time (the stages' own seconds) against the reference's
    whole process (its work alone), and the ratios (whole; work)."""
    lines = [
        "| model | nodes, MB | `shape`: ours, wall (stage) | `infer_shapes`, fresh process: whole (work) | ratio, whole (work) "
        "| `runtime` + `smoke`: ours, wall (stages) | session + one run, fresh process: whole (work) | ratio, whole (work) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for figures in all_figures:
        model = figures.model
        cells = [model.name, f"{model.nodes:,}, {model.megabytes:.2f}"]
        for kind in KINDS:
            mine, theirs = figures.ours[kind], figures.reference[kind]
            whole, work = ratios(figures, kind)
            cells.append(f"{ms(median(mine, 'wall'))} ({ms(median(mine, 'work'))})")
            cells.append(f"{ms(median(theirs, 'wall'))} ({ms(median(theirs, 'work'))})")
            cells.append(f"{mark(whole)} ({work:.2f})" if finished(figures, kind) else "n/a: incomplete")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def verdicts(all_figures: list[Figures]) -> list[str]:
    """The models where ours or the reference did not simply pass: both verdicts, to compare."""
    lines = []
    for figures in all_figures:
        for kind in KINDS:
            mine, theirs = statuses(figures.ours[kind]), statuses(figures.reference[kind])
            if {mine, theirs} != {"pass"} and {mine, theirs} != {"pass/pass", "pass"}:
                lines.append(f"- {figures.model.name}, {'/'.join(STAGES_OF[kind])}: ours {mine}; reference {theirs}")
    return lines


def imports_line(all_figures: list[Figures]) -> str:
    """The reference's imports and the rest of its process (start-up and exit), medians over every model."""
    parts = []
    for kind, what in (("shape", "onnx"), ("runtime", "onnxruntime and numpy")):
        samples = [sample for figures in all_figures for sample in figures.reference[kind] if not math.isnan(sample.work)]
        if samples:
            rest = statistics.median(sample.wall - sample.imports - sample.work for sample in samples)
            parts.append(f"{what} {ms(median(samples, 'imports'))} (the rest of the process: {ms(rest)})")
    return "the reference's imports, median over its processes: " + "; ".join(parts)


def finished(figures: Figures, kind: Kind) -> bool:
    """Whether every stage of ours ran to its end in every round (a ratio means nothing otherwise)."""
    samples = figures.ours[kind]
    return bool(samples) and not any("incomplete" in sample.status for sample in samples)


def mark(ratio: float) -> str:
    return f"**{ratio:.2f}**" if ratio > TARGET else f"{ratio:.2f}"


def summary(all_figures: list[Figures], kind: Kind) -> list[str]:
    lines = []
    for groups, label in ((("real",), "real models"), (("exported",), "exported models"), (("big",), "200,000-node model")):
        measured = [figures for figures in all_figures if figures.model.group in groups]
        chosen = [figures for figures in measured if finished(figures, kind)]
        if len(chosen) < len(measured):
            lines.append(f"- {label}: {len(measured) - len(chosen)} with a stage incomplete in ours (no ratio; see the verdicts)")
        if not chosen:
            continue
        whole = [ratios(figures, kind)[0] for figures in chosen]
        work = [ratios(figures, kind)[1] for figures in chosen]
        verdict = "met" if max(whole) <= TARGET else "missed"
        lines.append(
            f"- {label} ({len(chosen)}): ratio whole process geometric mean {statistics.geometric_mean(whole):.2f}, "
            f"max {max(whole):.2f}; work alone geometric mean {statistics.geometric_mean(work):.2f}, max {max(work):.2f}; "
            f"target <= {TARGET} (whole process): **{verdict}**"
        )
    return lines


def commit() -> str:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    return done.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def versions() -> str:
    import numpy
    import onnx
    import onnxruntime

    return f"Python {platform.python_version()}, onnx {onnx.__version__}, onnxruntime {onnxruntime.__version__}, numpy {numpy.__version__}"


def report(all_figures: list[Figures]) -> None:
    print(
        f"other processes' cores per model: mean {statistics.mean(f.other_cores for f in all_figures):.2f}, "
        f"max {max(f.other_cores for f in all_figures):.2f}"
    )
    print(imports_line(all_figures))
    print()
    print("\n".join(table(all_figures)))
    differing = verdicts(all_figures)
    if differing:
        print()
        print("\n".join(differing))
    for kind in KINDS:
        print()
        print(f"{'/'.join(STAGES_OF[kind])}:")
        print("\n".join(summary(all_figures, kind)))


def save(all_figures: list[Figures], path: Path) -> None:
    records = [
        {"model": asdict(figures.model) | {"path": str(figures.model.path)}, "other_cores": figures.other_cores,
         "ours": {kind: [asdict(s) for s in figures.ours[kind]] for kind in KINDS},
         "reference": {kind: [asdict(s) for s in figures.reference[kind]] for kind in KINDS}}
        for figures in all_figures
    ]  # fmt: skip
    path.write_text(json.dumps(records, indent=1))


def load(path: Path) -> list[Figures]:
    """The figures `save` wrote (to print the tables again)."""
    all_figures = []
    for record in json.loads(path.read_text()):
        model = Model(**(record["model"] | {"path": Path(record["model"]["path"])}))
        figures = Figures(model, other_cores=float(record["other_cores"]))
        for kind in KINDS:
            figures.ours[kind] = [Sample(**sample) for sample in record["ours"][kind]]
            figures.reference[kind] = [Sample(**sample) for sample in record["reference"][kind]]
        all_figures.append(figures)
    return all_figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="measured rounds per model (median), after one warm-up round")
    parser.add_argument("--big-runs", type=int, default=3, help="rounds for the 200,000-node model")
    parser.add_argument("--only", default="", help="comma-separated parts of model names to measure")
    parser.add_argument("--skip-big", action="store_true", help="leave out the 200,000-node model")
    parser.add_argument("--reference-threads", type=int, default=0, help="intra- and inter-op threads of the reference (0: its default)")
    parser.add_argument("--worker-uid", type=int, help="the uid (and gid) a check worker takes when run as root (default: the service's)")
    parser.add_argument("--worker-memory", help="the workers' memory cap (default: the service's)")
    parser.add_argument("--worker-cpu-seconds", help="the workers' CPU-time cap (default: the service's)")
    parser.add_argument("--worker-timeout", help="the workers' wall-clock deadline (default: the service's)")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--from-json", type=Path, help="measure nothing: print the tables of a run saved with --json")
    parser.add_argument(
        "--wait-load", type=float, default=0.0, help="first wait (up to 10 minutes) for the 1-minute load average to fall below this"
    )
    args = parser.parse_args()
    if args.from_json is not None:
        report(load(args.from_json))
        return
    _workers_skip_this_script()
    # The stage modules, imported once here: their compiled files are on disk, as in an installed service.
    import service.checks.stages.runtime
    import service.checks.stages.shape
    import service.checks.stages.smoke  # noqa: F401

    models = real_models() + exported_models()
    if not args.skip_big:
        models.append(nodes_model())
    wanted = [part for part in args.only.split(",") if part]
    if wanted:
        models = [model for model in models if any(part in model.name for part in wanted)]
    if not models:
        sys.exit("no models: run tools/gen_backend_data.py (and tools/export_torch_models.py, bench/make_models.py)")
    for model in models:
        describe(model)
    print(f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, commit {commit()}, {versions()}, {os.cpu_count()} cores")
    if args.wait_load:
        waited = wait_for_load(args.wait_load, 600.0)
        print(f"waited {waited:.0f} s for the 1-minute load average to fall below {args.wait_load:g}")
    print(f"load average at the start: {load_average()}", flush=True)
    all_figures = [Figures(model) for model in models]
    with tempfile.TemporaryDirectory(prefix="checks-bench-") as scratch:
        sandbox, start_seconds = start_sandbox(args, Path(scratch))
        print(f"fork server started in {start_seconds:.2f} s (onnx and onnxruntime preloaded); workers: {sandbox.isolation}", flush=True)
        for figures in all_figures:
            runs = args.big_runs if figures.model.group == "big" else args.runs
            measure(sandbox, figures, runs, args)
            whole_shape, _ = ratios(figures, "shape")
            whole_runtime, _ = ratios(figures, "runtime")
            print(
                f"{figures.model.name}: shape {whole_shape:.2f}, runtime+smoke {whole_runtime:.2f} "
                f"(other processes {figures.other_cores:.2f} cores)",
                flush=True,
            )
    print(f"load average at the end: {load_average()}")
    if args.json is not None:
        save(all_figures, args.json)
    report(all_figures)


if __name__ == "__main__":
    main()
