"""A tensor's bytes on the wire, against real server processes: a tensor of
a few MiB (sent with sendfile, the server's zero-copy send), uploaded and
imported by path: one keep-alive connection carries request after request,
and every kind of file response is framed exactly on one socket; a
data-root file cut while being sent ends the connection with a short body;
the front end's memory stays flat while it serves a 64 MiB tensor again and
again. The bytes, Ranges, HEAD, the plain route and API keys as an API:
api/test_tensor_ranges.py.

Why a process: what is proven is the connection and the front end's own
process: sendfile into a socket, a keep-alive connection's framing byte by
byte, a body cut short on the wire, and the front end's peak memory
(VmHWM), none of which an ASGI transport has.
"""

from __future__ import annotations

import hashlib
import os
import socket
from pathlib import Path

import httpx
import pytest
from support.service_harness import ServiceProcess, assert_problem, copy_samples
from support.tensor_models import BIG_DIMS, LARGE, MIB, Big, import_path, values, write_model

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)

HUGE_ELEMENTS = 16 << 20  # 64 MiB of float32
CUT_ELEMENTS = 10 << 20  # 40 MiB: more than the loopback's socket buffers hold


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Path:
    """The samples, plus: big/ (a 4 MiB tensor inline), huge/ (64 MiB in
    external data), cut/ (40 MiB in external data)."""
    root = copy_samples(tmp_path_factory.mktemp("tensor-bytes-data") / "root")
    write_model(root / "big" / "model.onnx", values(1, BIG_DIMS[0] * BIG_DIMS[1]).reshape(BIG_DIMS))
    write_model(root / "huge" / "model.onnx", values(2, HUGE_ELEMENTS), "huge.bin")
    write_model(root / "cut" / "model.onnx", values(5, CUT_ELEMENTS), "cut.bin")
    return root


def test_one_keep_alive_connection_carries_sequential_gets(server: ServiceProcess, big: Big) -> None:
    with server.client() as client:
        local_ports = set()
        for n in range(6):
            if n % 3 == 1:
                response = client.get(big.url, headers={"Range": f"bytes=1-{LARGE}"})
                assert response.status_code == 206 and response.content == big.raw[1 : LARGE + 1]
            elif n % 3 == 2:
                response = client.get(big.url, params={"format": "npy"})
                assert response.status_code == 200 and response.content.endswith(big.raw)
            else:
                response = client.get(big.url)
                assert response.status_code == 200 and response.content == big.raw
            local_ports.add(response.extensions["network_stream"].get_extra_info("client_addr"))
        assert len(local_ports) == 1  # all on the one connection
        assert client.get("/healthz").status_code == 200


def read_response(connection: socket.socket, pending: bytes, head: bool = False) -> tuple[bytes, dict[str, str], bytes, bytes]:
    """One response from `connection` (`pending`: what was already read): its
    status line, headers, body (by Content-Length) and what follows it."""
    received = pending
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(1 << 16)
        assert chunk, f"the connection closed inside a response head: {received[:300]!r}"
        received += chunk
    head_bytes, _, rest = received.partition(b"\r\n\r\n")
    status, *lines = head_bytes.split(b"\r\n")
    fields = {name.strip().lower().decode(): value.strip().decode() for name, _, value in (line.partition(b":") for line in lines)}
    length = 0 if head else int(fields["content-length"])
    while len(rest) < length:
        chunk = connection.recv(1 << 20)
        assert chunk, f"the connection closed after {len(rest)} of {length} body bytes"
        rest += chunk
    return status, fields, rest[:length], rest[length:]


def test_the_connection_stays_usable_after_each_kind_of_file_response(server: ServiceProcess, big: Big) -> None:
    """On one socket, one request at a time: every response is framed exactly
    (a byte too many or too few would break the next one)."""
    host = f"Host: 127.0.0.1:{server.port}\r\n".encode()
    requests = [
        (b"GET " + big.url.encode() + b" HTTP/1.1\r\n" + host + b"\r\n", False, big.raw),
        (b"HEAD " + big.url.encode() + b" HTTP/1.1\r\n" + host + b"\r\n", True, b""),
        (
            b"GET " + big.url.encode() + b" HTTP/1.1\r\n" + host + f"Range: bytes=7-{LARGE + 7}\r\n\r\n".encode(),
            False,
            big.raw[7 : LARGE + 8],
        ),
        (b"GET " + big.url.encode() + b"?format=npy HTTP/1.1\r\n" + host + b"Range: bytes=-400000\r\n\r\n", False, big.raw[-400_000:]),
        (b"GET " + big.url.encode() + b" HTTP/1.1\r\n" + host + b"Range: bytes=0-9\r\n\r\n", False, big.raw[:10]),
        (b"GET /healthz HTTP/1.1\r\n" + host + b"\r\n", False, None),
        (b"GET " + big.url.encode() + b" HTTP/1.1\r\n" + host + b"\r\n", False, big.raw),
    ]
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as connection:
        pending = b""
        for request, head, expected in requests:
            connection.sendall(request)
            status, fields, body, pending = read_response(connection, pending, head)
            assert status.split()[1] in (b"200", b"206"), (request, status)
            assert fields.get("connection", "keep-alive") != "close", request
            if expected is not None:
                assert body == expected, request
            assert pending == b"", request  # nothing beyond the response's length


def test_a_file_cut_while_being_sent_ends_the_connection_with_a_short_body(
    server: ServiceProcess, client: httpx.Client, data_root: Path
) -> None:
    """The file's bytes up to the cut, then fewer bytes than Content-Length and
    the connection closed. Past the cut nothing is promised: what sendfile had
    already handed to the socket may arrive as zeros (measured on ext4: the
    truncated page-cache pages still queued), so only the short body tells the
    client, as it does for any connection lost mid-body."""
    url = f"/models/{import_path(client, 'cut/model.onnx')}/tensors/Big"
    expected = values(5, CUT_ELEMENTS).tobytes()
    received = bytearray()
    with server.client() as reader, reader.stream("GET", url) as response:
        assert response.status_code == 200 and response.headers["content-length"] == str(len(expected))
        chunks = response.iter_raw(1 << 16)
        received += next(chunks)  # sendfile under way: the socket buffers hold far less than the 40 MiB
        os.truncate(data_root / "cut" / "cut.bin", MIB)
        with pytest.raises(httpx.RemoteProtocolError):  # fewer bytes than Content-Length, then the connection closed
            for chunk in chunks:
                received += chunk
    assert 0 < len(received) < len(expected)  # a short body: the client knows it is incomplete
    assert received[:MIB] == expected[: min(len(received), MIB)]  # the file's bytes up to the cut
    assert_problem(client.get(url), 409, "tensor-source-changed")
    assert client.get("/healthz").status_code == 200


# The front end's memory


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/PID/status")


def test_serving_a_64_mib_tensor_keeps_the_front_ends_memory_flat(server: ServiceProcess, client: httpx.Client) -> None:
    url = f"/models/{import_path(client, 'huge/model.onnx')}/tensors/Big"
    expected = hashlib.sha256(values(2, HUGE_ELEMENTS).tobytes()).hexdigest()
    assert client.get(url, headers={"Range": "bytes=0-15"}).status_code == 206  # the read path's code is loaded, no big body yet
    assert client.head(url).headers["content-length"] == str(64 * MIB)
    assert server.process is not None
    before = vm_hwm_kib(server.process.pid)
    for _ in range(5):
        digest, length = hashlib.sha256(), 0
        with client.stream("GET", url) as response:
            assert response.status_code == 200
            for chunk in response.iter_bytes(1 << 20):
                digest.update(chunk)
                length += len(chunk)
        assert (length, digest.hexdigest()) == (64 * MIB, expected)
    growth = vm_hwm_kib(server.process.pid) - before
    assert growth < 16 * 1024, f"the front end's peak memory grew by {growth} KiB serving 5 x 64 MiB"
