"""The service's HTTP edge under hostile or odd traffic, against a real server
process on loopback: the header deadline (silent, trickling and kept-alive
connections), 70 slow clients beside normal traffic, Content-Length together
with Transfer-Encoding, a client gone in the middle of a JSON body (one INFO
line, no traceback), and a property: no header value or header bytes get a
500, and the server keeps answering. Range, If-None-Match, If-Range and
nosniff as an API: api/test_api_http_edges.py.

Why a process: this is hostile TCP: deadlines on connections that send
nothing or trickle, clients holding sockets open, framing an HTTP parser
must refuse (request smuggling), a client that leaves mid-body, raw header
bytes, all met by the server's own protocol, on a socket, with its log read
from the process.
"""

from __future__ import annotations

import json
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.service_harness import ServiceProcess, read_until_closed, serving
from support.tensor_models import Tensor, imported_w

HEADER_TIMEOUT = 2.0  # the main server's --header-timeout
MARGIN = 1.5  # seconds the server may take beyond a deadline (timer, loaded machine)
SLOW_CLIENTS = 70
STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Iterator[ServiceProcess]:
    """A server with a short header deadline."""
    store = tmp_path_factory.mktemp("hardening-store") / "store"
    with serving(store, data_root, "--header-timeout", str(HEADER_TIMEOUT)) as service:
        yield service


@pytest.fixture(scope="module")
def patient_server(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Iterator[ServiceProcess]:
    """A server whose header deadline outlasts the slow-client test: the slow
    clients stay connected throughout."""
    store = tmp_path_factory.mktemp("patient-store") / "store"
    with serving(store, data_root, "--header-timeout", "120") as service:
        yield service


@pytest.fixture(scope="module")
def tensor(server: ServiceProcess) -> Tensor:
    """Tensor W of add.onnx, imported on the main server."""
    return imported_w(server)


def connect(server: ServiceProcess, timeout: float = 10.0) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    connection.settimeout(timeout)
    return connection


def statuses(response: bytes) -> list[int]:
    """The status codes of the responses in `response` (status lines at line starts)."""
    return [int(m.group(1)) for m in STATUS_LINE.finditer(response) if m.start() == 0 or response[m.start() - 2 : m.start()] == b"\r\n"]


def exchange(server: ServiceProcess, request: bytes, timeout: float = 15.0) -> bytes:
    """Send one request (which should ask for `Connection: close`); the bytes until the server closes."""
    with connect(server, timeout) as connection:
        connection.sendall(request)
        received, closed = read_until_closed(connection, timeout)
    assert closed, f"the server did not close the connection: {received[:300]!r}"
    return received


def headers_and_body(response: bytes) -> tuple[dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return fields, body


def read_one_response(connection: socket.socket) -> bytes:
    """One response with a Content-Length (the connection stays open)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, received
        received += chunk
    fields, body = headers_and_body(received)
    while len(body) < int(fields["content-length"]):
        chunk = connection.recv(65536)
        assert chunk
        body += chunk
    return received


# The header deadline


def test_a_silent_partial_request_gets_408_and_is_closed(server: ServiceProcess) -> None:
    with connect(server) as connection:
        started = time.monotonic()
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: slow\r\n")
        received, closed = read_until_closed(connection, HEADER_TIMEOUT + MARGIN + 3)
        elapsed = time.monotonic() - started
    assert closed and HEADER_TIMEOUT - 0.2 <= elapsed <= HEADER_TIMEOUT + MARGIN, elapsed
    assert statuses(received) == [408]
    fields, body = headers_and_body(received)
    assert fields["connection"] == "close" and fields["x-content-type-options"] == "nosniff"
    assert fields["content-type"] == "application/problem+json"
    assert json.loads(body)["status"] == 408


def test_trickled_header_bytes_do_not_move_the_deadline(server: ServiceProcess) -> None:
    """A byte every 0.2 s: the deadline counts from the connection's start, not from the last byte."""
    line = b"GET /healthz HTTP/1.1\r\nHost: slow\r\nX-Slow: " + b"a" * 1000
    with connect(server) as connection:
        started = time.monotonic()
        closed_after = None
        for byte in line:
            try:
                connection.sendall(bytes([byte]))
            except OSError:  # reset: closed by the server
                closed_after = time.monotonic() - started
                break
            connection.settimeout(0.2)
            try:
                if connection.recv(65536) == b"":
                    closed_after = time.monotonic() - started
                    break
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed_after = time.monotonic() - started
                break
            if time.monotonic() - started > HEADER_TIMEOUT + MARGIN + 2:
                break
    assert closed_after is not None and closed_after <= HEADER_TIMEOUT + MARGIN, closed_after


def test_a_connection_that_sends_nothing_is_closed_quietly(server: ServiceProcess) -> None:
    with connect(server) as connection:
        started = time.monotonic()
        received, closed = read_until_closed(connection, HEADER_TIMEOUT + MARGIN + 3)
        elapsed = time.monotonic() - started
    assert closed and received == b"" and elapsed <= HEADER_TIMEOUT + MARGIN, elapsed


def test_the_deadline_starts_again_when_a_response_ends(server: ServiceProcess) -> None:
    """Keep-alive: the next request's headers are due header_timeout after the previous response."""
    with connect(server) as connection:
        for _ in range(3):  # requests spaced by less than the deadline each
            time.sleep(HEADER_TIMEOUT * 0.6)
            connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: kept\r\n\r\n")
            assert statuses(read_one_response(connection)) == [200]
        answered = time.monotonic()
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: kept\r\n")  # then silence
        received, closed = read_until_closed(connection, HEADER_TIMEOUT + MARGIN + 3)
        elapsed = time.monotonic() - answered
    assert closed and statuses(received) == [408]
    assert HEADER_TIMEOUT - 0.2 <= elapsed <= HEADER_TIMEOUT + MARGIN, elapsed


def test_a_body_nobody_reads_does_not_hold_the_connection(server: ServiceProcess) -> None:
    """A 405 answered before the body: the rest of the body, trickled, counts
    as the wait for the next request's headers."""
    with connect(server) as connection:
        connection.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        answered = None
        closed_after = None
        started = time.monotonic()
        while time.monotonic() - started < HEADER_TIMEOUT + MARGIN + 3:
            try:
                connection.sendall(b"x")
                connection.settimeout(0.2)
                chunk = connection.recv(65536)
            except TimeoutError:
                continue
            except OSError:  # reset: closed by the server
                closed_after = time.monotonic() - (answered or started)
                break
            if not chunk:
                closed_after = time.monotonic() - (answered or started)
                break
            if answered is None:
                answered = time.monotonic()
                assert statuses(chunk) == [405]
    assert answered is not None and closed_after is not None and closed_after <= HEADER_TIMEOUT + MARGIN, closed_after


def timed_healthz(server: ServiceProcess) -> float:
    """Seconds for a GET /healthz on a new connection, connect to last byte."""
    started = time.perf_counter()
    response = exchange(server, b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n", timeout=10)
    elapsed = time.perf_counter() - started
    assert statuses(response) == [200]
    return elapsed


def test_slow_clients_do_not_hold_up_the_service(patient_server: ServiceProcess, report: list[str]) -> None:
    """70 connections sending a header byte every second; meanwhile an import,
    a tensor and /healthz (p99 of 100 requests within 100 ms)."""
    endless = b"GET /healthz HTTP/1.1\r\nHost: slow\r\nX-Slow: " + b"a" * 10_000
    slow = [connect(patient_server) for _ in range(SLOW_CLIENTS)]
    stop = threading.Event()
    failures: list[str] = []

    def trickle() -> None:
        position = 0
        while True:
            for connection in slow:
                try:
                    connection.sendall(endless[position : position + 1])
                except OSError as error:
                    failures.append(str(error))
            position += 1
            if stop.wait(1.0):
                return

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        time.sleep(2.5)  # the slow clients are under way
        with patient_server.client() as client:
            imported = client.post("/models", json={"path": "add.onnx"})
            assert imported.status_code in (200, 201), imported.text
            assert client.get(f"/models/{imported.json()['id']}/tensors/W").status_code == 200
        timings = sorted(timed_healthz(patient_server) for _ in range(100))
        p99 = timings[math.ceil(0.99 * len(timings)) - 1]
        report.append(
            f"/healthz beside {SLOW_CLIENTS} slow clients: median {timings[len(timings) // 2] * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
        )
        assert p99 <= 0.100, timings[-5:]
        # the slow clients were held, not dropped: each connection is still open
        for connection in slow:
            connection.setblocking(False)
            with pytest.raises(BlockingIOError):
                connection.recv(1)
        assert not failures, failures[:3]
    finally:
        stop.set()
        trickler.join(5)
        for connection in slow:
            connection.close()


# Framing


@pytest.mark.parametrize(
    "framing",
    [
        b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
        b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
        b"transfer-encoding: CHUNKED\r\ncontent-length: 0\r\n",
    ],
)
def test_content_length_with_transfer_encoding_is_refused_and_closed(server: ServiceProcess, framing: bytes) -> None:
    smuggled = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"  # must never be answered
    request = b"POST /models HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + framing + b"\r\n0\r\n\r\n" + smuggled
    response = exchange(server, request)  # closed by the server, not by us
    assert statuses(response) == [400]
    fields, body = headers_and_body(response)
    assert fields["connection"] == "close" and fields["x-content-type-options"] == "nosniff"
    problem = json.loads(body)
    assert problem["type"].endswith("/bad-request") and "Transfer-Encoding" in problem["detail"]


# A client gone mid-request


def test_a_client_gone_mid_json_body_is_one_info_line(server: ServiceProcess) -> None:
    logged_before = server.log.read_bytes()
    with connect(server) as connection:
        connection.sendall(
            b"POST /models HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n" + b'{"path": "'
        )
        time.sleep(0.3)
    deadline = time.monotonic() + 10
    new = b""
    while time.monotonic() < deadline:
        new = server.log.read_bytes()[len(logged_before) :]
        if b"went away" in new:
            break
        time.sleep(0.05)
    time.sleep(0.5)  # anything logged after it
    new = server.log.read_bytes()[len(logged_before) :]
    lines = new.decode(errors="replace").splitlines()
    gone = [line for line in lines if "went away" in line]
    assert len(gone) == 1 and " INFO " in gone[0] and "POST /models" in gone[0], lines
    assert not [line for line in lines if "ERROR" in line or "Traceback" in line], lines
    assert timed_healthz(server) < 5


# The property: no header gets a 500


RAW_BYTES = st.binary(max_size=200).map(lambda raw: raw.replace(b"\r", b"").replace(b"\n", b""))
DIGITS = st.text(alphabet="0123456789²³¹٣५０", max_size=8) | st.integers(19, 6000).map(lambda n: "9" * n)


def _encoded(text: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    return st.tuples(text, st.sampled_from(["utf-8", "latin-1"])).map(lambda pair: pair[0].encode(pair[1], "replace"))


def _ranges() -> st.SearchStrategy[bytes]:
    structured = st.builds(
        lambda unit, first, separator, last: f"{unit}={first}{separator}{last}",
        st.sampled_from(["bytes", "BYTES", "items", "", "bytes "]),
        DIGITS,
        st.sampled_from(["-", "", "--", ",", " - "]),
        DIGITS,
    )
    return _encoded(structured) | RAW_BYTES


def _entity_tags(etag: str) -> st.SearchStrategy[bytes]:
    one = st.sampled_from([etag, f"W/{etag}", "*", '"other"', "W/", '"', '"a,b"', etag[:-1], "w/" + etag, ""]) | st.text(max_size=20)
    joined = st.builds(lambda tags, comma: comma.join(tags), st.lists(one, max_size=4), st.sampled_from([",", ", ", " , ", ""]))
    return _encoded(joined) | RAW_BYTES


def _content_types() -> st.SearchStrategy[bytes]:
    boundary = st.text(max_size=80) | st.sampled_from(['""', '"', "a" * 200, "", " ", "--", ";", "x" * 71])
    media = st.sampled_from(["multipart/form-data", "application/json", "MULTIPART/FORM-DATA", "text/plain", "", "multipart/mixed"])
    built = st.builds(lambda m, sep, b: f"{m}{sep}boundary={b}", media, st.sampled_from(["; ", ";", "", "; charset=utf-8; "]), boundary)
    return _encoded(built) | RAW_BYTES


@dataclass(frozen=True)
class FuzzRequest:
    method: str
    target: str
    headers: list[tuple[bytes, bytes]]
    body: bytes


def _requests(tensor: Tensor) -> st.SearchStrategy[FuzzRequest]:
    model_url = tensor.url.rsplit("/tensors/", 1)[0]
    reads = st.builds(
        FuzzRequest,
        st.sampled_from(["GET", "HEAD"]),
        st.sampled_from([tensor.url, tensor.url + "?format=npy", "/healthz", "/models", model_url, model_url + "/graph"]),
        st.lists(
            st.tuples(st.just(b"Range"), _ranges())
            | st.tuples(st.just(b"If-None-Match"), _entity_tags(tensor.etag))
            | st.tuples(st.just(b"If-Range"), _entity_tags(tensor.etag))
            | st.tuples(st.just(b"Accept"), RAW_BYTES)
            | st.tuples(RAW_BYTES.filter(lambda name: b":" not in name), RAW_BYTES),
            max_size=4,
        ),
        st.just(b""),
    )

    def multipart(boundary_header: bytes, payload: bytes) -> bytes:
        boundary = boundary_header.partition(b"boundary=")[2].strip(b'"')
        return (
            b"--" + boundary + b'\r\nContent-Disposition: form-data; name="model"; filename="m.onnx"\r\n\r\n'
            b"" + payload + b"\r\n--" + boundary + b"--\r\n"
        )

    posts = st.builds(
        lambda content_type, payload, well_formed: FuzzRequest(
            "POST", "/models", [(b"Content-Type", content_type)], multipart(content_type, payload) if well_formed else payload
        ),
        _content_types(),
        st.binary(max_size=100),
        st.booleans(),
    )
    return reads | posts


def render(request: FuzzRequest) -> bytes:
    lines = [f"{request.method} {request.target} HTTP/1.1".encode(), b"Host: fuzz", b"Connection: close"]
    lines += [name + b": " + value for name, value in request.headers]
    if request.method == "POST":
        lines.append(f"Content-Length: {len(request.body)}".encode())
    return b"\r\n".join(lines) + b"\r\n\r\n" + request.body


def test_no_header_gets_a_500(server: ServiceProcess, tensor: Tensor) -> None:
    logged_before = len(server.log.read_bytes())

    @settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(_requests(tensor))
    def answered_without_500(request: FuzzRequest) -> None:
        response = exchange(server, render(request))
        found = statuses(response)
        assert found and 500 not in found, (found, response[:500])

    answered_without_500()
    assert timed_healthz(server) < 5
    log = server.log.read_bytes()[logged_before:].decode(errors="replace")
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
