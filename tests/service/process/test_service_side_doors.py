"""Side doors of the HTTP service on the wire, each against a real server
process: made-up methods (as sent, which httpx would normalize) cannot grow
/metrics; a path or a query that does not percent-decode to UTF-8 is a 400
(no U+FFFD name served for `%FF`) while names holding NUL are found by name
and by prefix; request heads over 16 KiB get 431 in one read or many; a key
file without keys is refused at the start and on SIGHUP. The side doors of
the API itself (the metrics scope, forged cursors, operation ids):
api/test_api_side_doors.py.

Why a process: the requests here are bytes on a socket that an HTTP client
would not send as they are (a lowercase or 2,000-byte method, a `%FF` or a
lone `%` in a target, a 16 KiB head in pieces), read by the server's own
HTTP parser; and a key file is refused by `python -m service` at its start
and on a SIGHUP sent to it.
"""

from __future__ import annotations

import json
import random
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from support.paths import REPO
from support.service_harness import ServiceProcess, copy_samples, read_until_closed, serving
from support.tensor_models import NAMES, import_path, names_model

from service.access.keys import new_key

STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ")
HEAD_LIMIT = 16 * 1024  # h11's default bound on a request's head, which uvicorn keeps
METHOD_LABELS = {"GET", "HEAD", "POST", "DELETE", "PATCH", "OPTIONS", "other"}
@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """names.onnx beside the samples, for the module's `server` (support/servers.py:
    anonymous, on the loopback, no API keys)."""
    root = copy_samples(tmp_path_factory.mktemp("side-doors") / "root")
    names_model(root / "names.onnx")
    return root


@pytest.fixture(scope="module")
def model_ids(server: ServiceProcess) -> dict[str, str]:
    with server.client() as client:
        return {path: import_path(client, path) for path in ("add.onnx", "names.onnx")}


# Raw HTTP/1.1, for what httpx would normalize or refuse to send


def connect(server: ServiceProcess, timeout: float = 10.0) -> socket.socket:
    connection = socket.create_connection(("127.0.0.1", server.port), timeout=timeout)
    connection.settimeout(timeout)
    return connection


def read_one_response(connection: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One response with a Content-Length; the connection stays open."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, received
        received += chunk
    status, fields, body = parse_response(received)
    while len(body) < int(fields.get("content-length", "0")):
        chunk = connection.recv(65536)
        assert chunk
        body += chunk
    return status, fields, body


def parse_response(response: bytes) -> tuple[int, dict[str, str], bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    match = STATUS_LINE.match(head)
    assert match, response[:200]
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return int(match.group(1)), fields, body


def raw_request(server: ServiceProcess, method: str, target: str) -> tuple[int, dict[str, str], bytes]:
    """One request with the target exactly as given; the answer, read until the server closes."""
    with connect(server) as connection:
        connection.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        received, closed = read_until_closed(connection)
    assert closed, received[:300]
    return parse_response(received)


def problem_of(status: int, fields: dict[str, str], body: bytes, expected: int, slug: str) -> dict[str, Any]:
    assert status == expected, body[:300]
    assert fields["content-type"] == "application/problem+json"
    problem: dict[str, Any] = json.loads(body)
    assert problem["status"] == expected and problem["type"].endswith("/" + slug), problem
    return problem


# 1. The method label of the request metrics


def method_labels(metrics: str) -> set[str]:
    return set(re.findall(r'^onnx_import_http_requests_(?:total|created)\{[^}]*method="([^"]*)"', metrics, re.MULTILINE))


def test_made_up_methods_do_not_grow_the_metrics(server: ServiceProcess) -> None:
    chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789!#$%&'*+-.^_`|~"
    rng = random.Random(20260)
    methods = {"".join(rng.choice(chars) for _ in range(rng.randint(3, 24))) for _ in range(300)}
    methods |= {"get", "Head", "PUT", "TRACE", "X" * 2000}
    methods -= METHOD_LABELS
    with server.client() as client:
        before = client.get("/metrics").text
    with connect(server) as connection:  # one kept-alive connection, a request after each answer
        for method in sorted(methods):
            path = rng.choice(["/healthz", "/models", "/metrics", "/nowhere"])
            connection.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            status, _, _ = read_one_response(connection)
            assert status in (404, 405), (method, status)
    with server.client() as client:
        after = client.get("/metrics").text
    assert method_labels(after) <= METHOD_LABELS, method_labels(after) - METHOD_LABELS
    assert "other" in method_labels(after)
    counted = sum(float(value) for value in re.findall(r'^onnx_import_http_requests_total\{[^}]*method="other"[^}]*\} (\S+)', after, re.M))
    assert counted >= len(methods)
    # a few new (route, status) series at most, not one per method
    assert len(after) - len(before) < 8000, (len(before), len(after))


# 4. Tensor names and prefixes that do not decode, and names holding NUL


def test_a_path_that_is_not_utf8_is_a_400_not_the_replacement_character(server: ServiceProcess, model_ids: dict[str, str]) -> None:
    base = f"/models/{model_ids['names.onnx']}/tensors/"
    value = np.full([2], NAMES["\ufffd"], dtype=np.float32).tobytes()
    status, _, body = raw_request(server, "GET", base + quote("\ufffd", safe=""))  # the real U+FFFD name
    assert status == 200 and body == value
    for name, reason in (
        ("%FF", "not UTF-8"),
        ("%C3", "not UTF-8"),
        ("%ED%A0%80", "not UTF-8"),
        ("100%", "'%'"),
        ("%ZZ", "'%'"),
        ("%F", "'%'"),
    ):
        for method in ("GET", "HEAD"):
            status, fields, body = raw_request(server, method, base + name)
            assert status == 400, (name, method, body[:200])
            if method == "GET":
                assert reason in problem_of(status, fields, body, 400, "bad-request")["detail"], name
            else:
                assert body == b""
    assert raw_request(server, "GET", base + "100%25")[0] == 404  # '%' sent as %25: a name, just not one of this model
    for query in ("field_path=%FF", "format=raw&x=%G0"):
        status, fields, body = raw_request(server, "GET", f"{base}{quote(chr(0xFFFD), safe='')}?{query}")
        assert "query" in problem_of(status, fields, body, 400, "bad-request")["detail"]


def test_names_holding_nul_are_found_by_name_and_by_prefix(server: ServiceProcess, model_ids: dict[str, str]) -> None:
    base = f"/models/{model_ids['names.onnx']}/tensors"
    with server.client() as client:

        def names(prefix: str) -> list[str]:
            page = client.get(base, params={"prefix": prefix})
            assert page.status_code == 200, page.text
            return [item["name"] for item in page.json()["items"]]

        assert names("a\x00") == ["a\x00b", "a\x00c"]
        assert names("a\x00c") == ["a\x00c"]
        assert names("a") == ["a", "a\x00b", "a\x00c", "ab"]
        assert names("\ufffd") == ["\ufffd"]
        for name, value in NAMES.items():
            got = client.get(f"{base}/{quote(name, safe='')}")
            assert got.status_code == 200 and got.content == np.full([2], value, dtype=np.float32).tobytes(), repr(name)
    for query in ("prefix=%FF", "prefix=a%00%C3", "prefix=100%", "cursor=%ZZ"):
        status, fields, body = raw_request(server, "GET", f"{base}?{query}")
        problem_of(status, fields, body, 400, "bad-request")


# 6. Request heads over 16 KiB


def assert_431_and_closed(received: bytes, closed: bool) -> None:
    assert closed, received[:300]
    status, fields, body = parse_response(received)
    assert fields["connection"] == "close"
    problem = problem_of(status, fields, body, 431, "request-header-fields-too-large")
    assert str(HEAD_LIMIT) in problem["detail"]


def test_a_big_head_in_one_read_gets_431(server: ServiceProcess) -> None:
    for size in (HEAD_LIMIT + 1, 20 * 1024):
        with connect(server) as connection:
            head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
            head += b"a" * (size - len(head) - 4) + b"\r\n\r\n"
            assert len(head) == size
            connection.sendall(head)
            assert_431_and_closed(*read_until_closed(connection))
    with connect(server) as connection:  # at the bound: answered
        head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Big: "
        connection.sendall(head + b"a" * (HEAD_LIMIT - len(head) - 4) + b"\r\n\r\n")
        received, closed = read_until_closed(connection)
        assert closed and parse_response(received)[0] == 200


def send_in_pieces(connection: socket.socket, data: bytes, piece: int) -> None:
    """`data` in pieces of `piece` bytes, a pause after each (one read each on the server)."""
    for start in range(0, len(data), piece):
        connection.sendall(data[start : start + piece])
        time.sleep(0.02)


@pytest.mark.parametrize("field_size", [1000, 100])
def test_a_big_head_in_pieces_gets_431(server: ServiceProcess, field_size: int) -> None:
    """The head is sent up to one byte past the bound (all of it is read, so the close is clean)."""
    fields = b"".join(f"X-F{index}: ".encode() + b"c" * field_size + b"\r\n" for index in range(30_000 // field_size))
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + fields + b"\r\n"
    with connect(server) as connection:
        send_in_pieces(connection, head[: HEAD_LIMIT + 1], 1024)
        assert_431_and_closed(*read_until_closed(connection))
    with connect(server) as connection:  # half of a 20 KiB head, then the rest with its end in one read
        connection.sendall(head[: 10 * 1024])
        time.sleep(0.1)
        connection.sendall(head[10 * 1024 : 20 * 1024] + b"\r\n\r\n")
        assert_431_and_closed(*read_until_closed(connection))
    with server.client() as client:
        assert client.get("/healthz").status_code == 200


# 7. A key file without keys


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def json_lines(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def key_file_refused_in_log(server: ServiceProcess, count: int) -> list[dict[str, Any]]:
    """The log's lines of a refused reload, once there are `count` of them (10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        refused = [line for line in json_lines(server.log) if "not reloaded" in line["message"]]
        if len(refused) >= count or time.monotonic() > deadline:
            return refused
        time.sleep(0.05)


def test_a_key_file_without_keys_keeps_the_keys_in_force(tmp_path: Path) -> None:
    secret, table = new_key("team-a", ["read"])
    key_file = tmp_path / "keys.toml"
    key_file.write_text(table)
    root = copy_samples(tmp_path / "root")
    with serving(tmp_path / "store", root, "--api-keys", str(key_file), "--log-format", "json") as server, server.client() as client:
        assert server.process is not None
        assert client.get("/models", headers=bearer(secret)).status_code == 200
        for count, content in enumerate(("", "# every key revoked\n", "\n\n"), start=1):
            key_file.write_text(content)
            server.process.send_signal(signal.SIGHUP)
            refused = key_file_refused_in_log(server, count)
            assert len(refused) == count, server.log.read_text()[-2000:]
            assert refused[-1]["level"] in ("warning", "error") and "no [[key]]" in refused[-1]["message"]
            assert client.get("/models", headers=bearer(secret)).status_code == 200
        assert not any("0 API keys" in line["message"] for line in json_lines(server.log))


@pytest.mark.parametrize("content", ["", "# no keys yet\n"])
def test_a_key_file_without_keys_refuses_the_start(tmp_path: Path, content: str) -> None:
    (tmp_path / "keys.toml").write_text(content)
    root = copy_samples(tmp_path / "root")
    command = [sys.executable, "-m", "service", "--api-keys", str(tmp_path / "keys.toml"), "--data-root", str(root)]
    started = subprocess.run(
        [*command, "--store", str(tmp_path / "store"), "--port", "0"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 2, started.stderr[-2000:]
    assert "--api-keys" in started.stderr and "no [[key]]" in started.stderr
