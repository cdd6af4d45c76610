"""The client's resumable uploads (tus 1.0) and progress, against the service
in the test process (the real app and workers, over real HTTP), with the
client and its command line as they ship, and a TCP proxy (tests/support/tcp_proxy.py)
between them where the wire must misbehave: a resumable import gives the
one-shot import's summary and id (sync and async); a connection cut mid-upload
is resumed on its own, sending hardly more than the file; the command line
killed halfway and run again continues where the service stopped receiving,
and the stored model is byte-identical; the progress bar through a
pseudo-terminal (rate, time left, 100%), forced off, and absent when standard
error is not a terminal. Then the protocol's decisions against an in-memory
tus service (an httpx mock transport): Retry-After on a PATCH, a bounded
number of fruitless retries, a remembered upload the service forgot, an older
service without /uploads, and which import answers keep the resume state.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import pty
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper
from support.paths import REPO
from support.service_harness import SAMPLES, ServiceUnderTest, model_id_of
from support.tcp_proxy import TcpProxy

from service.client import AsyncClient, Client, Retry, ServiceError
from service.client.resumable import MAX_STALLS, SETTLE_SECONDS, TUS_VERSION
from service.store.uploads import PART_BYTES

# the service on a loopback port, in the test process (support/servers.py): its command line runs
# as a subprocess, and a TCP proxy cuts its connections
ON_A_PORT = True

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)

EXTERNAL = SAMPLES / "external"
EXTERNAL_FILES = [EXTERNAL / "weights.bin", EXTERNAL / "more" / "bias.bin"]
MIB = 1 << 20
OVERHEAD = 64 << 10  # request heads, the HEADs and the import request: bytes on the wire beyond the files'


def byte_model(folder: Path, size: int, *, external: bool = False, seed: int = 0) -> tuple[Path, list[Path]]:
    """A model whose one initializer holds `size` random bytes (UINT8), in the
    model file itself or in `weights.bin` beside it; the model and its external files."""
    folder.mkdir(parents=True, exist_ok=True)
    data = np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8)
    weights = TensorProto(name="W", data_type=TensorProto.UINT8, dims=[size])
    externals = []
    if external:
        data.tofile(folder / "weights.bin")
        weights.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "weights.bin"), ("offset", "0"), ("length", str(size))):
            weights.external_data.add(key=key, value=value)
        externals.append(folder / "weights.bin")
    else:
        weights.raw_data = data.tobytes()
    graph = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["Y"])],
        "bytes",
        [],
        [helper.make_tensor_value_info("Y", TensorProto.UINT8, [size])],
        initializer=[weights],
    )
    path = folder / "model.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())
    return path, externals


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(MIB):
            digest.update(chunk)
    return digest.hexdigest()


def cli(url: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "service.client", "--url", url, *args]


def run_cli(url: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cli(url, *args), cwd=REPO, capture_output=True, text=True, timeout=timeout)


# -- against the service


def test_a_resumable_import_gives_the_one_shot_summary(server: ServiceUnderTest, tmp_path: Path) -> None:
    with Client(server.url, resume_store=tmp_path / "resume") as client:
        one_shot = client.import_file(EXTERNAL / "model.onnx", external_data=EXTERNAL_FILES, resumable=False)
        seen: list[tuple[int, int]] = []
        resumed = client.import_file(
            EXTERNAL / "model.onnx", external_data=EXTERNAL_FILES, resumable=True, progress=lambda *p: seen.append(p)
        )
        fresh, _ = byte_model(tmp_path / "fresh", 300_000, external=True, seed=1)
        first = client.import_file(fresh, external_data=[fresh.parent / "weights.bin"], resumable=True)
    assert resumed == one_shot
    total = sum(p.stat().st_size for p in [EXTERNAL / "model.onnx", *EXTERNAL_FILES])
    assert seen[-1] == (total, total) and all(t == total for _, t in seen)
    model_bytes = fresh.read_bytes()
    assert first["id"] == model_id_of(model_bytes, {"weights.bin": (fresh.parent / "weights.bin").read_bytes()})
    assert first["input"] == "model.onnx" and first["model_file"]["sha256"] == hashlib.sha256(model_bytes).hexdigest()
    assert not list((tmp_path / "resume").iterdir())  # forgotten once the import answered

    async def twin() -> dict[str, Any]:
        async with AsyncClient(server.url, resume_store=tmp_path / "resume", resumable_above=0) as client:
            return await client.import_file(EXTERNAL / "model.onnx", external_data=EXTERNAL_FILES)

    assert asyncio.run(twin()) == one_shot


def test_a_refused_resumable_import_raises_the_problem_and_forgets_its_uploads(server: ServiceUnderTest, tmp_path: Path) -> None:
    broken = tmp_path / "broken.onnx"
    broken.write_bytes((SAMPLES / "add.onnx").read_bytes()[:120])
    with Client(server.url, resume_store=tmp_path / "resume") as client, pytest.raises(ServiceError) as refused:
        client.import_file(broken, resumable=True)
    assert refused.value.status == 422 and refused.value.kind == "Malformed" and refused.value.input == "broken.onnx"
    assert not list((tmp_path / "resume").iterdir())
    # refused by the PATCH that finishes the model's upload: none of its external data is sent
    weights = tmp_path / "weights.bin"
    weights.write_bytes(bytes(MIB))
    seen: list[tuple[int, int]] = []
    with Client(server.url, resume_store=tmp_path / "resume") as client, pytest.raises(ServiceError) as refused:
        client.import_file(broken, external_data=[weights], resumable=True, progress=lambda *p: seen.append(p))
    assert refused.value.status == 422 and refused.value.kind == "Malformed" and refused.value.offset is not None
    assert max(done for done, _ in seen) <= broken.stat().st_size
    assert not list((tmp_path / "resume").iterdir())


def test_a_dropped_connection_is_resumed_on_its_own(server: ServiceUnderTest, tmp_path: Path) -> None:
    model, _ = byte_model(tmp_path / "m", 24 * MIB, seed=2)
    size = model.stat().st_size
    with TcpProxy(server.port, cut_after=9 * MIB) as proxy, Client(proxy.url, resume_store=tmp_path / "resume") as client:
        summary = client.import_file(model, resumable=True)
    assert proxy.cuts == 1 and proxy.connections >= 2
    assert summary["model_file"]["sha256"] == sha256_of(model)
    # resent: the bytes after the offset the service reported when the client asked; on the fleet store a cut
    # PATCH's last part may still be on its way to the bucket then (a part is PART_BYTES), so up to one part is sent again
    resent = 0.05 * size if server.fleet_store is None else PART_BYTES
    assert proxy.sent <= size + resent + OVERHEAD, (proxy.sent, size)


def test_a_killed_command_continues_where_the_service_stopped(server: ServiceUnderTest, tmp_path: Path) -> None:
    model, _ = byte_model(tmp_path / "m", 64 * MIB, seed=3)
    size = model.stat().st_size
    resume = tmp_path / "resume"
    args = ("import", str(model), "--resume-store", str(resume), "--resumable-above", "1MiB", "--no-progress")
    with TcpProxy(server.port, rate=24 * MIB) as proxy:
        killed = subprocess.Popen(cli(proxy.url, *args), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while proxy.sent < size // 2:
            assert killed.poll() is None, killed.communicate()
            assert time.monotonic() < deadline, "the upload never got halfway"
            time.sleep(0.01)
        killed.send_signal(signal.SIGKILL)
        killed.communicate()
        [state] = resume.iterdir()
        url = httpx.URL(server.url).join(json.loads(state.read_text())["upload"])
        offsets = [-2, -1]
        while offsets[-1] != offsets[-2]:  # the service keeps what it received before the connection dropped
            time.sleep(0.2 if server.fleet_store is None else 1.0)  # the fleet's offset moves by parts (8 MiB), not by chunks
            offsets.append(int(httpx.head(url, headers={"Tus-Resumable": TUS_VERSION}, timeout=10).headers["Upload-Offset"]))
        held, before = offsets[-1], proxy.sent
        assert size * 0.4 <= held <= before <= size * 0.8, (held, before, size)

        proxy.rate = None
        result = run_cli(proxy.url, *args)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["id"] == model_id_of(model.read_bytes(), {})
    assert summary["model_file"]["sha256"] == sha256_of(model)
    assert proxy.sent <= 1.05 * size + OVERHEAD, (proxy.sent, before, held, size)
    assert not list(resume.iterdir())


# -- progress


def in_pty(command: list[str], timeout: float = 180) -> tuple[int, str, str]:
    """Run `command` with standard error a pseudo-terminal (120 columns):
    its exit status, standard output, and what it drew on the terminal."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    process = subprocess.Popen(command, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    drawn = bytearray()

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO once the child's side is closed
                return
            if not data:
                return
            drawn.extend(data)

    reader = threading.Thread(target=drain)
    reader.start()
    try:
        stdout, _ = process.communicate(timeout=timeout)
    finally:
        reader.join(10)
        os.close(master)
    return process.returncode, stdout.decode(), drawn.decode("utf-8", "replace")


def test_the_progress_bar_on_a_terminal(server: ServiceUnderTest, tmp_path: Path) -> None:
    model, externals = byte_model(tmp_path / "big", 200 * 1000 * 1000, external=True, seed=4)
    args = ("import", str(model), "--external-data", *map(str, externals), "--resume-store", str(tmp_path / "resume"))
    status, stdout, drawn = in_pty(cli(server.url, *args))
    assert status == 0, drawn
    assert json.loads(stdout)["input"] == "model.onnx"
    frames = [frame.strip() for frame in re.split(r"[\r\n]", drawn) if frame.strip()]
    # e.g. "model.onnx:  45%|████▌     | 90.2M/200M [00:00<00:01, 98.1MB/s]"
    moving = [f for f in frames if re.search(r"\d+%\|.*\| [\d.]+[kMG]?/200M \[\d\d:\d\d<\d\d:\d\d, *[\d.]+[kMG]?B/s\]", f)]
    assert moving, frames
    assert frames[-1].startswith("model.onnx: 100%") and "200M/200M" in frames[-1], frames[-1]

    small = EXTERNAL / "model.onnx"
    status, stdout, drawn = in_pty(cli(server.url, "import", str(small), "--external-data", *map(str, EXTERNAL_FILES), "--no-progress"))
    assert status == 0 and json.loads(stdout)["input"] == "model.onnx"
    assert drawn == ""
    status, _, drawn = in_pty(cli(server.url, "tensor", json.loads(stdout)["id"], "W", "-o", str(tmp_path / "W.npy")))
    assert status == 0 and re.search(r"W: 100%\|.*\| [\d.]+k/[\d.]+k \[", drawn), drawn

    result = run_cli(server.url, "import", str(small), "--external-data", *map(str, EXTERNAL_FILES))  # standard error a pipe
    assert result.returncode == 0 and result.stderr == ""
    result = run_cli(server.url, "import", str(small), "--external-data", *map(str, EXTERNAL_FILES), "--progress")
    assert result.returncode == 0 and "100%" in result.stderr


def test_progress_of_a_one_shot_upload_and_a_download(server: ServiceUnderTest, tmp_path: Path) -> None:
    model, externals = byte_model(tmp_path / "m", 3 * MIB, external=True, seed=5)
    total = model.stat().st_size + externals[0].stat().st_size
    uploaded: list[tuple[int, int]] = []
    downloaded: list[tuple[int, int]] = []
    with Client(server.url, resume_store=tmp_path / "resume") as client:
        summary = client.import_file(model, external_data=externals, resumable=False, progress=lambda *p: uploaded.append(p))
        raw = b"".join(client.tensor_bytes(summary["id"], "W", progress=lambda *p: downloaded.append(p)))
    assert uploaded[-1] == (total, total) and len(uploaded) > 10 and all(t == total for _, t in uploaded)
    assert [d for d, _ in uploaded] == sorted(d for d, _ in uploaded)
    assert raw == externals[0].read_bytes()
    assert downloaded[-1] == (3 * MIB, 3 * MIB) and len(downloaded) > 10
    assert not (tmp_path / "resume").exists()  # a one-shot upload remembers nothing


# -- the protocol's decisions, against an in-memory tus service


class FakeTus:
    """A tus 1.0 service in memory, as an httpx handler. `faults` are applied
    to the next PATCHes, one each: a status (answered before reading), or
    ("drop", n): n bytes kept, then the connection lost."""

    def __init__(self) -> None:
        self.uploads: dict[str, bytearray] = {}
        self.lengths: dict[str, int] = {}
        self.faults: list[int | tuple[str, int]] = []
        self.import_answers: list[httpx.Response] = []
        self.received = 0
        self.log: list[str] = []
        self.imported: list[dict[str, Any]] = []
        self.creation_status = 201
        self.down = 0  # requests answered by no connection at all (a restart)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        method, path = request.method, request.url.path
        self.log.append(f"{method} {path}")
        if self.down:
            self.down -= 1
            raise httpx.ConnectError("connection refused")
        if path == "/uploads" and method == "POST":
            if self.creation_status != 201:
                return httpx.Response(self.creation_status)
            upload = uuid.uuid4().hex
            self.uploads[upload], self.lengths[upload] = bytearray(), int(request.headers["Upload-Length"])
            return httpx.Response(201, headers={"Location": f"/uploads/{upload}"})
        if path == "/models":
            if request.headers["Content-Type"] == "application/json":
                self.imported.append(json.loads(request.read()))
            return self.import_answers.pop(0) if self.import_answers else httpx.Response(201, json={"id": "imported"})
        upload = path.rsplit("/", 1)[-1]
        assert request.headers["Tus-Resumable"] == TUS_VERSION
        if upload not in self.uploads:
            return httpx.Response(404)
        held = self.uploads[upload]
        if method == "HEAD":
            return httpx.Response(200, headers={"Upload-Offset": str(len(held)), "Upload-Length": str(self.lengths[upload])})
        assert method == "PATCH" and request.headers["Content-Type"] == "application/offset+octet-stream"
        fault = self.faults.pop(0) if self.faults else None
        if isinstance(fault, int):
            return httpx.Response(fault, headers={"Retry-After": "2"} if fault == 503 else {})
        if int(request.headers["Upload-Offset"]) != len(held):
            return httpx.Response(409)
        assert isinstance(request.stream, httpx.SyncByteStream)
        for chunk in request.stream:
            if isinstance(fault, tuple) and len(chunk) >= fault[1]:
                held += chunk[: fault[1]]
                self.received += fault[1]
                raise httpx.WriteError("connection lost")
            if isinstance(fault, tuple):
                fault = (fault[0], fault[1] - len(chunk))
            held += chunk
            self.received += len(chunk)
        return httpx.Response(204, headers={"Upload-Offset": str(len(held))})


@pytest.fixture()
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The client's waits, but the short ones between two HEADs that find the offset settled."""
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", lambda seconds: slept.append(seconds) if seconds != SETTLE_SECONDS else None)
    return slept


def fake_client(fake: FakeTus, tmp_path: Path, **options: Any) -> Client:
    return Client("http://service.test", transport=httpx.MockTransport(fake), resume_store=tmp_path / "resume", **options)


@pytest.fixture()
def small_file(tmp_path: Path) -> Path:
    path = tmp_path / "m.onnx"
    path.write_bytes(os.urandom(3 * MIB + 5))
    return path


def test_a_lost_connection_continues_at_once_and_503_waits_its_retry_after(tmp_path: Path, small_file: Path, waits: list[float]) -> None:
    fake = FakeTus()
    fake.faults = [("drop", MIB + 7), 503, ("drop", 0)]
    with fake_client(fake, tmp_path) as client:
        assert client.import_file(small_file, resumable=True) == {"id": "imported"}
    upload = next(iter(fake.uploads))
    assert fake.uploads[upload] == small_file.read_bytes() and fake.received == small_file.stat().st_size
    # the first drop (bytes kept) retries at once; the 503 waits its Retry-After; the drop that kept
    # nothing is the second fruitless try in a row: the backoff, 1 s doubled
    assert waits == [2.0, 2.0]
    assert fake.imported == [{"upload": upload}]


def test_a_service_away_for_a_while_is_waited_for(tmp_path: Path, small_file: Path, waits: list[float]) -> None:
    fake = FakeTus()
    fake.faults = [("drop", MIB)]
    original = fake.__call__

    def handler(request: httpx.Request) -> httpx.Response:
        if fake.faults == [] and fake.down == 0 and not any("restarted" in line for line in fake.log):
            fake.log.append("restarted")
            fake.down = 6  # the HEAD after the drop and its three retries, the next PATCH, and one more HEAD
        return original(request)

    with Client("http://service.test", transport=httpx.MockTransport(handler), resume_store=tmp_path / "resume") as client:
        assert client.import_file(small_file, resumable=True) == {"id": "imported"}
    assert next(iter(fake.uploads.values())) == small_file.read_bytes()
    assert sum(waits) >= 7  # the HEAD's retries (1 + 2 + 4 s), then the backoff


def test_fruitless_retries_are_bounded(tmp_path: Path, small_file: Path, waits: list[float]) -> None:
    fake = FakeTus()
    fake.faults = [500] * 100
    with fake_client(fake, tmp_path, retry=Retry(backoff=0.5)) as client, pytest.raises(ServiceError) as gave_up:
        client.import_file(small_file, resumable=True)
    assert gave_up.value.status == 500
    assert fake.log.count("PATCH " + fake.log[1].split()[1]) == MAX_STALLS + 1
    assert waits == [min(30.0, 0.5 * 2**n) for n in range(MAX_STALLS)]
    assert len(list((tmp_path / "resume").iterdir())) == 1  # kept: a later run continues


def test_a_remembered_upload_is_continued_or_created_anew(tmp_path: Path, small_file: Path, waits: list[float]) -> None:
    fake = FakeTus()
    fake.faults = [("drop", MIB)] + [500] * 100
    with fake_client(fake, tmp_path) as client, pytest.raises(ServiceError):
        client.import_file(small_file, resumable=True)
    fake.faults.clear()
    fake.received = 0
    with fake_client(fake, tmp_path) as client:
        client.import_file(small_file, resumable=True)
    assert fake.received == small_file.stat().st_size - MIB and len(fake.uploads) == 1  # continued

    fake.faults = [("drop", MIB)] + [500] * 100
    with fake_client(fake, tmp_path) as client, pytest.raises(ServiceError):
        client.import_file(small_file, resumable=True)
    fake.uploads.clear()  # expired
    fake.faults.clear()
    fake.received = 0
    with fake_client(fake, tmp_path) as client:
        client.import_file(small_file, resumable=True)
    assert fake.received == small_file.stat().st_size and len(fake.uploads) == 1  # created anew


def test_an_older_service_gets_one_request_when_the_client_chose(tmp_path: Path, small_file: Path) -> None:
    fake = FakeTus()
    fake.creation_status = 404
    with fake_client(fake, tmp_path, resumable_above=0) as client:
        assert client.import_file(small_file) == {"id": "imported"}
        assert fake.log == ["POST /uploads", "POST /models"] and fake.imported == []  # the multipart one
        with pytest.raises(ServiceError) as refused:
            client.import_file(small_file, resumable=True)
        assert refused.value.status == 404


@pytest.mark.parametrize(("status", "kept"), [(422, False), (400, False), (413, False), (507, True), (503, True), (500, True), (409, True)])
def test_which_import_answers_keep_the_uploads(tmp_path: Path, small_file: Path, waits: list[float], status: int, kept: bool) -> None:
    fake = FakeTus()
    fake.import_answers = [httpx.Response(status, json={"status": status, "detail": "no"})] * 10
    with fake_client(fake, tmp_path, retry=Retry(attempts=1)) as client, pytest.raises(ServiceError) as refused:
        client.import_file(small_file, resumable=True)
    assert refused.value.status == status
    assert bool(list((tmp_path / "resume").iterdir())) == kept
    if kept:
        fake.import_answers = []
        with fake_client(fake, tmp_path) as client:
            client.import_file(small_file, resumable=True)
        assert [line for line in fake.log if line.startswith("PATCH")] == [f"PATCH /uploads/{next(iter(fake.uploads))}"]


def test_a_file_that_shrinks_while_sent_is_an_error(tmp_path: Path, small_file: Path) -> None:
    fake = FakeTus()
    fake.faults = [("drop", 10)]

    def handler(request: httpx.Request) -> httpx.Response:
        if request.method == "HEAD":
            os.truncate(small_file, MIB)
        return fake(request)

    with (
        Client("http://service.test", transport=httpx.MockTransport(handler), resume_store=tmp_path / "r") as client,
        pytest.raises(ValueError, match="ended at byte"),
    ):
        client.import_file(small_file, resumable=True)
