"""Liveness as a Kubernetes probe sees it ("Front ends never starve"): `/healthz` from a new connection per probe.

A real `python -m service` with its default settings (as many front ends and
import workers as cores) on a free loopback port, a temporary store, is
started here (bench/campaign.py's `Server`). A prober, a process of its own
like a kubelet, then opens a NEW TCP connection for every probe: connect,
`GET /healthz` (`Connection: close`), read the whole answer, close; one
probe every PERIOD ms (20 to 50; 25 by default) from the start of the
previous one, each timed from before its connect to its last byte. No
keep-alive connection is reused, so every probe also waits for a front end
to accept it: what a front end that holds its interpreter lock delays first.
Phases, each bounded in time:

a. idle: the server serving nothing else, IDLE seconds;
b. tensor GETs: 40 connections (`--connections`) fetch a tensor with wrk
   (Debian's package; installed with apt-get when missing and this runs as
   root), as bench/read_bench.py's load does, for DURATION seconds after a
   second of warm-up, once on testdata/samples/add.onnx's 24-byte `W` and once
   on a 64 KiB float32 initializer (bench/read_bench.py's model, made once in
   .cache/bench/); every answer is checked byte for byte first;
c. an import of 200,000 initializers: the POST (multipart upload) of
   bench/catalog_bench.py's model of 200,000 one-element float initializers
   with exporter-style names (8.6 MB), the probes taken from the request's
   first byte to its answer; ROUNDS rounds (3), each a new import (the model
   is deleted between rounds, outside the window);
d. (`--phases ...,nodes`; not in the default run) the same for the
   200,000-node model (bench/make_models.py's .cache/bench/nodes.onnx, made
   here if missing).

Each phase reports the probes' count, p50, p99 and max (and any that failed:
a refused or reset connection, a non-200 answer, or no answer within 5 s);
c and d the median of their rounds' p99 (and each round's). The cores the
processes outside this run used meanwhile are shown (the machine may be
shared: bench/fleet_bench.py's `OtherLoad`).

Usage: .venv/bin/python bench/liveness_bench.py [--phases idle,tensors,initializers]
       [--period 25] [--idle 10] [--duration 15] [--rounds 3] [--connections 40] [--json FILE]
       [--tree CHECKOUT] [--wait-load 1.5]
(--tree: the service of another checkout, e.g. a copy of the tree before a change; --wait-load: first wait,
up to 10 minutes, for the 1-minute load average to fall below it; --json: the figures and every probe's time.)
Bounds (exit 1 when one is missed, or when a probe failed): b. p99 <= 25 ms on
each tensor route; c. the median of the rounds' p99 <= 100 ms. (a and d are
reported, not bounded.)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shutil
import socket
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path

import campaign  # bench/ is on sys.path as this script's folder
import httpx
from campaign import Server
from catalog_bench import initializer_model
from checks_bench import wait_for_load
from fleet_bench import SAMPLES, OtherLoad, expect, load_average, nodes_model, run_stopping_on_interrupt, terminated_as_exit
from read_bench import (
    bench_model,
    check_routes,
    ensure_wrk,
    finish_wrk,
    initializer_bytes,
    machine,
    running,
    service_tree,
    start_wrk,
    tree,
    versions,
)
from service_bench import percentile

PROBE_TIMEOUT = 5.0  # seconds: a probe with no whole answer by then failed (a kubelet's default is 1 s)
TENSOR_BOUND_MS = 25.0
IMPORT_BOUND_MS = 100.0
INITIALIZERS = 200_000
PHASES = ("idle", "tensors", "initializers", "nodes")


# --- the prober (a process of its own, as a kubelet is)


def probe_once(port: int) -> tuple[float, float, str]:
    """One probe on a new connection: (its start on the monotonic clock, its seconds, "200" or what went wrong)."""
    request = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: liveness-bench\r\nConnection: close\r\n\r\n".encode()
    start = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=PROBE_TIMEOUT) as connection:
            connection.sendall(request)
            answer = bytearray()
            while chunk := connection.recv(65536):
                answer += chunk
        outcome = answer[9:12].decode(errors="replace") if answer.startswith(b"HTTP/1.1 ") else "no HTTP answer"
    except OSError as error:
        outcome = type(error).__name__
    return start, time.monotonic() - start, outcome


def probe_loop(port: int, period: float, control: Connection) -> None:
    """Probes every `period` seconds (from one probe's start to the next) until the parent says stop; sends the probes."""
    probes = []
    next_start = time.monotonic()
    while not control.poll(max(0.0, next_start - time.monotonic())):
        next_start = time.monotonic() + period
        probes.append(probe_once(port))
    control.send(probes)
    control.close()


class Prober:
    """The prober process, while the block runs; `probes` afterwards: (start, seconds, outcome)."""

    def __init__(self, port: int, period: float) -> None:
        self.port, self.period = port, period
        self.probes: list[tuple[float, float, str]] = []

    def __enter__(self) -> Prober:
        self.control, theirs = multiprocessing.get_context("fork").Pipe()
        self.process = multiprocessing.get_context("fork").Process(target=probe_loop, args=(self.port, self.period, theirs), daemon=True)
        self.process.start()
        theirs.close()
        return self

    def __exit__(self, *_: object) -> None:
        try:
            self.control.send("stop")
            if self.control.poll(PROBE_TIMEOUT + 30):
                self.probes = self.control.recv()
        finally:
            self.control.close()
            self.process.join(5)
            if self.process.is_alive():
                self.process.kill()
                self.process.join()

    def within(self, start: float, end: float) -> list[tuple[float, float, str]]:
        """The probes that overlapped [start, end] (begun before its end, ended after its start)."""
        return [probe for probe in self.probes if probe[0] <= end and probe[0] + probe[1] >= start]


# --- the figures


@dataclass
class Figures:
    phase: str
    probes: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    failed: dict[str, int]
    seconds: float
    other_cores: float
    rounds_p99_ms: list[float] = field(default_factory=list)  # c and d: each round's p99
    rounds_seconds: list[float] = field(default_factory=list)  # c and d: each POST's time
    probes_ms: list[float] = field(default_factory=list)  # every probe's time, in order (for --json)
    bound_ms: float | None = None

    @property
    def figure_ms(self) -> float:
        """What the bound is held against: the p99, or the median of the rounds' p99."""
        return statistics.median(self.rounds_p99_ms) if self.rounds_p99_ms else self.p99_ms

    @property
    def met(self) -> bool:
        return not self.failed and (self.bound_ms is None or self.figure_ms <= self.bound_ms)


def figures(phase: str, probes: list[tuple[float, float, str]], seconds: float, others: float, bound: float | None) -> Figures:
    times = [probe[1] * 1000 for probe in probes]
    failed: dict[str, int] = {}
    for _, _, outcome in probes:
        if outcome != "200":
            failed[outcome] = failed.get(outcome, 0) + 1
    if not times:
        return Figures(phase, 0, float("nan"), float("nan"), float("nan"), {"no probe": 1}, seconds, others, bound_ms=bound)
    return Figures(
        phase, len(times), percentile(times, 0.5), percentile(times, 0.99), max(times), failed, seconds, others, bound_ms=bound,
        probes_ms=[round(time, 2) for time in times],
    )  # fmt: skip


# --- the phases


def idle_phase(server: Server, args: argparse.Namespace, others: OtherLoad) -> Figures:
    others.begin("idle")
    with Prober(server.port, args.period / 1000) as prober:
        time.sleep(args.idle)
    others.end()
    return figures("a. idle", prober.probes, args.idle, others.phases["idle"], None)


def tensor_phases(server: Server, args: argparse.Namespace, others: OtherLoad) -> list[Figures]:
    add, model = SAMPLES / "add.onnx", bench_model()
    with httpx.Client(base_url=server.url, timeout=300) as client:
        ids = {}
        for path in (add, model):
            with path.open("rb") as file:
                ids[path] = expect(client.post("/models", files={"model": (path.name, file)}), 201, 200).json()["id"]
        routes = {"24 B tensor": f"/models/{ids[add]}/tensors/W", "64 KiB tensor": f"/models/{ids[model]}/tensors/t64k"}
        check_routes(
            client, {routes["24 B tensor"]: initializer_bytes(add)["W"], routes["64 KiB tensor"]: initializer_bytes(model)["t64k"]}
        )
    found = []
    for route, url in routes.items():
        warm = start_wrk(server.url + url, 1, args.connections, 1)
        with running([warm]):
            finish_wrk(warm, 60)
        others.begin(route)
        with Prober(server.port, args.period / 1000) as prober:
            load = start_wrk(server.url + url, 1, args.connections, args.duration)
            with running([load]):
                done = finish_wrk(load, args.duration + 60)
        others.end()
        if done.errors():
            raise RuntimeError(f"wrk on {route}: {done.errors()}")
        row = figures(
            f"b. {args.connections} connections fetch the {route}", prober.probes, args.duration, others.phases[route], TENSOR_BOUND_MS
        )
        print(f"  {line(row)}; wrk: {done.requests_s:,.0f} requests/s, p99 {done.p99_ms:.1f} ms", flush=True)
        found.append(row)
    return found


def import_phase(server: Server, args: argparse.Namespace, others: OtherLoad, label: str, name: str, data: bytes) -> Figures:
    """ROUNDS POSTs of `data`, each a new import; the probes from each request's first byte to its answer."""
    windows: list[list[tuple[float, float, str]]] = []
    seconds: list[float] = []
    others.begin(label)
    busy = 0.0
    with httpx.Client(base_url=server.url, timeout=600) as client:
        for _ in range(args.rounds):
            with Prober(server.port, args.period / 1000) as prober:
                time.sleep(0.5)  # the prober running before the first byte
                start = time.monotonic()
                response = client.post("/models", files={"model": (name, data)})
                end = time.monotonic()
                time.sleep(0.1)
            expect(response, 201)  # 201: imported now (a model held already is answered without a worker)
            windows.append(prober.within(start, end))
            seconds.append(end - start)
            busy += end - start
            expect(client.delete(f"/models/{response.json()['id']}"), 204)  # so that the next round imports again
            time.sleep(1.0)
    others.end()
    row = figures(label, [probe for window in windows for probe in window], busy, others.phases[label], IMPORT_BOUND_MS)
    row.rounds_p99_ms = [percentile([probe[1] * 1000 for probe in window], 0.99) for window in windows]
    row.rounds_seconds = seconds
    print(f"  {line(row)}", flush=True)
    return row


# --- the report


def ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 10 else f"{value:.1f} ms"


def line(row: Figures) -> str:
    rounds = f"; rounds' p99 {', '.join(ms(p) for p in row.rounds_p99_ms)} (POST {', '.join(f'{s:.2f} s' for s in row.rounds_seconds)})"
    failed = f"; FAILED {row.failed}" if row.failed else ""
    return (
        f"{row.phase}: {row.probes} probes, p50 {ms(row.p50_ms)}, p99 {ms(row.p99_ms)}, max {ms(row.max_ms)}"
        f"{rounds if row.rounds_p99_ms else ''}{failed}"
    )


def table(rows: list[Figures]) -> list[str]:
    lines = [
        "| phase | probes | p50 | p99 | max | bound | verdict | cores used by others |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        p99 = ms(row.p99_ms)
        if row.rounds_p99_ms:
            p99 = f"{ms(row.figure_ms)} (median of {', '.join(ms(p) for p in row.rounds_p99_ms)}; all probes {ms(row.p99_ms)})"
        bound = f"p99 ≤ {row.bound_ms:.0f} ms" if row.bound_ms is not None else ""
        verdict = ("**met**" if row.met else "**missed**") if row.bound_ms is not None or row.failed else ""
        if row.failed:
            verdict += f" (failed probes: {row.failed})"
        lines.append(
            f"| {row.phase} | {row.probes} | {ms(row.p50_ms)} | {p99} | {ms(row.max_ms)} | {bound} | {verdict} | {row.other_cores:.2f} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phases", default="idle,tensors,initializers", help=f"among {', '.join(PHASES)}")
    parser.add_argument("--period", type=float, default=25.0, help="ms from one probe's start to the next (20 to 50)")
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of the idle phase")
    parser.add_argument("--duration", type=int, default=15, help="seconds of wrk on each tensor route")
    parser.add_argument("--rounds", type=int, default=3, help="POSTs of each import phase")
    parser.add_argument("--connections", type=int, default=40)
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--tree", type=Path, help="run the service of another checkout (a copy of the tree before a change)")
    parser.add_argument(
        "--wait-load", type=float, default=0.0, help="first wait (up to 10 minutes) for the 1-minute load average to fall below this"
    )
    args = parser.parse_args()
    phases = [phase.strip() for phase in args.phases.split(",") if phase.strip()]
    if unknown := set(phases) - set(PHASES):
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if not 20 <= args.period <= 50 or args.duration < 1 or args.rounds < 1 or not 0 < args.idle <= 60:
        parser.error("--period must be 20 to 50 ms, --duration and --rounds at least 1, --idle 0 to 60 s")
    if "tensors" in phases:
        ensure_wrk()
    if args.wait_load:
        waited = wait_for_load(args.wait_load, 600.0)
        print(f"waited {waited:.0f} s for the 1-minute load average to fall below {args.wait_load:g}")
    started = time.monotonic()
    if args.tree:
        campaign.REPO = args.tree.resolve()  # the folder `python -m service` starts in: its `service` is the one imported
    print(f"service tree: {args.tree.resolve() if args.tree else service_tree()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average at the start {load_average()}")
    print(f"machine: {machine()}; {versions() if shutil.which('wrk') else ''}", flush=True)
    initializers = initializer_model(INITIALIZERS)[0] if "initializers" in phases else b""
    nodes = nodes_model().read_bytes() if "nodes" in phases else b""
    folder = Path(tempfile.mkdtemp(prefix="liveness-bench-"))
    rows: list[Figures] = []
    others = OtherLoad()
    tracebacks = 0
    try:
        with terminated_as_exit():
            server = Server(folder / "store", SAMPLES)
            try:
                server.start()
                front = tree(server.process.pid if server.process else 0, front_ends_only=True)
                print(f"server {server.url}, defaults; processes (supervisor, front ends): {', '.join(map(str, front))}", flush=True)
                if "idle" in phases:
                    rows.append(idle_phase(server, args, others))
                    print(f"  {line(rows[-1])}", flush=True)
                if "tensors" in phases:
                    rows += tensor_phases(server, args, others)
                if "initializers" in phases:
                    rows.append(
                        import_phase(server, args, others, f"c. POST of {INITIALIZERS:,} initializers", "initializers.onnx", initializers)
                    )
                if "nodes" in phases:
                    rows.append(import_phase(server, args, others, "d. POST of 200,000 nodes", "nodes.onnx", nodes))
            finally:
                server.stop()
                tracebacks = server.log.read_text(errors="replace").count("Traceback") if server.log.exists() else 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print()
    print(f"/healthz from a new connection per probe, one every {args.period:g} ms; {args.connections} wrk connections in b.")
    print()
    print("\n".join(table(rows)))
    print()
    busiest = max(others.phases.values(), default=0.0)
    if busiest > 0.25:
        print(f"WARNING: processes outside this run used up to {busiest:.2f} cores during a phase: a shared machine's figures")
    if tracebacks:
        print(f"WARNING: {tracebacks} traceback(s) in the server's log")
    print(f"Load average at the end {load_average()}; {time.monotonic() - started:.0f} s in all.")
    if args.json:
        args.json.write_text(
            json.dumps({"machine": machine(), "args": vars(args), "rows": [asdict(row) for row in rows]}, indent=1, default=str)
        )
    if not all(row.met for row in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    run_stopping_on_interrupt(main)
