"""The write path (issue 25): uploads against `hashlib.sha256` on the same bytes, and an upload resumed.

One real `python -m service` on 127.0.0.1 (`--http-workers 1`: one front-end
process, whose memory is a figure; a local store in a temporary folder,
removed at the end; limits raised so that 2.6 GB imports fit: `--max-upload
4GiB --max-upload-total 8GiB`, the import, store and tenant caps at least
their defaults). Every request goes over loopback.

1. sha256's rate on each upload's bytes, in the same run: before each upload,
   `hashlib.sha256` over every file of the set (each mmapped and hashed in
   one call; the pages are in the file cache, as the upload finds them: an
   untimed pass warms them first). MB/s, 10^6 bytes.
2. A one-part upload: .cache/bench/weights-inline.onnx (805 MB of float32 in
   raw_data; bench/make_models.py's, made here if missing) posted by curl
   (`-F model=@PATH`); RUNS runs, each a new import (201; the model deleted
   after each). Rate = the file's bytes / curl's time_total.
3. A 42-part upload: a model whose 41 initializers each live in an external
   data file of their own (4096x3840 float32, 63 MB each, 2.58 GB in all;
   numpy's default_rng(0), made once in .cache/bench/upload-42/), posted by
   curl as the model and one `external_data` part per file (named by its
   location); RUNS runs as 2. Rate = all 42 files' bytes / time_total.
4. A resumable upload killed halfway: a small model and one 2 GB external
   data file (.cache/bench/upload-2g/), sent by `python -m service.client
   import --resumable-above 0` through a counting TCP proxy (here, in
   threads); the client is SIGKILLed once the proxy has forwarded half the
   bytes, then run again with the same arguments (and resume store), which
   continues the upload and imports it. Reported: every byte the proxy
   forwarded towards the service (both runs, requests' heads included) / the
   files' bytes, the time from the first start to the import's answer, and
   whether the stored model is the files' bytes: the summary's model sha256
   and content-derived id against hashlib's digests of the files, and the
   stored tensor, read back whole (GET /models/{id}/tensors/w), against the
   data file's digest. Where the client or the service has no resumable
   uploads yet, this part says "not measured" and why.
5. The front end's memory during each upload: its VmRSS every 50 ms and its
   VmHWM (reset before), against VmRSS just before; and its CPU time.

The machine may be shared: the load average before and after and, for each
phase, the cores that processes outside this run used meanwhile are
reported. Every process this starts is stopped at its end, on Ctrl-C and
SIGTERM too (and dies with it if it is killed).

Usage: .venv/bin/python bench/upload_bench.py [--runs 3] [--skip-resumable] [--small] [--json FILE]
(--small: 1/16 of every size, made into their own files, to try it quickly.)

Targets (issue 25): the one-part and the 42-part uploads at >= 0.5x sha256's
rate on the same bytes; the resumable upload's bytes sent <= 1.05x the
files' and the stored model byte-identical; the front end's memory flat
(growth <= 64 MiB: the service holds at most about 8 MiB an upload in flight
and reads 1 MiB at a time).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.metadata
import json
import mmap
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType

import httpx
import numpy as np
import onnx
from fleet_bench import (  # bench/ is on sys.path as this script's folder
    CACHE,
    CLOCK_TICKS,
    REPO,
    OtherLoad,
    Server,
    _die_with_parent,
    load_average,
    reset_peak,
    run_stopping_on_interrupt,
    status_kib,
    terminated_as_exit,
    verdict,
)
from onnx import TensorProto, helper
from read_bench import machine, service_tree, settled_front_ends, stop_server

MIB = 1 << 20
PARTS = 41  # 3.: external data files, one initializer each
PART_SHAPE = (4096, 3840)  # float32: 62.9 MB each, 2.58 GB in all
BIG_ELEMENTS = 500_000_000  # 4.: float32, 2.0 GB in one external data file
WRITE_ELEMENTS = 1 << 24  # generated and written this many at a time
RATIO_TARGET = 0.5  # upload / sha256
SENT_TARGET = 1.05  # bytes sent / the files' bytes
GROWTH_TARGET_MIB = 64.0
SAMPLE_PERIOD = 0.05  # seconds between two readings of the front end's VmRSS
CURL_TIMEOUT = 900.0
CLIENT_TIMEOUT = 1800.0
PROXY_CHUNK = 1 << 20
LIMITS = [
    "--max-upload", "4GiB", "--max-upload-total", "8GiB", "--max-import-bytes", "32GiB", "--store-max-bytes", "64GiB",
    "--tenant-max-bytes", "0", "--tenant-max-models", "0", "--worker-timeout", "600", "--worker-cpu-seconds", "300",
]  # fmt: skip


# --- the files


@dataclass
class FileSet:
    """An upload's files: the model, then each external data file with the location the model names it by."""

    label: str
    model: Path
    externals: list[tuple[str, Path]] = field(default_factory=list)

    @property
    def paths(self) -> list[Path]:
        return [self.model, *(path for _, path in self.externals)]

    @property
    def size(self) -> int:
        return sum(path.stat().st_size for path in self.paths)


def one_part(small: bool) -> FileSet:
    """bench/make_models.py's weights-inline.onnx (805 MB), or for --small the same graph at 1/16 (50 MB)."""
    import make_models

    if not small:
        path = CACHE / "weights-inline.onnx"
        if not path.exists():
            CACHE.mkdir(parents=True, exist_ok=True)
            make_models.make_weight_models(False)
        return FileSet("one part", path)
    path = CACHE / "upload-1part-small.onnx"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        graph = make_models._weights_graph(24, 256, 1024)  # 24 x two 256x1024 float32: 1/16 of 24 x two 1024x4096
        part = path.with_suffix(".part")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), part)
        part.rename(path)
    return FileSet("one part", path)


def external_model(label: str, folder: Path, tensors: list[tuple[str, tuple[int, ...]]]) -> FileSet:
    """`folder`/model.onnx and one external data file per tensor (`NAME.bin`, float32 from numpy's
    default_rng(0), drawn in order), each an Identity's input; made once (into FOLDER.part, then renamed)."""
    files = FileSet(label, folder / "model.onnx", [(f"{name}.bin", folder / f"{name}.bin") for name, _ in tensors])
    if files.model.exists():
        return files
    part = folder.with_name(folder.name + ".part")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    rng = np.random.default_rng(0)
    initializers = []
    for name, shape in tensors:
        count = int(np.prod(shape))
        with (part / f"{name}.bin").open("wb") as out:
            for start in range(0, count, WRITE_ELEMENTS):
                out.write(rng.standard_normal(min(WRITE_ELEMENTS, count - start), dtype=np.float32).tobytes())
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=shape, data_location=TensorProto.EXTERNAL)
        for key, value in (("location", f"{name}.bin"), ("offset", "0"), ("length", str(count * 4))):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        initializers.append(tensor)
    graph = helper.make_graph(
        [helper.make_node("Identity", [name], [f"{name}_out"]) for name, _ in tensors], folder.name, [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, list(shape)) for name, shape in tensors], initializers,
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), part / "model.onnx")
    part.rename(folder)
    return files


def forty_two_parts(small: bool) -> FileSet:
    rows, cols = PART_SHAPE
    shape = (rows // 16, cols) if small else PART_SHAPE
    folder = CACHE / ("upload-42-small" if small else "upload-42")
    return external_model("42 parts", folder, [(f"w{index:02d}", shape) for index in range(PARTS)])


def two_gigabytes(small: bool) -> FileSet:
    folder = CACHE / ("upload-2g-small" if small else "upload-2g")
    return external_model("resumable", folder, [("w", (BIG_ELEMENTS // 16 if small else BIG_ELEMENTS,))])


def sha256_pass(files: FileSet) -> tuple[float, dict[Path, str]]:
    """hashlib.sha256 over each file (mmapped, one call each): the seconds the hashing took, and each digest."""
    seconds, digests = 0.0, {}
    for path in files.paths:
        with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            start = time.perf_counter()
            digests[path] = hashlib.sha256(mapped).hexdigest()
            seconds += time.perf_counter() - start
    return seconds, digests


# --- the front end


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU time of these processes (every thread), not their children's."""
    ticks = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            text = Path(f"/proc/{pid}/stat").read_text()
            fields = text[text.rindex(")") + 2 :].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / CLOCK_TICKS


def total_kib(pids: list[int], key: str) -> int:
    found = 0
    for pid in pids:
        with contextlib.suppress(OSError, RuntimeError):
            found += status_kib(pid, key)
    return found


@dataclass
class Memory:
    """The front end's memory over one upload (KiB) and its CPU time (s)."""

    before_kib: int = 0
    sampled_peak_kib: int = 0
    hwm_after_kib: int = 0
    after_kib: int = 0
    samples: int = 0
    peak_reset: bool = True
    cpu_s: float = 0.0

    @property
    def peak_kib(self) -> int:
        return max(self.sampled_peak_kib, self.hwm_after_kib)

    @property
    def growth_mib(self) -> float:
        return (self.peak_kib - self.before_kib) / 1024


@contextlib.contextmanager
def watched(pids: list[int]) -> Iterator[Memory]:
    """The front end's VmRSS every SAMPLE_PERIOD in a thread, its VmHWM reset before and read after, its CPU time."""
    memory = Memory()
    for pid in pids:
        try:
            reset_peak(pid)
        except OSError:
            memory.peak_reset = False
    memory.before_kib = total_kib(pids, "VmRSS")
    cpu_before = cpu_seconds(pids)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            memory.sampled_peak_kib = max(memory.sampled_peak_kib, total_kib(pids, "VmRSS"))
            memory.samples += 1
            done.wait(SAMPLE_PERIOD)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield memory
    finally:
        done.set()
        thread.join()
        memory.hwm_after_kib = total_kib(pids, "VmHWM")
        memory.after_kib = total_kib(pids, "VmRSS")
        memory.cpu_s = cpu_seconds(pids) - cpu_before


# --- 2. and 3.: curl


@dataclass
class Run:
    seconds: float
    sha256_s: float  # hashlib's seconds over the same files just before
    memory: Memory


@dataclass
class Uploads:
    label: str
    files: int
    size: int
    runs: list[Run] = field(default_factory=list)

    def median_s(self) -> float:
        return statistics.median(run.seconds for run in self.runs)

    def rate(self) -> float:
        return self.size / self.median_s() / 1e6

    def sha256_rate(self) -> float:
        return self.size / statistics.median(run.sha256_s for run in self.runs) / 1e6


def curl_upload(server: Server, files: FileSet, output: Path) -> tuple[float, str]:
    """POST /models with curl, the model and each external data file a part: (time_total, the new model's id)."""
    parts = ["-F", f"model=@{files.model}"]
    for location, path in files.externals:
        parts += ["-F", f"external_data=@{path};filename={location}"]
    command = ["curl", "-s", "-o", str(output), "-w", "%{http_code} %{time_total}", *parts, f"{server.url}/models"]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CURL_TIMEOUT, preexec_fn=_die_with_parent,  # it only calls prctl
    )  # fmt: skip
    status, _, seconds = done.stdout.strip().partition(" ")
    if done.returncode != 0 or status != "201":
        answer = output.read_text(errors="replace")[:1000] if output.exists() else ""
        raise RuntimeError(f"curl upload of {files.label}: exit {done.returncode}, HTTP {status or '?'}: {answer} {done.stderr[-500:]}")
    return float(seconds), str(json.loads(output.read_text())["id"])


def delete(client: httpx.Client, model_id: str) -> None:
    response = client.delete(f"/models/{model_id}")
    if response.status_code not in {200, 204}:
        raise RuntimeError(f"DELETE /models/{model_id}: {response.status_code} {response.text[:300]}")


def measure_uploads(server: Server, front: list[int], client: httpx.Client, files: FileSet, runs: int, folder: Path) -> Uploads:
    result = Uploads(files.label, len(files.paths), files.size)
    sha256_pass(files)  # untimed: the pages into the file cache
    for index in range(runs):
        sha_s, _ = sha256_pass(files)
        with watched(front) as memory:
            seconds, model_id = curl_upload(server, files, folder / "answer.json")
        delete(client, model_id)
        result.runs.append(Run(seconds, sha_s, memory))
        rate, sha_rate = files.size / seconds / 1e6, files.size / sha_s / 1e6
        print(
            f"{files.label}, run {index + 1}: {seconds:.2f} s, {rate:.0f} MB/s (sha256 {sha_rate:.0f} MB/s); "
            f"front end {memory.before_kib / 1024:.0f} MiB before, +{memory.growth_mib:.1f} MiB at peak "
            f"({memory.samples} samples), {memory.cpu_s:.2f} s of CPU",
            flush=True,
        )
    return result


# --- 4.: the resumable upload


class CountingProxy:
    """Listens on a loopback port of its own and forwards each connection to `upstream_port` both ways, in
    threads; `sent` counts the bytes forwarded towards the service."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.sent = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._open: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._closed = False

    def __enter__(self) -> CountingProxy:
        self._start(self._accept)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        with self._lock:
            held = list(self._open)
        for one in held:
            _close(one)
        for thread in self._threads:
            thread.join(5)

    def _start(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self.connections += 1
                self._open |= {downstream, upstream}
            self._start(self._forward, downstream, upstream, True)
            self._start(self._forward, upstream, downstream, False)

    def _forward(self, source: socket.socket, target: socket.socket, counted: bool) -> None:
        buffer = bytearray(PROXY_CHUNK)
        view = memoryview(buffer)
        try:
            while count := source.recv_into(buffer):
                target.sendall(view[:count])
                if counted:
                    with self._lock:
                        self.sent += count
        except OSError:
            pass
        finally:
            with self._lock:
                self._open -= {source, target}
            _close(source)
            _close(target)


def _close(held: socket.socket) -> None:
    with contextlib.suppress(OSError):
        held.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        held.close()


@dataclass
class Resumed:
    size: int
    sent: int = 0
    sent_at_kill: int = 0
    connections: int = 0
    seconds: float = 0.0
    first_s: float = 0.0  # from the start to the kill
    second_s: float = 0.0  # the second run's start to its answer
    identical: bool = False
    checks: list[str] = field(default_factory=list)
    sha256_s: float = 0.0
    memory: Memory = field(default_factory=Memory)
    not_measured: str = ""


def client_has_resumable() -> str:
    """Why the client cannot do this part, or ''."""
    done = subprocess.run(
        [sys.executable, "-m", "service.client", "--url", "http://127.0.0.1:1", "import", "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    missing = [flag for flag in ("--resumable-above", "--resume-store", "--external-data-dir", "--no-progress") if flag not in done.stdout]
    return f"`python -m service.client import` has no {', '.join(missing)}" if missing else ""


def service_has_resumable(client: httpx.Client) -> str:
    """Why the service cannot do this part, or ''."""
    response = client.options("/uploads")
    if "Tus-Version" not in response.headers:
        return f"the service answers OPTIONS /uploads with {response.status_code} and no Tus-Version: no resumable uploads"
    return ""


def client_environment() -> dict[str, str]:
    return {key: value for key, value in os.environ.items() if not key.startswith("ONNX_SERVICE_")}


def start_client(command: list[str], folder: Path, leg: int) -> subprocess.Popen[bytes]:
    with (folder / f"client-{leg}.out").open("wb") as out, (folder / f"client-{leg}.err").open("wb") as err:
        return subprocess.Popen(
            command, cwd=REPO, env=client_environment(), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 (it only calls prctl)
        )  # fmt: skip


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
        process.wait()


def measure_resumable(server: Server, front: list[int], client: httpx.Client, files: FileSet, folder: Path) -> Resumed:
    result = Resumed(files.size)
    if why := client_has_resumable() or service_has_resumable(client):
        result.not_measured = why
        return result
    sha256_pass(files)  # untimed: the pages into the file cache
    result.sha256_s, digests = sha256_pass(files)
    resume = folder / "resume-store"
    with CountingProxy(server.port) as proxy:
        command = [
            sys.executable, "-m", "service.client", "--url", proxy.url, "import", str(files.model),
            "--external-data-dir", str(files.model.parent), "--resumable-above", "0", "--resume-store", str(resume), "--no-progress",
        ]  # fmt: skip
        processes: list[subprocess.Popen[bytes]] = []
        try:
            with watched(front) as memory:
                start = time.perf_counter()
                processes.append(start_client(command, folder, 1))
                while proxy.sent < files.size // 2:
                    if processes[0].poll() is not None:
                        raise RuntimeError(
                            f"the client ended ({processes[0].returncode}) before half the bytes were sent ({proxy.sent:,}): "
                            + (folder / "client-1.err").read_text(errors="replace")[-1000:]
                        )
                    time.sleep(0.002)
                processes[0].kill()
                processes[0].wait()
                result.sent_at_kill = proxy.sent
                killed = time.perf_counter()
                result.first_s = killed - start
                processes.append(start_client(command, folder, 2))
                try:
                    processes[1].wait(CLIENT_TIMEOUT)
                except subprocess.TimeoutExpired:
                    raise RuntimeError(f"the resumed client ran past {CLIENT_TIMEOUT:.0f} s") from None
                end = time.perf_counter()
            result.seconds, result.second_s, result.memory = end - start, end - killed, memory
            result.sent, result.connections = proxy.sent, proxy.connections
        finally:
            for process in processes:
                stop(process)
    if processes[1].returncode != 0:
        raise RuntimeError(f"the resumed client exited with {processes[1].returncode}: {(folder / 'client-2.err').read_text()[-1500:]}")
    summary = json.loads((folder / "client-2.out").read_text())
    verify(client, summary, files, digests, result)
    delete(client, summary["id"])
    return result


def verify(client: httpx.Client, summary: dict[str, object], files: FileSet, digests: dict[Path, str], result: Resumed) -> None:
    """Whether the stored model is the files' bytes: the summary's model sha256, its content-derived id and each
    external tensor read back whole, against hashlib's digests of the files."""
    from service.imports.identity import model_id_of

    model_file = summary.get("model_file")
    stored_sha = model_file.get("sha256") if isinstance(model_file, dict) else None
    model_ok = stored_sha == digests[files.model]
    result.checks.append(f"model sha256 {'equal' if model_ok else f'differs ({stored_sha})'}")
    expected_id = model_id_of("upload", digests[files.model], [(location, digests[path]) for location, path in files.externals])
    id_ok = summary.get("id") == expected_id
    result.checks.append(f"id {'equal to' if id_ok else 'differs from'} the one the files' digests give")
    tensors_ok = True
    for location, path in files.externals:
        name = location.removesuffix(".bin")
        digest, size = hashlib.sha256(), 0
        with client.stream("GET", f"/models/{summary['id']}/tensors/{name}") as response:
            if response.status_code != 200:
                raise RuntimeError(f"GET tensor {name}: {response.status_code} {response.read()[:300]!r}")
            for chunk in response.iter_bytes(PROXY_CHUNK):
                digest.update(chunk)
                size += len(chunk)
        equal = digest.hexdigest() == digests[path] and size == path.stat().st_size
        tensors_ok &= equal
        result.checks.append(f"tensor {name} read back ({size:,} B) {'equal to' if equal else 'differs from'} {location}")
    result.identical = model_ok and id_ok and tensors_ok


# --- the report


def versions() -> str:
    found = []
    for name in ("uvicorn", "fastapi", "starlette", "h11", "httptools", "python-multipart", "httpx", "numpy", "onnx"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            found.append(f"{name} {importlib.metadata.version(name)}")
    curl = subprocess.run(["curl", "--version"], capture_output=True, text=True).stdout.split()
    found.append(f"curl {curl[1]}" if len(curl) > 1 else "curl ?")
    return ", ".join(found)


def memory_cell(memories: list[Memory]) -> str:
    worst = max(memories, key=lambda memory: memory.growth_mib)
    return f"{worst.before_kib / 1024:.0f} → {worst.peak_kib / 1024:.0f} MiB (+{worst.growth_mib:.1f})"


def table(uploads: list[Uploads], resumed: Resumed | None, runs: int) -> list[str]:
    lines = [
        "| upload | bytes | time: median (each run) | rate | sha256, same bytes | ratio | front end's RSS: before → peak (growth), "
        "the largest growth of the runs | front end's CPU | target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for one in uploads:
        ratio = one.rate() / one.sha256_rate()
        each = ", ".join(f"{run.seconds:.2f}" for run in one.runs)
        cpu = statistics.median(run.memory.cpu_s for run in one.runs)
        lines.append(
            f"| {one.label} ({one.files} file{'s' if one.files > 1 else ''}), curl, {runs} runs | {one.size / 1e6:,.0f} MB "
            f"| {one.median_s():.2f} s ({each}) | {one.rate():,.0f} MB/s | {one.sha256_rate():,.0f} MB/s | **{ratio:.2f}×** "
            f"| {memory_cell([run.memory for run in one.runs])} | {cpu:.2f} s | ≥ {RATIO_TARGET}×: {verdict(ratio >= RATIO_TARGET)} |"
        )
    if resumed is not None and not resumed.not_measured:
        ratio = resumed.sent / resumed.size
        lines.append(
            f"| resumable (2 files), the client killed at {resumed.sent_at_kill / resumed.size:.0%} and run again, through a proxy "
            f"| {resumed.size / 1e6:,.0f} MB; sent {resumed.sent / 1e6:,.0f} MB (**{ratio:.3f}×**) in {resumed.connections} "
            f"connections | {resumed.seconds:.2f} s ({resumed.first_s:.2f} + {resumed.second_s:.2f}) "
            f"| {resumed.size / resumed.seconds / 1e6:,.0f} MB/s | {resumed.size / resumed.sha256_s / 1e6:,.0f} MB/s "
            f"| {resumed.size / resumed.seconds / 1e6 / (resumed.size / resumed.sha256_s / 1e6):.2f}× "
            f"| {memory_cell([resumed.memory])} | {resumed.memory.cpu_s:.2f} s "
            f"| sent ≤ {SENT_TARGET}×: {verdict(ratio <= SENT_TARGET)}; byte-identical: {verdict(resumed.identical)} |"
        )
    elif resumed is not None:
        lines.append(f"| resumable, killed at 50% and resumed | not measured: {resumed.not_measured} | | | | | | | |")
    return lines


def memories(uploads: list[Uploads], resumed: Resumed | None) -> list[Memory]:
    found = [run.memory for one in uploads for run in one.runs]
    return found + ([resumed.memory] if resumed is not None and not resumed.not_measured else [])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3, help="curl uploads of each model")
    parser.add_argument("--skip-resumable", action="store_true", help="leave out 4., the resumable upload")
    parser.add_argument("--small", action="store_true", help="1/16 of every size (files of their own), to try it quickly")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    if not shutil.which("curl"):
        raise SystemExit("curl is needed")
    started = time.monotonic()
    print(f"service tree: {service_tree()}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; load average at the start {load_average()}")
    print(f"machine: {machine()}; {versions()}", flush=True)
    sets = [one_part(args.small), forty_two_parts(args.small)]
    big = None if args.skip_resumable else two_gigabytes(args.small)
    for files in [*sets, *([big] if big else [])]:
        print(f"{files.label}: {len(files.paths)} file(s), {files.size / 1e6:,.1f} MB ({files.model})", flush=True)
    load_before = load_average()
    folder = Path(tempfile.mkdtemp(prefix="upload-bench-"))
    others = OtherLoad()
    problems: list[str] = []
    uploads: list[Uploads] = []
    resumed: Resumed | None = None
    try:
        with terminated_as_exit(), contextlib.ExitStack() as cleanup:
            cleanup.callback(shutil.rmtree, folder, ignore_errors=True)
            server = Server("upload", folder / "service", ["--store", str(folder / "store"), *LIMITS], {}, os.cpu_count() or 1)
            cleanup.callback(stop_server, server, problems)
            front = settled_front_ends(server)
            if len(front) != 1:
                problems.append(f"{len(front)} front-end processes, not 1: their memory is summed")
            client = cleanup.enter_context(httpx.Client(base_url=server.url, timeout=600))
            for files in sets:
                others.begin(files.label)
                uploads.append(measure_uploads(server, front, client, files, args.runs, folder))
            if big is not None:
                others.begin("resumable")
                try:
                    resumed = measure_resumable(server, front, client, big, folder)
                except RuntimeError as error:
                    resumed = Resumed(big.size, not_measured=f"failed: {error}")
                if resumed.not_measured:
                    print(f"resumable: not measured: {resumed.not_measured}", flush=True)
                else:
                    print(
                        f"resumable: {resumed.size:,} B in {resumed.seconds:.2f} s (killed after {resumed.first_s:.2f} s at "
                        f"{resumed.sent_at_kill:,} B sent); {resumed.sent:,} B sent in all ({resumed.sent / resumed.size:.4f}×), "
                        f"{resumed.connections} connections; {'; '.join(resumed.checks)}; front end +{resumed.memory.growth_mib:.1f} MiB",
                        flush=True,
                    )
            others.end()
            if tracebacks := server.tracebacks():
                problems.append(f"{tracebacks} traceback(s) in the service's log")
                shutil.copy(server.log_path, CACHE / "upload-bench-service.log")
        load_after = load_average()
        print()
        size_note = " (--small: 1/16 of every size)" if args.small else ""
        print(f"One `python -m service --http-workers 1`, local store; curl over loopback{size_note}. MB = 10^6 bytes.")
        print()
        print("\n".join(table(uploads, resumed, args.runs)))
        print()
        worst = max((memory.growth_mib for memory in memories(uploads, resumed)), default=0.0)
        print(f"Front end's memory flat (growth ≤ {GROWTH_TARGET_MIB:.0f} MiB in every upload): {verdict(worst <= GROWTH_TARGET_MIB)}")
        if not all(memory.peak_reset for memory in memories(uploads, resumed)):
            print("Note: the front end's VmHWM could not be reset (/proc/PID/clear_refs): its peak is since it started")
        print(f"Load average: {load_before} before, {load_after} after.")
        print(f"Cores used by processes outside this run (of {os.cpu_count()}), by phase: {others.line()}")
        print("Problems seen: " + ("; ".join(problems) if problems else "none"))
        if args.json:
            raw = {
                "machine": machine(), "versions": versions(), "service_tree": service_tree(), "small": args.small, "runs": args.runs,
                "load_average": [load_before, load_after], "other_load": others.phases, "problems": problems,
                "uploads": [asdict(one) | {"rate_mb_s": one.rate(), "sha256_mb_s": one.sha256_rate()} for one in uploads],
                "resumable": asdict(resumed) if resumed is not None else None,
            }  # fmt: skip
            args.json.write_text(json.dumps(raw, indent=1, default=str))
            print(f"raw figures: {args.json}")
    finally:
        print(f"({time.monotonic() - started:.0f} s in all)")


if __name__ == "__main__":
    run_stopping_on_interrupt(main)
