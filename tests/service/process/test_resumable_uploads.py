"""Resumable uploads (tus 1.0.0 under /uploads) on the wire, against real
server processes: a PATCH cut mid-body (its connection closed) keeps what
arrived and is resumed; a second PATCH while one holds the upload on its
open connection is 409; two front-end processes share the uploads, each
taking PATCHes of one upload. The protocol as an API: api/test_tus_uploads.py.

Why a process: a PATCH held open or cut on its own socket (bytes sent, the
rest not yet), and two front-end processes behind one port (which one
accepts a connection is the kernel's choice), are a server's and its
connections' behaviour, which an ASGI transport has not.
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from support.service_harness import SAMPLES, ServiceProcess, assert_problem, children_of, model_id_of, serving
from support.tus_uploads import (
    OCTETS,
    TUS,
    add_model,
    create,
    keyed_settings,
    offset_of,
    patch,
    uploads_held,
    wait_until,
    weights_of,
)

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


def held_by_a_writer(client: httpx.Client, url: str, offset: int, auth: dict[str, str] | None = None) -> bool:
    """Another request is writing the upload: a PATCH without bytes is refused, 409 upload-busy."""
    answer = patch(client, url, offset, b"", auth)
    return answer.status_code == 409 and answer.json()["type"].endswith("/upload-busy")


def raw_patch(server: ServiceProcess, url: str, offset: int, length: int, auth: dict[str, str] | None = None) -> socket.socket:
    """A connection that has sent a PATCH's head announcing `length` bytes, and no byte of its body."""
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    fields = {**TUS, **(auth or {}), "Upload-Offset": str(offset), "Content-Type": OCTETS, "Content-Length": str(length)}
    head = f"PATCH {url} HTTP/1.1\r\nHost: x\r\n" + "".join(f"{name}: {value}\r\n" for name, value in fields.items()) + "\r\n"
    connection.sendall(head.encode())
    return connection


def writing_patch(
    server: ServiceProcess, client: httpx.Client, url: str, data: bytes, sent: int, auth: dict[str, str] | None = None
) -> socket.socket:
    """A raw PATCH of `data` that holds the upload, its first `sent` bytes sent.
    Each probe (`held_by_a_writer`) holds the upload for an instant too: a
    PATCH that asks for it in that instant is refused, 409 upload-busy, and
    closed. Such a PATCH is sent again, so that one does hold it."""
    deadline = time.monotonic() + 10
    while True:
        connection = raw_patch(server, url, 0, len(data), auth)
        connection.sendall(data[:sent])
        while time.monotonic() < deadline:
            if held_by_a_writer(client, url, sent, auth):
                return connection
            if select.select([connection], [], [], 0.05)[0]:  # it was answered: refused
                status, answer = read_status(connection)
                assert status == 409 and b"/upload-busy" in answer, answer
                connection.close()
                break
        else:
            connection.close()
            raise AssertionError("no PATCH came to hold the upload within 10 s")


def read_status(connection: socket.socket) -> tuple[int, bytes]:
    """The status and the whole answer: its head, then as much body as its content-length says (it may come later)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, received
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lengths = [line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
    while len(body) < (int(lengths[0]) if lengths else 0) and (chunk := connection.recv(65536)):
        body += chunk
    return int(received.split(b" ", 2)[1]), head + b"\r\n\r\n" + body


@pytest.fixture(scope="module")
def keyed(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Iterator[tuple[ServiceProcess, dict[str, dict[str, str]]]]:
    """A server with API keys (alice, bob) and small upload limits."""
    base = tmp_path_factory.mktemp("resumable")
    auth, args = keyed_settings(base)
    with serving(base / "store", SAMPLES, *args) as server:
        yield server, auth


@pytest.fixture()
def server(keyed: tuple[ServiceProcess, dict[str, dict[str, str]]]) -> ServiceProcess:
    return keyed[0]


@pytest.fixture()
def alice(keyed: tuple[ServiceProcess, dict[str, dict[str, str]]]) -> dict[str, str]:
    return keyed[1]["alice"]


@pytest.fixture()
def bob(keyed: tuple[ServiceProcess, dict[str, dict[str, str]]]) -> dict[str, str]:
    return keyed[1]["bob"]


def test_a_patch_cut_mid_body_keeps_what_arrived_and_resumes(server: ServiceProcess, alice: dict[str, str]) -> None:
    data = add_model(seed=4, values=32 << 10)  # 128 KiB of weights
    half = len(data) // 2
    with server.client() as client:
        url = create(client, len(data), alice)
        connection = raw_patch(server, url, 0, len(data), alice)
        connection.sendall(data[:half])
        time.sleep(0.3)
        connection.close()  # gone mid-body
        wait_until(lambda: offset_of(client, url, alice) == half)
        deadline = time.monotonic() + 10
        while (resumed := patch(client, url, half, data[half:], alice)).status_code == 409:  # the cut request may still hold it
            assert resumed.json()["type"].endswith("/upload-busy") and time.monotonic() < deadline
            time.sleep(0.05)
        assert resumed.status_code == 204 and resumed.headers["upload-offset"] == str(len(data))
        imported = client.post("/models", json={"upload": url.rsplit("/", 1)[1]}, headers=alice)
        assert imported.status_code == 201 and imported.json()["id"] == model_id_of(data, {})
        assert client.get(f"/models/{imported.json()['id']}/tensors/W", headers=alice).content == weights_of(4, 32 << 10)


def test_a_second_patch_while_one_writes_is_409(server: ServiceProcess, alice: dict[str, str]) -> None:
    data = bytes(range(256)) * 64
    with server.client() as client:
        url = create(client, len(data), alice)
        connection = writing_patch(server, client, url, data, 1000, alice)
        try:
            if server.fleet_store is None:  # written as they arrive (the fleet's offset is what is durable: the PATCH's end, a part)
                # the PATCH holds the upload from its head on; its first bytes are written a moment after (on a busy machine,
                # after a HEAD asked at once: 0 in the bare container)
                wait_until(lambda: offset_of(client, url, alice) == 1000)
            busy = patch(client, url, 1000, data[1000:], alice)
            assert "another request is writing" in assert_problem(busy, 409, "upload-busy")["detail"]
            assert "upload-offset" not in busy.headers
            connection.sendall(data[1000:])
            status, _ = read_status(connection)
            assert status == 204
        finally:
            connection.close()
        assert offset_of(client, url, alice) == len(data)
        assert client.delete(url, headers={**TUS, **alice}).status_code == 204


def _front_ends(server: ServiceProcess) -> list[int]:
    assert server.process is not None
    return [pid for pid in children_of(server.process.pid) if children_of(pid)]


def _bytes_written(pid: int) -> int:
    """What the process wrote to files (a PATCH's bytes): /proc/PID/io, or its CPU ticks where that is closed to us."""
    try:
        fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
        return int(fields["wchar"])
    except PermissionError:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(stat[11]) + int(stat[12])) << 20  # a tick counts as a MiB


def test_two_front_ends_share_the_uploads(tmp_path: Path) -> None:
    with serving(tmp_path / "store", SAMPLES, "--http-workers", "2", "--workers", "1") as server:
        wait_until(lambda: len(_front_ends(server)) == 2 and server.log.read_text().count(" ready: data root ") >= 2, 30)
        pids = _front_ends(server)
        before = {pid: _bytes_written(pid) for pid in pids}
        models = {seed: add_model(seed, values=256 << 10) for seed in range(10, 16)}  # 1 MiB each

        def send(seed: int) -> str:
            data, piece = models[seed], 256 << 10
            with httpx.Client(base_url=server.url, timeout=60, headers={"Connection": "close"}) as client:  # a connection per request
                url = create(client, len(data))
                for offset in range(0, len(data), piece):
                    assert patch(client, url, offset, data[offset : offset + piece]).status_code == 204
                return url.rsplit("/", 1)[1]

        with ThreadPoolExecutor(6) as pool:
            ids = dict(zip(models, pool.map(send, models), strict=True))
        written = {pid: _bytes_written(pid) - before[pid] for pid in pids}
        assert all(amount >= 256 << 10 for amount in written.values()), written  # both front ends took PATCHes
        # one upload, piece after piece over new connections: each piece's process, by what it wrote (which
        # process accepts a connection is the kernel's choice: 128 pieces, so both take some however it leans)
        data, piece, served = add_model(seed=16, values=256 << 10), 8 << 10, []
        with httpx.Client(base_url=server.url, timeout=60, headers={"Connection": "close"}) as client:
            url = create(client, len(data))
            for offset in range(0, len(data), piece):
                before = {pid: _bytes_written(pid) for pid in pids}
                assert patch(client, url, offset, data[offset : offset + piece]).status_code == 204
                served.append(max(pids, key=lambda pid: _bytes_written(pid) - before[pid]))
        assert set(served) == set(pids), served  # resumed on the other process, and back
        models[16], ids[16] = data, url.rsplit("/", 1)[1]
        with server.client(headers={"Connection": "close"}) as client:
            for seed, upload_id in ids.items():
                imported = client.post("/models", json={"upload": upload_id})
                assert imported.status_code == 201, imported.text
                assert imported.json()["id"] == model_id_of(models[seed], {})
                assert client.get(f"/models/{imported.json()['id']}/tensors/W").content == weights_of(seed, 256 << 10)
        assert uploads_held(server) == set()
