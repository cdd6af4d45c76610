"""The fleet store against the local store, side by side in one run (issue 21).

Starts a throwaway SeaweedFS (S3) and PostgreSQL on 127.0.0.1
(tools/fleet_servers.py) and real `python -m service` processes, the same
`--workers` for each: one on the local store (`--store FOLDER`), one on the
fleet store (`--store s3://BUCKET/PREFIX --database postgresql://...
--cache-dir DIR`). Every request goes over loopback; the measurements
alternate between the two stores in rounds, so a change in the machine's load
touches both alike.

1. One small tensor (testdata/samples/add.onnx's W, uploaded): GETs one at a
   time from one client (httpx), after a warm-up; p50 and p99. Beside it, the
   same 24-byte ranged GET of the stored object from this process (obstore,
   configured as the service configures it): one S3 round trip alone.
1b. Distinct small tensors (a model of 1,000 24-byte initializers), each
   fetched once, so that no cache of recent reads can answer: p50 and p99.
2. A 100 MB tensor (a model with one 100 MB initializer, made once in
   .cache/bench/, uploaded by multipart): GET throughput with curl (the
   server's figure; median of 3) and with httpx (checked byte for byte), and
   the front end's memory meanwhile (VmRSS sampled every 5 ms and VmHWM,
   against VmRSS before).
3. POST of a distinct ~9 KB model (bench/service_bench.py's), one client,
   sequential, after a warm-up: p50 and p99.
4. POST of the 200,000-node model (.cache/bench/nodes.onnx, made here by
   bench/make_models.py's code if missing), multipart; median of 3, each a
   new import (the model is deleted after each), each after a `sync` (the
   local store's fsync would otherwise also write back what earlier phases
   left dirty).
5. Imports per second from CONCURRENCY clients posting distinct small models
   (a load generator in another process): the local store with one replica,
   the fleet store with one replica and with three (the same bucket and
   database, each its own cache folder; client i posts to replica i mod 3);
   the cores' use from /proc/stat and each process group's CPU time.

The machine may be shared: for each phase the run reports the cores that
processes outside it used meanwhile (the cores' busy time less its own). Every
process it starts is stopped at its end, on Ctrl-C and SIGTERM too (and dies
with it if it is killed).

Usage: python bench/fleet_bench.py [--workers 2] [--gets 600] [--posts 40]
       [--imports 240] [--concurrency 6] [--rounds 2] [--tree CHECKOUT]
(--tree: measure the service of another checkout, its compiled modules built
or copied in; e.g. a `git archive` of a commit.)
Targets (issue 21): 1. fleet p50 <= 2x local; 2. >= 300 MB/s, front-end memory
flat; 3. fleet p50 <= 2x local; 4. fleet <= 1.3x local; 5. three replicas >=
2.5x one replica's imports per second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import httpx
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tools"))
from fleet_servers import FleetServers  # noqa: E402
from service_bench import free_port, percentile, small_model  # noqa: E402

CACHE = REPO / ".cache" / "bench"
SAMPLES = REPO / "testdata" / "samples"
TREE = [REPO]  # the checkout the service processes run from (--tree)
DISTINCT_TENSORS = 1_000  # 1b.: a model of this many small tensors, each fetched once
BIG_ELEMENTS = 25_000_000  # float32: 100 MB
BIG_MODEL = CACHE / "fleet-100mb.onnx"
NODES_MODEL = CACHE / "nodes.onnx"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
CURL_FIGURES = "%{http_code} %{size_download} %{speed_download}"
LOAD_TIMEOUT = 300.0  # seconds one load-generator run may take


# --- models


def big_model() -> Path:
    """A model whose one initializer holds 100 MB of float32 in raw_data (made once)."""
    if not BIG_MODEL.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        weights = np.random.default_rng(0).standard_normal(BIG_ELEMENTS).astype(np.float32)
        graph = helper.make_graph(
            [helper.make_node("Identity", ["big"], ["y"])], "big", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [numpy_helper.from_array(weights, "big")],
        )  # fmt: skip
        part = BIG_MODEL.with_suffix(".part")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), part)
        part.rename(BIG_MODEL)
    return BIG_MODEL


def big_tensor_bytes() -> bytes:
    return np.random.default_rng(0).standard_normal(BIG_ELEMENTS).astype(np.float32).tobytes()


def nodes_model() -> Path:
    if not NODES_MODEL.exists():
        import make_models

        CACHE.mkdir(parents=True, exist_ok=True)
        make_models.make_node_model(small=False)
    return NODES_MODEL


# --- processes


def _die_with_parent() -> None:  # in the child: SIGKILL when the bench's thread that started it ends
    ctypes.CDLL(None).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


class Server:
    """One `python -m service` on a free loopback port; stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, name: str, folder: Path, store_args: list[str], env: dict[str, str], workers: int) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        folder.mkdir(parents=True, exist_ok=True)
        self.log_path = folder / "service.log"
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("ONNX_SERVICE_", "AWS_"))}
        environment.update(env)
        command = [
            sys.executable, "-m", "service", "--host", "127.0.0.1", "--port", str(self.port), "--data-root", str(SAMPLES),
            "--workers", str(workers), "--http-workers", "1", *store_args,  # one front end: its memory is the figure
        ]  # fmt: skip
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=TREE[0], env=environment, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 (it only calls prctl)
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{name} exited with {self.process.returncode}:\n{self.log_path.read_text()[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{name} did not become ready:\n{self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def tracebacks(self) -> int:
        return self.log_path.read_text(errors="replace").count("Traceback") if self.log_path.exists() else 0


# --- /proc


def status_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {key} for {pid}")


def reset_peak(pid: int) -> None:
    """VmHWM back to the current RSS (Linux >= 4.0)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of all cores, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    total = sum(values[:8])  # without guest time, already counted in user
    return total - idle, total


def process_table() -> dict[int, tuple[int, str, int]]:
    """pid -> (parent pid, command name, CPU ticks of it and its reaped children)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        table[int(entry.name)] = (int(fields[1]), name, sum(int(v) for v in fields[11:15]))  # utime stime cutime cstime
    return table


def cpu_by_group(roots: dict[str, list[int]]) -> dict[str, int]:
    """CPU ticks of each group of process trees (the roots and their descendants) just now."""
    table = process_table()
    owner: dict[int, str] = {}
    for group, pids in roots.items():
        for pid in pids:
            owner[pid] = group

    def group_of(pid: int) -> str | None:
        seen = 0
        while pid > 1 and seen < 64:
            if pid in owner:
                return owner[pid]
            pid = table[pid][0] if pid in table else 0
            seen += 1
        return None

    totals = dict.fromkeys(roots, 0)
    for pid, (_, _, ticks) in table.items():
        found = group_of(pid)
        if found is not None:
            totals[found] += ticks
    return totals


def run_ticks() -> int:
    """CPU ticks of this run so far: this process, its reaped children, and every live descendant (with theirs)."""
    table = process_table()
    me = os.getpid()

    def descends(pid: int) -> bool:
        for _ in range(64):
            parent = table[pid][0] if pid in table else 0
            if parent == me:
                return True
            if parent <= 1:
                return False
            pid = parent
        return False

    own = os.times()
    ticks = round((own.user + own.system + own.children_user + own.children_system) * CLOCK_TICKS)
    return ticks + sum(entry[2] for pid, entry in table.items() if descends(pid))


class OtherLoad:
    """The cores that processes outside this run used during each phase (the machine is shared): the cores' busy
    time from /proc/stat less this run's CPU time, per second of the phase."""

    def __init__(self) -> None:
        self.phases: dict[str, float] = {}
        self.current: tuple[str, int, int, float] | None = None

    def begin(self, name: str) -> None:
        """Ends the phase running, if any, and begins `name`."""
        self.end()
        self.current = (name, cpu_times()[0], run_ticks(), time.monotonic())

    def end(self) -> None:
        if self.current is None:
            return
        name, busy, ours, start = self.current
        others = (cpu_times()[0] - busy) - (run_ticks() - ours)
        self.phases[name] = max(0.0, others / CLOCK_TICKS / max(1e-3, time.monotonic() - start))
        self.current = None

    def line(self) -> str:
        return ", ".join(f"{name} {cores:.2f}" for name, cores in self.phases.items())


class RssSampler:
    """VmRSS of one process every `period` seconds in a thread, until stopped; the maximum kept."""

    def __init__(self, pid: int, period: float = 0.005) -> None:
        self.pid = pid
        self.period = period
        self.maximum = 0
        self.samples = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.done.is_set():
            self.maximum = max(self.maximum, status_kib(self.pid, "VmRSS"))
            self.samples += 1
            time.sleep(self.period)

    def __enter__(self) -> RssSampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()


# --- measurements


def upload(client: httpx.Client, path: Path) -> httpx.Response:
    with path.open("rb") as file:
        return client.post("/models", files={"model": (path.name, file)})


def post_bytes(client: httpx.Client, name: str, data: bytes) -> tuple[float, httpx.Response]:
    start = time.perf_counter()
    response = client.post("/models", files={"model": (name, data)})
    return time.perf_counter() - start, response


def expect(response: httpx.Response, *statuses: int) -> httpx.Response:
    if response.status_code not in statuses:
        raise RuntimeError(f"{response.request.method} {response.request.url}: {response.status_code} {response.text[:500]}")
    return response


def small_gets(client: httpx.Client, path: str, count: int, expected: bytes) -> list[float]:
    return timed_gets(client, [(path, expected)] * count)


def timed_gets(client: httpx.Client, wanted: list[tuple[str, bytes]]) -> list[float]:
    """Each GET's time, one at a time; each answer checked."""
    times = []
    for path, expected in wanted:
        start = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - start)
        if response.status_code != 200 or response.content != expected:
            raise RuntimeError(f"GET {path}: {response.status_code} {response.content[:200]!r}")
    return times


def distinct_tensor_model(count: int) -> tuple[bytes, list[bytes]]:
    """A model of `count` 24-byte initializers (six float32 each, all different), and their bytes."""
    values = [np.arange(6, dtype=np.float32) + 6 * index for index in range(count)]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "distinct",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [6])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [6])],
        [numpy_helper.from_array(value, f"t{index}") for index, value in enumerate(values)],
    )  # fmt: skip
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    return data, [value.tobytes() for value in values]


@dataclass
class BigGet:
    curl_mb_s: list[float] = field(default_factory=list)
    httpx_mb_s: float = 0.0
    rss_before_mb: float = 0.0
    growth_mb: list[float] = field(default_factory=list)  # each GET's: the first (httpx, checked), then curl's
    samples: int = 0
    upload_s: float = 0.0


@contextlib.contextmanager
def rss_growth(pid: int, figures: BigGet) -> Iterator[None]:
    """The front end's RSS growth over the block: the most of VmRSS sampled and VmHWM, less VmRSS before."""
    before = status_kib(pid, "VmRSS")
    reset_peak(pid)
    with RssSampler(pid) as sampler:
        yield
    figures.growth_mb.append((max(sampler.maximum, status_kib(pid, "VmHWM")) - before) / 1024)
    figures.samples += sampler.samples
    if not figures.rss_before_mb:
        figures.rss_before_mb = before / 1024


def big_get(server: Server, client: httpx.Client, model_id: str, expected: bytes, curl_runs: int) -> BigGet:
    """The first GET with httpx, compared byte for byte; then `curl_runs` with curl (the server's throughput)."""
    figures = BigGet()
    path = f"/models/{model_id}/tensors/big"
    time.sleep(0.5)  # let the front end settle after the upload
    with rss_growth(server.pid, figures):
        start, received = time.perf_counter(), 0
        with client.stream("GET", path) as response:
            expect(response, 200)
            view = memoryview(expected)
            for chunk in response.iter_raw(1 << 20):
                if view[received : received + len(chunk)] != chunk:
                    raise RuntimeError(f"GET {path}: bytes differ from offset {received}")
                received += len(chunk)
        seconds = time.perf_counter() - start
    if received != len(expected):
        raise RuntimeError(f"GET {path}: {received} bytes")
    figures.httpx_mb_s = received / seconds / 1e6
    for _ in range(curl_runs):
        with rss_growth(server.pid, figures):
            done = subprocess.run(
                ["curl", "-s", "--noproxy", "*", "-o", "/dev/null", "-w", CURL_FIGURES, server.url + path],
                check=True, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
        code, size, speed = done.stdout.split()
        if code != "200" or int(size) != len(expected):
            raise RuntimeError(f"curl GET {path}: {code}, {size} bytes")
        figures.curl_mb_s.append(float(speed) / 1e6)
    return figures


def object_get(bucket: tuple[str, dict[str, str]], model_id: str, length: int, count: int) -> list[float]:
    """`count` ranged GETs of `length` bytes of the stored model file, one at a time, with the service's
    own client (obstore, configured as the service configures it): what one S3 round trip costs."""
    import obstore

    from service.store.s3.objects import connect

    url, environ = bucket
    name, _, prefix = url.removeprefix("s3://").partition("/")
    store = connect(name, prefix, environ)
    keys = [meta["path"] for batch in obstore.list(store, f"models/{model_id}/") for meta in batch]
    key = next(key for key in keys if key.endswith("/files/model.onnx"))
    times = []
    for _ in range(count):
        start = time.perf_counter()
        data = obstore.get(store, key, options={"range": (0, length)}).bytes()
        times.append(time.perf_counter() - start)
        if len(data) != length:
            raise RuntimeError(f"a ranged GET of {key}: {len(data)} bytes")
    return times


def nodes_post(client: httpx.Client, data: bytes) -> float:
    os.sync()  # no import pays for the writeback of the files earlier phases left dirty (a local commit fsyncs)
    seconds, response = post_bytes(client, "nodes.onnx", data)
    expect(response, 201)
    expect(client.delete(f"/models/{response.json()['id']}"), 204)  # so that the next POST imports and commits again
    return seconds


# --- the load generator (its own process)


async def post_all(urls: list[str], models: list[bytes], concurrency: int) -> tuple[list[float], float, dict[str, int]]:
    latencies: list[float] = []
    statuses: dict[str, int] = {}

    async def client_loop(url: str) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            while models:
                model = models.pop()
                start = time.perf_counter()
                response = await client.post("/models", files={"model": ("m.onnx", model)})
                latencies.append(time.perf_counter() - start)
                statuses[str(response.status_code)] = statuses.get(str(response.status_code), 0) + 1

    start = time.perf_counter()
    await asyncio.wait_for(asyncio.gather(*(client_loop(urls[index % len(urls)]) for index in range(concurrency))), LOAD_TIMEOUT)
    return latencies, time.perf_counter() - start, statuses


def load_generator(urls: str, first_seed: str, count: str, concurrency: str) -> None:
    """Makes the models, says `ready`, waits for a line, posts them, prints the figures as JSON, waits for EOF:
    alive and idle outside the measured window, so that the window holds only the load."""
    models = [small_model(seed) for seed in range(int(first_seed), int(first_seed) + int(count))]
    print("ready", flush=True)
    sys.stdin.readline()
    latencies, wall, statuses = asyncio.run(post_all(urls.split(","), models, int(concurrency)))
    print(json.dumps({"latencies": latencies, "wall": wall, "statuses": statuses}), flush=True)
    sys.stdin.read()


@dataclass
class Throughput:
    label: str
    replicas: int
    per_second: float
    p50_ms: float
    p99_ms: float
    busy: float  # the cores' use in the window, 0..1
    cpu_s: dict[str, float]  # CPU seconds of each process group in the window
    others: float  # cores used by processes outside this run in the window

    def cpu_per_import_ms(self, count: int) -> float:
        return sum(self.cpu_s.values()) / count * 1000


GROUPS = ("front ends", "import workers", "postgres", "weed", "load generator")


def run_load(label: str, servers: list[Server], first_seed: int, count: int, concurrency: int) -> Throughput:
    """One load-generator run against `servers`; the cores' use and each process group's CPU time in the window."""
    urls = ",".join(server.url for server in servers)
    command = [sys.executable, __file__, "--load-generator", urls, str(first_seed), str(count), str(concurrency)]
    generator = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, preexec_fn=_die_with_parent,  # noqa: PLW1509
    )  # fmt: skip
    watchdog = threading.Timer(LOAD_TIMEOUT + 60, generator.kill)
    watchdog.start()
    try:
        assert generator.stdin is not None and generator.stdout is not None
        if generator.stdout.readline().strip() != "ready":
            raise RuntimeError("the load generator did not start")
        table = process_table()
        me = os.getpid()
        roots = {
            "front ends": [server.pid for server in servers],
            "import workers": [pid for pid, (parent, _, _) in table.items() if parent in {server.pid for server in servers}],
            # FleetServers' processes are this process's children: the postmaster (its backends below it) and weed
            "postgres": [pid for pid, (parent, name, _) in table.items() if parent == me and name == "postgres"],
            "weed": [pid for pid, (parent, name, _) in table.items() if parent == me and name == "weed"],
            "load generator": [generator.pid],
        }
        busy_before, total_before = cpu_times()
        ticks_before, ours_before, start = cpu_by_group(roots), run_ticks(), time.monotonic()
        generator.stdin.write("go\n")
        generator.stdin.flush()
        output = generator.stdout.readline()
        busy_after, total_after = cpu_times()
        ticks_after, ours_after, seconds = cpu_by_group(roots), run_ticks(), time.monotonic() - start
        generator.stdin.close()
        generator.wait(30)
    finally:
        watchdog.cancel()
        if generator.poll() is None:
            generator.kill()
            generator.wait()
    if not output:
        raise RuntimeError(f"{label}: the load generator gave no figures (exit status {generator.returncode})")
    result = json.loads(output)
    if set(result["statuses"]) != {"201"}:
        raise RuntimeError(f"{label}: answers {result['statuses']} (every import must be new: 201)")
    latencies = result["latencies"]
    cpu_s = {group: (ticks_after[group] - ticks_before[group]) / CLOCK_TICKS for group in roots if roots[group]}
    return Throughput(
        label, len(servers), count / result["wall"], percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000,
        (busy_after - busy_before) / max(1, total_after - total_before), cpu_s,
        max(0.0, (busy_after - busy_before) - (ours_after - ours_before)) / CLOCK_TICKS / seconds,
    )  # fmt: skip


# --- report


def machine_line() -> str:
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    memory = status_total_gib()
    pg = subprocess.run([str(_pg_bin() / "postgres"), "--version"], capture_output=True, text=True).stdout.strip()
    weed = subprocess.run([str(_weed()), "version"], capture_output=True, text=True).stdout.strip().splitlines()
    import obstore
    import psycopg

    return (
        f"{model} ({platform.machine()}), {os.cpu_count()} cores, {memory:.0f} GiB, Linux {platform.release()}, "
        f"Python {platform.python_version()}; {pg}; SeaweedFS {weed[0] if weed else '?'}; obstore {obstore.__version__}, "
        f"psycopg {psycopg.__version__}"
    )


def status_total_gib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) / (1 << 20)
    return 0.0


def _pg_bin() -> Path:
    from fleet_servers import postgres_bin_folder

    return postgres_bin_folder()


def _weed() -> Path:
    from fleet_servers import weed_binary

    return weed_binary()


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def verdict(met: bool) -> str:
    return "**met**" if met else "**missed**"


@contextlib.contextmanager
def terminated_as_exit() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP end the run as Ctrl-C does: every `finally` runs, every process is stopped.
    (SIGINT set here too: a shell's background job starts with it ignored, and Python then leaves it so.)"""

    def leave(signum: int, _: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {signum: signal.signal(signum, leave) for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2, help="--workers of every service process")
    parser.add_argument("--gets", type=int, default=600, help="small-tensor GETs per store (after 100 of warm-up)")
    parser.add_argument("--posts", type=int, default=40, help="small POSTs per store (after 10 of warm-up)")
    parser.add_argument("--node-runs", type=int, default=3)
    parser.add_argument("--curl-runs", type=int, default=3)
    parser.add_argument("--imports", type=int, default=240, help="imports per throughput run")
    parser.add_argument("--concurrency", type=int, default=6, help="clients of a throughput run")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of alternation (GETs, POSTs and throughput)")
    parser.add_argument("--tree", type=Path, default=REPO, help="the checkout whose service is measured (compiled modules built)")
    parser.add_argument("--load-generator", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_generator:
        load_generator(*args.load_generator)
        return
    if not shutil.which("curl"):
        raise SystemExit("curl is needed (the 100 MB GET's throughput is measured with a client in C)")
    TREE[0] = args.tree.resolve()
    where = subprocess.run([sys.executable, "-c", "import service; print(service.__file__)"], cwd=TREE[0], capture_output=True, text=True)
    if not where.stdout.startswith(str(TREE[0]) + "/"):
        raise SystemExit(f"python -m service in {TREE[0]} would not run that tree's service: {where.stdout.strip() or where.stderr[-500:]}")
    started = time.monotonic()
    print(f"service tree: {TREE[0]}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average at the start {load_average()}", flush=True)
    big_path, nodes_path = big_model(), nodes_model()
    folder = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    servers: list[Server] = []
    try:
        # undone last in first out, whatever happens (a failing step does not skip the others):
        # the service processes stop before the servers they use, then the folder goes
        with terminated_as_exit(), contextlib.ExitStack() as cleanup:
            cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
            fleet = cleanup.enter_context(FleetServers(bucket="fleet-bench"))
            cleanup.callback(stop_all, servers)
            print(f"machine: {machine_line()}", flush=True)
            local = Server("local", folder / "local", ["--store", str(folder / "local" / "store")], {}, args.workers)
            servers.append(local)
            store_url, database = fleet.new_store_url(), fleet.new_database()

            def fleet_replica(index: int) -> Server:
                cache = folder / f"fleet-{index}" / "cache"
                store_args = ["--store", store_url, "--database", database, "--cache-dir", str(cache)]
                server = Server(f"fleet replica {index}", folder / f"fleet-{index}", store_args, fleet.environ, args.workers)
                servers.append(server)
                return server

            remote = fleet_replica(0)
            pair = (local, remote)
            clients = {server.name: httpx.Client(base_url=server.url, timeout=300) for server in pair}
            try:
                results = measure(args, pair, clients, big_path, nodes_path, (store_url, fleet.environ))
            finally:
                for client in clients.values():
                    client.close()
            # 5. imports per second
            extra: list[Server] = []
            runs: list[Throughput] = []
            seed = 50_000_000
            for round_index in range(args.rounds):
                for label in ("local, 1 replica", "fleet, 1 replica", "fleet, 3 replicas"):
                    if label.endswith("3 replicas") and not extra:
                        extra = [fleet_replica(1), fleet_replica(2)]  # started once, idle during the 1-replica runs after
                    targets = [local] if label.startswith("local") else [remote, *extra] if label.endswith("3 replicas") else [remote]
                    run = run_load(label, targets, seed, args.imports, args.concurrency)
                    seed += args.imports
                    runs.append(run)
                    cpu = ", ".join(f"{group} {seconds:.2f} s" for group, seconds in run.cpu_s.items())
                    print(
                        f"5. round {round_index + 1}, {label}: {run.per_second:.1f} imports/s ({args.imports} from {args.concurrency} "
                        f"clients); p50 {run.p50_ms:.0f} ms, p99 {run.p99_ms:.0f} ms; cores busy {run.busy * 100:.0f}%; CPU: {cpu}; "
                        f"other processes {run.others:.2f} cores",
                        flush=True,
                    )
            print(f"load average at the end {load_average()}; tracebacks in the service logs: {sum(s.tracebacks() for s in servers)}")
            report(args, results, runs)
    finally:
        print(f"({time.monotonic() - started:.0f} s in all)")


def stop_all(servers: list[Server]) -> None:
    for server in reversed(servers):
        server.stop()


@dataclass
class Results:
    get_ms: dict[str, list[float]] = field(default_factory=dict)
    first_get_ms: dict[str, list[float]] = field(default_factory=dict)
    big: dict[str, BigGet] = field(default_factory=dict)
    post_ms: dict[str, list[float]] = field(default_factory=dict)
    nodes_s: dict[str, list[float]] = field(default_factory=dict)
    others: OtherLoad = field(default_factory=OtherLoad)


def measure(
    args: argparse.Namespace,
    pair: tuple[Server, Server],
    clients: dict[str, httpx.Client],
    big_path: Path,
    nodes_path: Path,
    bucket: tuple[str, dict[str, str]],
) -> Results:
    results = Results()
    names = [server.name for server in pair]
    # 1. one small tensor
    results.others.begin("1")
    add = (SAMPLES / "add.onnx").read_bytes()
    paths, expected, model_id = {}, b"", ""
    for name in names:  # the local store, then the fleet's (whose model_id is kept)
        model_id = expect(clients[name].post("/models", files={"model": ("add.onnx", add)}), 201, 200).json()["id"]
        paths[name] = f"/models/{model_id}/tensors/W"
        expected = expect(clients[name].get(paths[name]), 200).content
        small_gets(clients[name], paths[name], 100, expected)  # warm-up
        results.get_ms[name] = []
    object_get(bucket, model_id, len(expected), 100)  # warm-up
    results.get_ms["s3 alone"] = []
    for _ in range(args.rounds):
        for name in names:
            results.get_ms[name] += [t * 1000 for t in small_gets(clients[name], paths[name], args.gets // args.rounds, expected)]
        results.get_ms["s3 alone"] += [t * 1000 for t in object_get(bucket, model_id, len(expected), args.gets // args.rounds)]
    for name in names:
        ms = results.get_ms[name]
        print(f"1. {name}: GET of add.onnx's W ({len(expected)} B): p50 {percentile(ms, 0.5):.2f} ms, p99 {percentile(ms, 0.99):.2f} ms")
    alone = results.get_ms["s3 alone"]
    print(f"1. a {len(expected)} B ranged GET of the fleet's model object alone (obstore, here): p50 {percentile(alone, 0.5):.2f} ms")
    # 1b. distinct small tensors, each read once: no cache of recent reads can answer
    results.others.begin("1b")
    distinct, values = distinct_tensor_model(DISTINCT_TENSORS)
    wanted: dict[str, list[tuple[str, bytes]]] = {}
    for name in names:
        model_id = expect(clients[name].post("/models", files={"model": ("distinct.onnx", distinct)}), 201, 200).json()["id"]
        wanted[name] = [(f"/models/{model_id}/tensors/t{index}", value) for index, value in enumerate(values)]
        timed_gets(clients[name], wanted[name][:50])  # warm-up (the catalogue fetched and opened)
        results.first_get_ms[name] = []
    block = (DISTINCT_TENSORS - 50) // args.rounds
    for round_index in range(args.rounds):
        for name in names:
            part = wanted[name][50 + round_index * block : 50 + (round_index + 1) * block]
            results.first_get_ms[name] += [t * 1000 for t in timed_gets(clients[name], part)]
    for name in names:
        ms = results.first_get_ms[name]
        p50, p99 = percentile(ms, 0.5), percentile(ms, 0.99)
        print(f"1b. {name}: {len(ms)} distinct 24 B tensors, each GET once: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    # 2. a 100 MB tensor
    results.others.begin("2")
    big_bytes = big_tensor_bytes()
    for server in pair:
        start = time.perf_counter()
        model_id = expect(upload(clients[server.name], big_path), 201, 200).json()["id"]
        upload_s = time.perf_counter() - start
        figures = big_get(server, clients[server.name], model_id, big_bytes, args.curl_runs)
        figures.upload_s = upload_s
        results.big[server.name] = figures
        print(
            f"2. {server.name}: GET of a 100 MB tensor: curl {', '.join(f'{v:.0f}' for v in figures.curl_mb_s)} MB/s, "
            f"httpx {figures.httpx_mb_s:.0f} MB/s (checked); front end {figures.rss_before_mb:.0f} MB before, growth per GET "
            f"{', '.join(f'{v:.1f}' for v in figures.growth_mb)} MB (httpx first; {figures.samples} samples); upload {upload_s:.2f} s",
            flush=True,
        )
    del big_bytes
    # 3. small POSTs, each a new model
    results.others.begin("3")
    seed = 1_000_000
    for name in names:
        for index in range(10):  # warm-up
            expect(post_bytes(clients[name], "m.onnx", small_model(seed + index))[1], 201)
        results.post_ms[name] = []
    seed += 10
    for _ in range(args.rounds):
        block = args.posts // args.rounds
        models = [small_model(seed + index) for index in range(block)]
        for name in names:  # the same models into each store
            for model in models:
                seconds, response = post_bytes(clients[name], "m.onnx", model)
                expect(response, 201)
                results.post_ms[name].append(seconds * 1000)
        seed += block
    for name in names:
        ms = results.post_ms[name]
        print(
            f"3. {name}: POST of a {len(small_model(0)) / 1000:.1f} KB model: p50 {percentile(ms, 0.5):.1f} ms, "
            f"p99 {percentile(ms, 0.99):.1f} ms ({len(ms)} posts)"
        )
    # 4. the 200,000-node model
    results.others.begin("4")
    nodes = nodes_path.read_bytes()
    for name in names:
        results.nodes_s[name] = []
    for _ in range(args.node_runs):
        for name in names:
            results.nodes_s[name].append(nodes_post(clients[name], nodes))
    for name in names:
        runs = results.nodes_s[name]
        print(f"4. {name}: POST of the 200,000-node model ({len(nodes) / 1e6:.1f} MB): {', '.join(f'{v:.2f}' for v in runs)} s", flush=True)
    results.others.end()
    print(f"cores used by processes outside this run, by phase: {results.others.line()}", flush=True)
    return results


def report(args: argparse.Namespace, results: Results, runs: list[Throughput]) -> None:
    local, fleet = "local", "fleet replica 0"
    get_l, get_f = results.get_ms[local], results.get_ms[fleet]
    g50_l, g50_f = percentile(get_l, 0.5), percentile(get_f, 0.5)
    first_l, first_f = results.first_get_ms[local], results.first_get_ms[fleet]
    f50_l, f50_f = percentile(first_l, 0.5), percentile(first_f, 0.5)
    big_l, big_f = results.big[local], results.big[fleet]
    curl_l, curl_f = statistics.median(big_l.curl_mb_s), statistics.median(big_f.curl_mb_s)
    post_l, post_f = results.post_ms[local], results.post_ms[fleet]
    p50_l, p50_f = percentile(post_l, 0.5), percentile(post_f, 0.5)
    nodes_l, nodes_f = statistics.median(results.nodes_s[local]), statistics.median(results.nodes_s[fleet])

    def rates(label: str) -> list[float]:
        return [run.per_second for run in runs if run.label == label]

    def growth(big: BigGet) -> str:
        return f"first GET +{big.growth_mb[0]:.1f} MB, then ≤ +{max(big.growth_mb[1:], default=0.0):.1f} MB"

    one_l, one_f, three_f = rates("local, 1 replica"), rates("fleet, 1 replica"), rates("fleet, 3 replicas")
    ratio3 = statistics.median(three_f) / statistics.median(one_f)
    three = [run for run in runs if run.replicas == 3]
    busy3 = statistics.median([run.busy for run in three])
    cpu3 = statistics.median([run.cpu_per_import_ms(args.imports) for run in three])
    ceiling = (os.cpu_count() or 1) / (cpu3 / 1000)
    flat = max(big_f.growth_mb) < 16  # a sixth of the tensor: what streaming in 1 MiB chunks may cost, not the tensor
    rows = [
        (
            "1. GET of one small tensor (add.onnx's W, 24 B) again and again, 1 client: p50 (p99)",
            f"{g50_l:.2f} ms ({percentile(get_l, 0.99):.2f} ms)",
            f"{g50_f:.2f} ms ({percentile(get_f, 0.99):.2f} ms)",
            f"{g50_f / g50_l:.2f} ({percentile(get_f, 0.99) / percentile(get_l, 0.99):.2f})",
            f"p50 ≤ 2× local: {verdict(g50_f <= 2 * g50_l)}",
        ),
        (
            f"1b. GET of distinct 24 B tensors, each read once ({len(first_l)} of a {DISTINCT_TENSORS:,}-tensor model): p50 (p99)",
            f"{f50_l:.2f} ms ({percentile(first_l, 0.99):.2f} ms)",
            f"{f50_f:.2f} ms ({percentile(first_f, 0.99):.2f} ms)",
            f"{f50_f / f50_l:.2f} ({percentile(first_f, 0.99) / percentile(first_l, 0.99):.2f})",
            f"p50 ≤ 2× local: {verdict(f50_f <= 2 * f50_l)}",
        ),
        (
            "1. one S3 round trip alone: a 24 B ranged GET of the stored model from the bench process (obstore)",
            "",
            f"{percentile(results.get_ms['s3 alone'], 0.5):.2f} ms ({percentile(results.get_ms['s3 alone'], 0.99):.2f} ms)",
            "",
            "",
        ),
        (
            f"2. GET of a 100 MB tensor: curl, median of {len(big_f.curl_mb_s)} (httpx)",
            f"{curl_l:.0f} MB/s ({big_l.httpx_mb_s:.0f} MB/s)",
            f"{curl_f:.0f} MB/s ({big_f.httpx_mb_s:.0f} MB/s)",
            f"{curl_f / curl_l:.2f}",
            f"≥ 300 MB/s: {verdict(curl_f >= 300)}",
        ),
        (
            "2. front end's RSS during it",
            growth(big_l),
            growth(big_f),
            "",
            f"flat (not the 100 MB): {verdict(flat)}",
        ),
        (
            f"3. POST of a distinct {len(small_model(0)) / 1000:.1f} KB model, 1 client, {len(post_f)} posts: p50 (p99)",
            f"{p50_l:.1f} ms ({percentile(post_l, 0.99):.1f} ms)",
            f"{p50_f:.1f} ms ({percentile(post_f, 0.99):.1f} ms)",
            f"{p50_f / p50_l:.2f}",
            f"p50 ≤ 2× local: {verdict(p50_f <= 2 * p50_l)}",
        ),
        (
            f"4. POST of the 200,000-node model (multipart), median of {len(results.nodes_s[fleet])}",
            f"{nodes_l:.2f} s",
            f"{nodes_f:.2f} s",
            f"{nodes_f / nodes_l:.2f}",
            f"≤ 1.3× local: {verdict(nodes_f <= 1.3 * nodes_l)}",
        ),
        (
            f"5. imports/s, {args.concurrency} clients, 1 replica ({len(one_f)} runs)",
            " / ".join(f"{v:.1f}" for v in one_l),
            " / ".join(f"{v:.1f}" for v in one_f),
            f"{statistics.median(one_f) / statistics.median(one_l):.2f}",
            "",
        ),
        (
            f"5. imports/s, {args.concurrency} clients, 3 replicas",
            "",
            " / ".join(f"{v:.1f}" for v in three_f),
            f"{ratio3:.2f} × 1 replica",
            f"≥ 2.5× one replica: {verdict(ratio3 >= 2.5)} (cores {busy3 * 100:.0f}% busy; "
            f"{cpu3:.1f} ms of CPU an import: at most {ceiling:.0f}/s on {os.cpu_count()} cores)",
        ),
    ]
    print()
    print(f"`--workers {args.workers}` for every service process; ratio = fleet / local")
    print()
    print("| measurement | local store | fleet store (S3 + PostgreSQL) | ratio | target |")
    print("| --- | --- | --- | --- | --- |")
    for row in rows:
        print("| " + " | ".join(row) + " |")
    print()
    print(f"Cores used by processes outside this run (of {os.cpu_count()}), by phase: {results.others.line()}")
    print()
    print(f"CPU time an import, by process group, during the throughput runs ({args.imports} imports each):")
    print()
    print("| run | imports/s | cores busy | " + " | ".join(GROUPS) + " | all | other processes (cores) |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in GROUPS) + " | --- | --- |")
    for run in runs:
        cells = [f"{run.cpu_s.get(group, 0.0) / args.imports * 1000:.1f} ms" for group in GROUPS]
        print(
            f"| {run.label} | {run.per_second:.1f} | {run.busy * 100:.0f}% | " + " | ".join(cells)
            + f" | {run.cpu_per_import_ms(args.imports):.1f} ms | {run.others:.2f} |"
        )  # fmt: skip


def run_stopping_on_interrupt(main: Callable[[], None]) -> None:
    """Run a benchmark's main; Ctrl-C (or SIGTERM, raised as KeyboardInterrupt) ends it with status 130."""
    try:
        main()
    except KeyboardInterrupt as stop:
        print(f"interrupted ({stop or 'Ctrl-C'}): every process stopped", file=sys.stderr)
        raise SystemExit(130) from None


if __name__ == "__main__":
    run_stopping_on_interrupt(main)
