"""The read path under load (issue 24): wrk against a live `python -m service`.

For each store (the local folder; the fleet store, S3 on SeaweedFS and
PostgreSQL, started by tools/fleet_servers.py) and each number of front-end
processes (`--http-workers`, when `python -m service` has the flag), a real
server is started on 127.0.0.1, the models are uploaded (multipart POST
/models, so their bytes are in the store), and wrk (a load generator in C)
runs for DURATION seconds with CONNECTIONS connections on each route:

1. GET /healthz alone (the baseline),
2. GET /models/{id}/tensors/W: testdata/samples/add.onnx's 24-byte tensor,
3. a 64 KiB tensor, and
4. a 16 MiB tensor, both float32 initializers of a model made here once
   (.cache/bench/read-bench.onnx, inline data),
5. GET /models/{id} (the model's summary).

During 2 to 5 a second wrk (1 thread, 1 connection) times GET /healthz: what
a health check sees while the front end serves the load. Each row reports
requests/s, p50, p99 and Transfer/sec (wrk's binary units, given here in MB/s
of 10^6 bytes), the front end's memory (VmRSS before, the peak during: every
process's VmHWM, reset before, summed over the front-end processes:
the server process and its children but the sandbox's fork server and
resource tracker, and what it kept after), the cores the front ends, wrk and
processes outside this run used meanwhile, and any wrk error (non-2xx
answers, socket errors, timeouts). Each route is warmed up for a second
first (the memory figures span the warm-up too: VmRSS before it); every
answer is checked byte for byte once before anything is measured.

Usage: .venv/bin/python bench/read_bench.py [--stores local,s3] [--http-workers 1,2]
       [--duration 10] [--connections 40] [--threads 1] [--json FILE]
(wrk is installed with apt-get when missing and this runs as root.)

Targets (issue 24):
- the 24-byte tensor's GETs >= 0.8x /healthz's requests/s on one process;
  with two processes >= 1.6x one process's;
- /healthz p99 <= 25 ms while 40 connections fetch tensors;
- the 16 MiB tensor >= 2 GB/s on the local store, the front end's memory flat:
  its peak at most CONNECTIONS x 2 MiB above where it was (two of the
  stream's 1 MiB chunks a connection; whole tensors held would be
  CONNECTIONS x 16 MiB).

One wrk thread by default: on 2 cores wrk competes with the server for CPU,
and one thread is not what limits: it took 0.03 to 0.07 of a core on the
small routes and about 0.2 on the 16 MiB one against the front end's whole
core, and a second thread gave no more requests/s (/healthz: 2,176 against
2,118); the cores column shows what wrk took. "others" there are processes
outside this run (SeaweedFS and PostgreSQL are this run's). Every process
this starts is stopped at its end, on Ctrl-C and SIGTERM too; a process of a
server's tree still alive 10 s after its server stopped is reported, then
killed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import numpy as np
import onnx
from fleet_bench import (  # bench/ is on sys.path as this script's folder; fleet_bench puts tools/ there too
    CACHE,
    CLOCK_TICKS,
    REPO,
    SAMPLES,
    OtherLoad,
    Server,
    _die_with_parent,
    _pg_bin,
    _weed,
    expect,
    load_average,
    process_table,
    reset_peak,
    run_stopping_on_interrupt,
    status_kib,
    status_total_gib,
    terminated_as_exit,
    verdict,
)
from fleet_servers import FleetServers, FleetUnavailable
from onnx import TensorProto, helper, numpy_helper

MODEL = CACHE / "read-bench.onnx"
MID_ELEMENTS = 16 << 10  # float32: 64 KiB
BIG_ELEMENTS = 4 << 20  # float32: 16 MiB
ROUTES = ("/healthz", "24 B tensor", "64 KiB tensor", "16 MiB tensor", "summary")
TENSOR_ROUTES = ROUTES[1:4]
SANDBOX = ("multiprocessing.forkserver", "multiprocessing.resource_tracker")  # children of the server, not front ends
STREAM_CHUNK = 1 << 20  # a streamed body's chunk (CHUNK_BYTES of service/store/byte_source.py)
WRK_TIMEOUT = 30  # seconds: a slower answer would be dropped from wrk's latencies as a timeout
STOP_GRACE = 10.0  # seconds a server's tree has to be gone after the server stopped
MIB = 1 << 20
BUSY_CORES = 0.25  # other processes' use of the cores above which the report warns


# --- the model


def bench_model() -> Path:
    """A model of two float32 initializers inline, `t64k` (64 KiB) and `t16m` (16 MiB) (made once)."""
    if not MODEL.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(24)
        tensors = {"t64k": MID_ELEMENTS, "t16m": BIG_ELEMENTS}
        graph = helper.make_graph(
            [helper.make_node("Identity", [name], [f"{name}_out"]) for name in tensors], "read-bench", [],
            [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [count]) for name, count in tensors.items()],
            [numpy_helper.from_array(rng.standard_normal(count).astype(np.float32), name) for name, count in tensors.items()],
        )  # fmt: skip
        part = MODEL.with_suffix(".part")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), part)
        part.rename(MODEL)
    return MODEL


def initializer_bytes(path: Path) -> dict[str, bytes]:
    """Each initializer's raw little-endian bytes: what GET /models/{id}/tensors/{name} answers."""
    return {tensor.name: numpy_helper.to_array(tensor).tobytes() for tensor in onnx.load(str(path)).graph.initializer}


# --- wrk


@dataclass
class Wrk:
    """One wrk run's figures (times in ms, throughput in bytes/s)."""

    requests_s: float = math.nan
    bytes_s: float = math.nan
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    max_ms: float = math.nan
    requests: int = 0
    non_2xx: int = 0
    socket_errors: dict[str, int] = field(default_factory=dict)
    cpu_s: float = 0.0  # wrk's own CPU time
    output: str = ""

    def errors(self) -> str:
        parts = [f"{self.non_2xx} non-2xx"] if self.non_2xx else []
        parts += [f"{count} {kind}" for kind, count in self.socket_errors.items() if count]
        return ", ".join(parts)


_TIME_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}
_BINARY = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def wrk_ms(text: str) -> float:
    """wrk's time (`850.00us`, `18.43ms`, `1.20s`, `2.00m`) in ms."""
    found = re.fullmatch(r"([0-9.]+)(us|ms|s|m|h)", text)
    return float(found[1]) * _TIME_MS[found[2]] if found else math.nan


def wrk_bytes(text: str) -> float:
    """wrk's size (`529.23KB`, `2.14GB`: powers of 1024) in bytes."""
    found = re.fullmatch(r"([0-9.]+)([KMGT]?)B", text)
    return float(found[1]) * _BINARY[found[2]] if found else math.nan


def parse_wrk(output: str) -> Wrk:
    figures = Wrk(output=output)
    if found := re.search(r"^\s*Latency\s+(\S+)\s+(\S+)\s+(\S+)", output, re.MULTILINE):
        figures.max_ms = wrk_ms(found[3])
    if found := re.search(r"^\s*50%\s+(\S+)", output, re.MULTILINE):
        figures.p50_ms = wrk_ms(found[1])
    if found := re.search(r"^\s*99%\s+(\S+)", output, re.MULTILINE):
        figures.p99_ms = wrk_ms(found[1])
    if found := re.search(r"(\d+) requests in", output):
        figures.requests = int(found[1])
    if found := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output):
        figures.socket_errors = {kind: int(found[index + 1]) for index, kind in enumerate(("connect", "read", "write", "timeout"))}
    if found := re.search(r"Non-2xx or 3xx responses: (\d+)", output):
        figures.non_2xx = int(found[1])
    if found := re.search(r"Requests/sec:\s+([0-9.]+)", output):
        figures.requests_s = float(found[1])
    if found := re.search(r"Transfer/sec:\s+(\S+)", output):
        figures.bytes_s = wrk_bytes(found[1])
    return figures


def start_wrk(url: str, threads: int, connections: int, seconds: int) -> subprocess.Popen[bytes]:
    command = [
        "wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", f"--timeout={WRK_TIMEOUT}s", "--latency", url,
    ]  # fmt: skip
    return subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        preexec_fn=_die_with_parent,  # noqa: PLW1509 (it only calls prctl)
    )  # fmt: skip


def finish_wrk(process: subprocess.Popen[bytes], seconds: float) -> Wrk:
    """Waits for wrk (killed after `seconds`; its few KB of output fit the pipe); its figures and CPU time."""
    deadline = time.monotonic() + seconds
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            process.kill()
            process.wait()
            raise RuntimeError(f"wrk ran past {seconds:.0f} s: killed")
        time.sleep(0.02)
    assert process.stdout is not None
    output = process.stdout.read().decode(errors="replace")
    process.stdout.close()
    if process.returncode != 0:
        raise RuntimeError(f"wrk exited with {process.returncode}:\n{output[-2000:]}")
    figures = parse_wrk(output)
    figures.cpu_s = usage.ru_utime + usage.ru_stime
    return figures


@contextlib.contextmanager
def running(processes: list[subprocess.Popen[bytes]]) -> Iterator[None]:
    """Any wrk still running when the block ends (an error, Ctrl-C) is killed."""
    try:
        yield
    finally:
        for process in processes:
            if process.returncode is None and process.poll() is None:
                process.kill()
                process.wait()


def ensure_wrk() -> str:
    found = shutil.which("wrk")
    if found:
        return found
    if os.geteuid() != 0:
        raise SystemExit("wrk is needed (the load generator, in C): install Debian's package `wrk` (apt-get install wrk)")
    print("wrk is missing: installing Debian's package with apt-get install -y wrk", flush=True)
    if subprocess.run(["apt-get", "install", "-y", "wrk"]).returncode != 0:
        subprocess.run(["apt-get", "update"])
        subprocess.run(["apt-get", "install", "-y", "wrk"])
    found = shutil.which("wrk")
    if not found:
        raise SystemExit("wrk is needed and apt-get could not install it")
    return found


# --- the server's processes


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def start_time(pid: int) -> int | None:
    """The process's start (clock ticks after boot): with its pid, names it; None once it is gone or a zombie."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return None if fields[0] in {"Z", "X"} else int(fields[19])


def tree(root: int, *, front_ends_only: bool) -> list[int]:
    """`root` and its descendants; with front_ends_only, not the sandbox's fork server and resource tracker
    (nor what they started: the import workers)."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in process_table().items():
        children.setdefault(parent, []).append(pid)
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        if front_ends_only and pid != root and any(marker in cmdline(pid) for marker in SANDBOX):
            continue
        found.append(pid)
        stack.extend(children.get(pid, []))
    return sorted(found)


def settled_front_ends(server: Server, seconds: float = 20.0) -> list[int]:
    """The front-end processes once their set has not changed for a second (http workers may still be starting)."""
    deadline = time.monotonic() + seconds
    last, since = tree(server.pid, front_ends_only=True), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = tree(server.pid, front_ends_only=True)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 1.0:
            break
    return last


def stop_server(server: Server, problems: list[str]) -> None:
    """SIGTERM (then SIGKILL) to the server; then every process of its tree must be gone within STOP_GRACE seconds:
    one left is reported as a problem and killed (by pid, checked by its start time)."""
    started = {pid: start_time(pid) for pid in tree(server.pid, front_ends_only=False)}
    server.stop()
    deadline = time.monotonic() + STOP_GRACE
    left = started
    while left and time.monotonic() < deadline:
        left = {pid: when for pid, when in left.items() if when is not None and start_time(pid) == when}
        if left:
            time.sleep(0.1)
    for pid, when in left.items():
        if when is not None and start_time(pid) == when:
            problems.append(
                f"{server.name}: process {pid} ({cmdline(pid)[:120]}) still running {STOP_GRACE:.0f} s after the server stopped: killed"
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def http_workers_flag() -> bool:
    """Whether `python -m service` has --http-workers (several front-end processes on one port)."""
    done = subprocess.run([sys.executable, "-m", "service", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    return "--http-workers" in done.stdout


# --- measuring


@dataclass
class Row:
    store: str
    http_workers: int
    route: str
    path: str
    load: Wrk
    during: Wrk | None  # /healthz from one connection meanwhile (routes 2 to 5)
    processes: int  # front-end processes
    rss_before_kib: int
    peak_kib: int  # the sum of the front-end processes' VmHWM, each reset before the warm-up
    rss_after_kib: int
    front_end_cores: float
    wrk_cores: float
    other_cores: float
    per_process_kib: dict[int, list[int]]  # pid: VmRSS before, VmHWM, VmRSS after
    processes_changed: str  # a front-end process gone or a new one during the route (a crash, a restart)
    peak_reset: bool  # False: some process's VmHWM could not be reset (clear_refs): its peak is since it started

    @property
    def growth_mib(self) -> float:
        return (self.peak_kib - self.rss_before_kib) / 1024


def memory_kib(pids: list[int], key: str) -> dict[int, int]:
    """`key` (VmRSS, VmHWM) of each process still there."""
    found = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            found[pid] = status_kib(pid, key)
    return found


def measure_route(
    args: argparse.Namespace,
    server: Server,
    label: tuple[str, int],
    route: str,
    path: str,
    front: list[int],
    others: OtherLoad,
) -> Row:
    """A warm-up, then the measured run (and the /healthz probe beside it); the memory figures span both runs."""
    url = server.url + path
    before = memory_kib(front, "VmRSS")
    reset = 0
    for pid in front:
        with contextlib.suppress(OSError):  # not ours to write (another user's process): its VmHWM is then since its start
            reset_peak(pid)
            reset += 1
    warm = start_wrk(url, args.threads, args.connections, args.warmup)
    with running([warm]):
        finish_wrk(warm, args.warmup + 60)
    phase = f"{label[0]}/{label[1]}/{route}"
    table = process_table()
    ticks = sum(table[pid][2] for pid in front if pid in table)
    others.begin(phase)
    start = time.monotonic()
    load = start_wrk(url, args.threads, args.connections, args.duration)
    probe = start_wrk(server.url + "/healthz", 1, 1, args.duration) if route != "/healthz" else None
    with running([load] + ([probe] if probe else [])):
        figures = finish_wrk(load, args.duration + 60)
        during = finish_wrk(probe, args.duration + 60) if probe else None
    seconds = time.monotonic() - start
    others.end()
    table = process_table()
    ticks = sum(table[pid][2] for pid in front if pid in table) - ticks
    peak, after = memory_kib(front, "VmHWM"), memory_kib(front, "VmRSS")
    now = tree(server.pid, front_ends_only=True)
    wrk_cpu = figures.cpu_s + (during.cpu_s if during else 0.0)
    return Row(
        label[0], label[1], route, path, figures, during, len(front), sum(before.values()), sum(peak.values()), sum(after.values()),
        ticks / CLOCK_TICKS / seconds, wrk_cpu / seconds, others.phases[phase],
        {pid: [before.get(pid, 0), peak.get(pid, 0), after.get(pid, 0)] for pid in front},
        "" if now == front else f"front-end processes {front} before, {now} after", reset == len(front),
    )  # fmt: skip


def check_routes(client: httpx.Client, expected: dict[str, bytes | None]) -> None:
    """Each route answers 200 and, for a tensor, exactly its bytes."""
    for path, content in expected.items():
        response = expect(client.get(path), 200)
        if content is not None and response.content != content:
            raise RuntimeError(f"GET {path}: {len(response.content)} bytes, not the tensor's {len(content)}")


def measure_server(
    args: argparse.Namespace,
    server: Server,
    label: tuple[str, int],
    model: Path,
    others: OtherLoad,
) -> tuple[list[Row], list[int]]:
    add, bench = SAMPLES / "add.onnx", model
    with httpx.Client(base_url=server.url, timeout=300) as client:
        ids = {}
        for path in (add, bench):
            with path.open("rb") as file:
                ids[path] = expect(client.post("/models", files={"model": (path.name, file)}), 201, 200).json()["id"]
        add_bytes, bench_bytes = initializer_bytes(add), initializer_bytes(bench)
        paths = {
            "/healthz": "/healthz",
            "24 B tensor": f"/models/{ids[add]}/tensors/W",
            "64 KiB tensor": f"/models/{ids[bench]}/tensors/t64k",
            "16 MiB tensor": f"/models/{ids[bench]}/tensors/t16m",
            "summary": f"/models/{ids[bench]}",
        }
        check_routes(client, {
            paths["/healthz"]: None, paths["24 B tensor"]: add_bytes["W"], paths["64 KiB tensor"]: bench_bytes["t64k"],
            paths["16 MiB tensor"]: bench_bytes["t16m"], paths["summary"]: None,
        })  # fmt: skip
    front = settled_front_ends(server)
    for pid in front:
        print(f"  front end {pid}: {cmdline(pid)[:160]}", flush=True)
    rows = []
    for route in ROUTES:
        row = measure_route(args, server, label, route, paths[route], front, others)
        rows.append(row)
        print(f"  {line(row)}", flush=True)
    return rows, front


def line(row: Row) -> str:
    during = f"; /healthz meanwhile p99 {row.during.p99_ms:.1f} ms" if row.during else ""
    errors = f"; ERRORS {row.load.errors()}" if row.load.errors() else ""
    if row.processes > 1:
        each = ", ".join(f"{pid} {b / 1024:.0f} → {p / 1024:.0f} ({a / 1024:.0f})" for pid, (b, p, a) in row.per_process_kib.items())
        errors += f" (MiB, each process: {each})"
    return (
        f"{row.route}: {row.load.requests_s:,.0f} requests/s, p50 {row.load.p50_ms:.1f} ms, p99 {row.load.p99_ms:.1f} ms, "
        f"{row.load.bytes_s / 1e6:,.1f} MB/s{during}; front end {row.rss_before_kib / 1024:.0f} → {row.peak_kib / 1024:.0f} MiB"
        f"{errors}"
    )


# --- the report


def versions() -> str:
    names = ("uvicorn", "fastapi", "starlette", "h11", "httpx")
    found = []
    for name in names:
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append(f"{name} {importlib.metadata.version(name)}")
    wrk = subprocess.run(["wrk", "--version"], capture_output=True, text=True).stdout.splitlines()
    found.append(wrk[0].split(" Copyright")[0] if wrk else "wrk ?")
    return ", ".join(found)


def machine() -> str:
    model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
        "unknown CPU",
    )
    return (
        f"{model} ({platform.machine()}), {os.cpu_count()} cores, {status_total_gib():.0f} GiB, Linux {platform.release()}, "
        f"Python {platform.python_version()}"
    )


def fleet_versions() -> str:
    postgres = subprocess.run([str(_pg_bin() / "postgres"), "--version"], capture_output=True, text=True).stdout.strip()
    weed = subprocess.run([str(_weed()), "version"], capture_output=True, text=True).stdout.strip().splitlines()
    import obstore
    import psycopg

    return f"{postgres}; SeaweedFS {weed[0] if weed else '?'}; obstore {obstore.__version__}, psycopg {psycopg.__version__}"


def service_tree() -> str:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True).stdout
    return f"{REPO} at {commit or '?'}" + (" with uncommitted changes" if changed.strip() else "")


def ms(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms"


def table(rows: list[Row]) -> list[str]:
    lines = [
        "| store | http workers (front-end processes) | route | requests/s | p50 | p99 | MB/s | /healthz meanwhile: p50 / p99 / max "
        "| front-end memory: before → peak (after) | cores: front ends / wrk / others | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        during = f"{ms(row.during.p50_ms)} / {ms(row.during.p99_ms)} / {ms(row.during.max_ms)}" if row.during else ""
        memory = f"{row.rss_before_kib / 1024:.0f} → {row.peak_kib / 1024:.0f} MiB ({row.rss_after_kib / 1024:.0f})"
        errors = ", ".join(filter(None, [row.load.errors(), row.during.errors() if row.during else ""])) or "none"
        lines.append(
            f"| {row.store} | {row.http_workers} ({row.processes}) | {row.route} | {row.load.requests_s:,.0f} "
            f"| {ms(row.load.p50_ms)} | {ms(row.load.p99_ms)} | {row.load.bytes_s / 1e6:,.1f} | {during} | {memory} "
            f"| {row.front_end_cores:.2f} / {row.wrk_cores:.2f} / {row.other_cores:.2f} | {errors} |"
        )
    return lines


def targets(args: argparse.Namespace, rows: list[Row], counts: list[int]) -> list[str]:
    """The issue's derived figures, each with its target and verdict."""
    found: list[str] = []

    def get(store: str, workers: int, route: str) -> Row | None:
        return next((r for r in rows if (r.store, r.http_workers, r.route) == (store, workers, route)), None)

    for store in dict.fromkeys(row.store for row in rows):
        health, small = get(store, 1, "/healthz"), get(store, 1, "24 B tensor")
        if health and small:
            ratio = small.load.requests_s / health.load.requests_s
            found.append(
                f"- {store}, 1 process: the 24 B tensor at {small.load.requests_s:,.0f} requests/s = {ratio:.2f}× /healthz's "
                f"{health.load.requests_s:,.0f}; target ≥ 0.8×: {verdict(ratio >= 0.8)}"
            )
        for workers in counts:
            several = get(store, workers, "24 B tensor")
            if workers > 1 and several and small:
                ratio = several.load.requests_s / small.load.requests_s
                found.append(
                    f"- {store}, {workers} processes: the 24 B tensor at {several.load.requests_s:,.0f} requests/s = {ratio:.2f}× "
                    f"one process's; target ≥ 1.6× (with two): {verdict(ratio >= 1.6)}"
                )
        if len(counts) == 1 or 1 not in counts:
            found.append(f"- {store}: several processes' requests/s not measured (http workers {', '.join(map(str, counts))})")
        for workers in counts:
            loaded = [row for route in TENSOR_ROUTES if (row := get(store, workers, route)) and row.during]
            if loaded:
                worst = max(row.during.p99_ms for row in loaded if row.during)
                each = ", ".join(f"{row.route} {ms(row.during.p99_ms)}" for row in loaded if row.during)
                found.append(
                    f"- {store}, {workers} process{'es' if workers > 1 else ''}: /healthz p99 while {args.connections} connections "
                    f"fetch tensors: {each}; target ≤ 25 ms: {verdict(worst <= 25)}"
                )
        for workers in counts:
            big = get(store, workers, "16 MiB tensor")
            if not big:
                continue
            bound = args.connections * 2 * STREAM_CHUNK / MIB
            speed = big.load.bytes_s / 1e9
            throughput = f"{speed:.2f} GB/s; target ≥ 2 GB/s: {verdict(speed >= 2)}" if store == "local" else f"{speed:.2f} GB/s"
            found.append(
                f"- {store}, {workers} process{'es' if workers > 1 else ''}: the 16 MiB tensor at {throughput}; the front end's "
                f"memory {big.rss_before_kib / 1024:.0f} MiB before, peak +{big.growth_mib:.1f} MiB, "
                f"{(big.rss_after_kib - big.rss_before_kib) / 1024:+.1f} MiB kept after; flat (peak ≤ +{bound:.0f} MiB, "
                f"{args.connections} connections × two 1 MiB chunks): {verdict(big.growth_mib <= bound)}"
            )
    return found


def report(args: argparse.Namespace, rows: list[Row], counts: list[int], notes: list[str], others: OtherLoad) -> None:
    print()
    print(
        f"wrk: {args.threads} thread(s), {args.connections} connections, {args.duration} s a route (after {args.warmup} s of "
        f"warm-up); /healthz meanwhile: a second wrk, 1 thread, 1 connection. MB/s: wrk's Transfer/sec in 10^6 bytes."
    )
    print()
    print("\n".join(table(rows)))
    print()
    print("Targets (issue 24):")
    print()
    print("\n".join(targets(args, rows, counts)))
    if not all(row.peak_reset for row in rows):
        notes.append("some front end's VmHWM could not be reset (/proc/PID/clear_refs): its peak is since it started")
    if notes:
        print()
        print("\n".join(f"Note: {note}" for note in notes))
    print()
    print(f"Cores used by processes outside this run, by phase: {others.line()}")
    busiest = max(others.phases.values(), default=0.0)
    if busiest > BUSY_CORES:
        print(
            f"WARNING: processes outside this run used up to {busiest:.2f} of the {os.cpu_count()} cores during a phase: "
            "these figures measure a shared machine, not the service alone"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cores = os.cpu_count() or 1
    parser.add_argument("--stores", default="local,s3", help="local, s3 or both (s3: throwaway SeaweedFS and PostgreSQL)")
    parser.add_argument("--http-workers", default=",".join(dict.fromkeys(["1", str(cores)])), help="front-end process counts")
    parser.add_argument("--duration", type=int, default=10, help="seconds of wrk on each route (whole: wrk takes no fraction)")
    parser.add_argument("--warmup", type=int, default=1, help="seconds of wrk on each route before it is measured")
    parser.add_argument("--connections", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="wrk's threads (it shares the cores with the server)")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    args = parser.parse_args()
    stores = [store.strip() for store in args.stores.split(",") if store.strip()]
    if unknown := set(stores) - {"local", "s3"}:
        parser.error(f"unknown stores: {', '.join(sorted(unknown))}")
    counts = sorted({int(count) for count in args.http_workers.split(",")})
    if args.duration < 1 or args.warmup < 1 or min(counts) < 1:
        parser.error("--duration, --warmup and --http-workers must be at least 1")
    ensure_wrk()
    notes: list[str] = []
    has_flag = http_workers_flag()
    if not has_flag and counts != [1]:
        notes.append("`python -m service --help` lists no --http-workers yet: only the 1-process rows are measured")
        counts = [1]
    started = time.monotonic()
    print(f"service tree: {service_tree()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average at the start {load_average()}")
    print(f"machine: {machine()}; {versions()}", flush=True)
    model = bench_model()
    folder = Path(tempfile.mkdtemp(prefix="read-bench-"))
    rows: list[Row] = []
    problems: list[str] = []
    others = OtherLoad()
    servers: list[Server] = []
    try:
        # undone last in first out: each server stops before the fleet servers it uses, then the folder goes
        with terminated_as_exit(), contextlib.ExitStack() as cleanup:
            cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
            for store in stores:
                environ: dict[str, str] = {}
                store_args = ["--store", str(folder / "local-store")]
                if store == "s3":
                    try:
                        fleet = cleanup.enter_context(FleetServers(bucket="read-bench"))
                    except FleetUnavailable as why:
                        notes.append(f"the s3 store is skipped: {why}")
                        continue
                    print(f"fleet servers: {fleet_versions()}", flush=True)
                    environ = fleet.environ
                    store_args = ["--store", fleet.new_store_url(), "--database", fleet.new_database()]
                for workers in counts:
                    name = f"{store}, {workers} http worker{'s' if workers > 1 else ''}"
                    own = folder / f"{store}-{workers}"
                    extra = [*store_args, "--cache-dir", str(own / "cache")] if store == "s3" else list(store_args)
                    extra += ["--http-workers", str(workers)] if has_flag else []
                    print(f"{name}:", flush=True)
                    server = Server(name, own, extra, environ, cores)
                    servers.append(server)
                    try:
                        found, _ = measure_server(args, server, (store, workers), model, others)
                        rows += found
                        if workers > 1 and found and found[0].processes < workers:
                            problems.append(f"{name}: {found[0].processes} front-end process(es), not {workers}")
                    finally:
                        stop_server(server, problems)
                    if tracebacks := server.tracebacks():
                        problems.append(f"{name}: {tracebacks} traceback(s) in its log ({server.log_path})")
                        shutil.copy(server.log_path, CACHE / f"read-bench-{store}-{workers}.log")
            for row in rows:
                if row.processes_changed:
                    problems.append(f"{row.store}, {row.http_workers} http workers, {row.route}: {row.processes_changed}")
                for figures, what in ((row.load, row.route), (row.during, "/healthz meanwhile")):
                    if figures and figures.errors():
                        problems.append(f"{row.store}, {row.http_workers} http workers, {row.route}: {what}: {figures.errors()}")
            report(args, rows, counts, notes, others)
            print(f"Load average at the end {load_average()}.")
            print("Problems seen: " + ("; ".join(problems) if problems else "none (no wrk error, no traceback in the logs)"))
            if args.json:
                raw = {
                    "machine": machine(), "versions": versions(), "service_tree": service_tree(),
                    "args": {key: str(value) for key, value in vars(args).items()}, "http_workers": counts, "notes": notes,
                    "problems": problems, "other_load": others.phases,
                    "rows": [{**asdict(row), "growth_mib": row.growth_mib} for row in rows],
                }  # fmt: skip
                args.json.write_text(json.dumps(raw, indent=1, default=str))
                print(f"raw figures: {args.json}")
    finally:
        print(f"({time.monotonic() - started:.0f} s in all)")


if __name__ == "__main__":
    run_stopping_on_interrupt(main)
