"""Receiving an upload's body, against a real server process on loopback:
the protocol's fast path for Content-Length bodies (bytes handed to the
request without h11's buffer) and the thread that parses, hashes and writes
them while the loop reads on. What a client relies on: every byte lands in
the right file under the right digest however the body is cut into reads,
a request pipelined behind a body is answered, a body cut short leaves
nothing behind, a large upload keeps the front end's memory flat, and an
upload is written to this machine's disk once.

Why a process: the body arrives on a socket in reads of any size, with a
request pipelined behind it or the connection cut short, through the server's
own fast path for Content-Length bodies; the front end's peak memory and the
bytes its process writes are read from /proc.
"""

from __future__ import annotations

import io
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from support import service_harness
from support.raw_http import read_response
from support.service_harness import ServiceProcess, copy_samples, model_id_of, serving

from service.client import Client

MIB = 1 << 20
BOUNDARY = "receiving-test-boundary-7f3a"


def weights_model(elements: int, seed: int) -> bytes:
    values = np.random.default_rng(seed).standard_normal(elements, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["y"])],
        "weights",
        [],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [elements])],
        [numpy_helper.from_array(values, "W")],
    )
    buffer = io.BytesIO()
    onnx.save(helper.make_model(graph), buffer)
    return buffer.getvalue()


def multipart(parts: list[tuple[str, str, bytes]]) -> bytes:
    """A multipart/form-data body of (field name, file name, bytes) parts."""
    body = b""
    for name, filename, data in parts:
        body += f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n\r\n'.encode()
        body += data + b"\r\n"
    return body + f"--{BOUNDARY}--\r\n".encode()


def upload_head(length: int) -> bytes:
    return (
        f"POST /models HTTP/1.1\r\nHost: test\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("receiving")
    with serving(folder / "store", copy_samples(folder / "root"), "--http-workers", "1") as service:
        yield service


def test_a_body_in_odd_pieces_with_a_request_pipelined_behind_it(server: ServiceProcess) -> None:
    model = weights_model(3 * MIB // 4, seed=1)  # 3 MiB: several reads
    external = bytes(random.Random(2).randbytes(700_001))
    # the external part is not used by the model: the answer is a 400 naming it, after the whole body was read
    bodies = [
        multipart([("model", "odd.onnx", model)]),
        multipart([("model", "odd.onnx", model), ("external_data", "unused.bin", external)]),
    ]
    pieces = random.Random(3)
    with socket.create_connection(("127.0.0.1", server.port)) as connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for number, body in enumerate(bodies):
            stream = upload_head(len(body)) + body
            first = len(upload_head(len(body))) + 1000  # the head and the body's first bytes in one send: h11 holds some
            connection.sendall(stream[:first])
            position = first
            while position < len(stream):
                step = pieces.choice([1, 7, 4095, 65_536, 300_000, 1_500_000])
                piece = stream[position : position + step]
                position += len(piece)
                if position >= len(stream):
                    piece += b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n"  # pipelined behind the body's last bytes
                connection.sendall(piece)
                if step < 100:
                    time.sleep(0.01)
            status, _, answer, rest = read_response(connection, b"")
            if number == 0:
                assert status == 201, answer
                assert f'"id":"{model_id_of(model, {})}"'.encode() in answer
            else:
                assert status == 400 and b"unused.bin" in answer, answer
            health, _, _, rest = read_response(connection, rest)
            assert health == 200 and rest == b""


def test_a_body_cut_short_leaves_nothing_behind(server: ServiceProcess) -> None:
    body = multipart([("model", "cut.onnx", weights_model(MIB, seed=4))])
    logged_before = len(server.log.read_bytes())
    with socket.create_connection(("127.0.0.1", server.port)) as connection:
        connection.sendall(upload_head(len(body)) + body[: len(body) // 2])
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    while (server.temporary_files() or b"POST /models 499" not in server.log.read_bytes()[logged_before:]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.temporary_files() == []
    logged = server.log.read_bytes()[logged_before:].decode(errors="replace")
    # the client's leaving is logged and counted as 499 (client closed request), not as the service's 500
    assert "POST /models 499" in logged and "POST /models 500" not in logged, logged
    with server.client() as client:
        assert client.get("/healthz").status_code == 200
        assert all(item["input"] != "cut.onnx" for item in client.get("/models").json()["items"])


def vm_kib(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/PID/status")


def test_a_256_mib_upload_keeps_the_front_ends_memory_flat(server: ServiceProcess, tmp_path: Path) -> None:
    path = tmp_path / "big.onnx"
    path.write_bytes(weights_model(64 * MIB, seed=5))
    model = path.read_bytes()
    assert server.process is not None
    with server.client() as client:
        warm = weights_model(MIB, seed=6)  # the upload path's code and buffers in place first
        assert client.post("/models", files={"model": ("warm.onnx", io.BytesIO(warm))}).status_code == 201
        before = vm_kib(server.process.pid, "VmHWM")
        with path.open("rb") as big:
            response = client.post("/models", files={"model": ("big.onnx", big)})
        assert response.status_code == 201, response.text
        assert response.json()["id"] == model_id_of(model, {})
    growth = vm_kib(server.process.pid, "VmHWM") - before
    # Receiving holds at most 8 MiB queued for the writing thread, 8 MiB for the
    # hashing one and a 1 MiB read. On a fleet store the commit's S3 upload adds
    # obstore's multipart buffers: up to 12 parts of 5 MiB in flight per file.
    bound = (48 + (12 * 5 if service_harness.FLEET is not None else 0)) * 1024
    assert growth < bound, f"the front end's peak memory grew by {growth} KiB receiving 256 MiB"


def bytes_written(pid: int) -> tuple[int, int]:
    """What the process wrote to files, and what of it went to storage: /proc/PID/io's
    write_bytes, and that less cancelled_write_bytes (dirty pages truncated or removed
    before their writeback: a fleet's resumable upload buffers each 8 MiB part in a
    file it empties once the part is sent, and its work folders go once in the bucket)."""
    try:
        fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    except PermissionError:  # the undumpable front end, to a test user other than root
        pytest.skip("/proc/PID/io of the front end is closed to this user")
    return int(fields["write_bytes"]), int(fields["write_bytes"]) - int(fields["cancelled_write_bytes"])


def test_an_upload_is_written_to_this_machines_disk_once(server: ServiceProcess, tmp_path: Path) -> None:
    """On its way to the store (and, on a fleet store, to the
    bucket), one-shot or resumable: the worker reads the file where it was
    received, the store takes it from there."""
    assert server.process is not None
    for seed, resumable in ((7, False), (8, True)):
        model = weights_model(16 * MIB, seed=seed)  # 64 MiB
        path = tmp_path / f"once-{seed}.onnx"
        path.write_bytes(model)
        files_before, disk_before = bytes_written(server.process.pid)
        with Client(server.url) as client:
            summary = client.import_file(path, resumable=resumable)
        assert summary["id"] == model_id_of(model, {})
        files_after, disk_after = bytes_written(server.process.pid)
        assert files_after - files_before >= len(model), "the bytes pass through this machine's files (the measure sees them)"
        written = disk_after - disk_before
        assert written < 1.25 * len(model), f"{written} bytes written to disk for a {len(model)}-byte upload"
