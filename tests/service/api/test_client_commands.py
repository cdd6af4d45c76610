"""The command line's reading commands and the client's retries, over real
HTTP, against the service in the test process (the real app and workers)
or, where a server's own life is the point, a real server process: `list` (every page followed, a line per
model or `--json`), `diagnostics` (the findings as JSON, the report as SARIF
2.1.0 and JUnit XML, to standard output or `-o`), `graph -o` (the bytes of
GET /models/{id}/graph), `delete` then `list`; a saturated server's 503
retried after its `Retry-After` (a process); a refused connection retried with a bounded,
doubling backoff until a server process comes up on the port (and given up after
`--retries`); and connection resets: a GET sent again, a POST not (a small
socket server in the test, as no real server resets on purpose).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import onnx
import pytest
from onnx import TensorProto, helper
from support import service_harness
from support.paths import REPO
from support.service_harness import ServiceProcess, ServiceUnderTest, copy_samples, free_port, saturated

from service.client import AsyncClient, Client, Retry, RetryNote

ON_A_PORT = True  # the service on a loopback port, in the test process (support/servers.py): its command line runs as a subprocess

MODELS = 5  # imported by the module: more than one page of `list --page-size 2`


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "service.client", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def retry_lines(stderr: str) -> list[dict[str, Any]]:
    return [line for line in map(json.loads, stderr.splitlines()) if "retry" in line]


def relu_model(path: Path, name: str) -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def wrong_type_model(path: Path) -> Path:
    """Relu then Add of floats, its output declared INT64: the shape stage fails it."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "x"], ["y"], name="add")],
        "wrong_type",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["N", 3])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.fixture(scope="module")
def imported(server: ServiceUnderTest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{id: model file} of the models the module uploads with `import`; the first has a failed check."""
    folder = tmp_path_factory.mktemp("models")
    files = [wrong_type_model(folder / "wrong_type.onnx")]
    files += [relu_model(folder / f"relu{n}.onnx", f"relu{n}") for n in range(MODELS - 1)]
    ids = {}
    for file in files:
        result = run_cli("--url", server.url, "import", str(file))
        assert result.returncode == 0, result.stderr
        ids[json.loads(result.stdout)["id"]] = file
    assert len(ids) == MODELS
    return ids


def listed(server: ServiceUnderTest) -> list[dict[str, object]]:
    """GET /models, every page, by hand."""
    items: list[dict[str, object]] = []
    params = {"limit": "1000"}
    while True:
        page = httpx.get(server.url + "/models", params=params, timeout=30).json()
        items += page["items"]
        if not page["next_cursor"]:
            return items
        params["cursor"] = page["next_cursor"]


# -- list, diagnostics, graph, delete


def test_list_follows_every_page(server: ServiceUnderTest, imported: dict[str, Path]) -> None:
    result = run_cli("--url", server.url, "list", "--page-size", "2")
    assert result.returncode == 0 and result.stderr == "", result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    expected = listed(server)
    assert len(expected) >= MODELS and [row[0] for row in rows] == [item["id"] for item in expected]
    for model_id, name, size, created in rows:
        if model_id in imported:
            assert name == imported[model_id].name and int(size) == imported[model_id].stat().st_size
            assert created.endswith("Z") and created.startswith("20")

    as_json = run_cli("--url", server.url, "list", "--json", "--page-size", "2")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == expected


def test_diagnostics_as_json_sarif_and_junit(server: ServiceUnderTest, imported: dict[str, Path], tmp_path: Path) -> None:
    model_id = next(iter(imported))  # wrong_type.onnx
    result = run_cli("--url", server.url, "diagnostics", model_id)
    assert result.returncode == 0, result.stderr
    findings = json.loads(result.stdout)
    assert any(item["stage"] == "shape" and item["severity"] == "error" for item in findings)
    paged = httpx.get(f"{server.url}/models/{model_id}/diagnostics", params={"limit": 1000}, timeout=30).json()
    assert findings == paged["items"]

    sarif = run_cli("--url", server.url, "diagnostics", model_id, "--format", "sarif")
    assert sarif.returncode == 0, sarif.stderr
    report = json.loads(sarif.stdout)
    assert report["version"] == "2.1.0" and report["runs"][0]["results"]

    out = tmp_path / "junit.xml"
    junit = run_cli("--url", server.url, "diagnostics", model_id, "--format", "junit", "-o", str(out))
    assert junit.returncode == 0 and junit.stdout == "", junit.stderr
    root = ET.parse(out).getroot()
    assert root.tag in ("testsuites", "testsuite") and any(True for _ in root.iter("failure"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["junit.xml"]

    with Client(server.url) as client:  # the library's own
        assert list(client.diagnostics(model_id, page_size=1)) == findings
        assert json.loads(client.diagnostics_report(model_id, "sarif"))["version"] == "2.1.0"
        assert [item["stage"] for item in client.diagnostics(model_id, stage="schema")] == [
            item["stage"] for item in findings if item["stage"] == "schema"
        ]


def test_graph_writes_what_the_service_sends(server: ServiceUnderTest, imported: dict[str, Path], tmp_path: Path) -> None:
    model_id = next(iter(imported))
    out = tmp_path / "graph.json"
    result = run_cli("--url", server.url, "graph", model_id, "-o", str(out))
    assert result.returncode == 0 and result.stdout == "", result.stderr
    sent = httpx.get(f"{server.url}/models/{model_id}/graph", timeout=30)
    assert out.read_bytes() == sent.content and json.loads(out.read_bytes())["graph"]["name"] == "wrong_type"

    missing = tmp_path / "missing.json"
    refused = run_cli("--url", server.url, "graph", "0" * 64, "-o", str(missing))
    assert refused.returncode == 2 and refused.stdout == "" and json.loads(refused.stderr)["status"] == 404
    assert sorted(p.name for p in tmp_path.iterdir()) == ["graph.json"]  # nothing partial

    with Client(server.url) as blocking:
        findings = list(blocking.diagnostics(model_id))

    async def twin() -> None:
        async with AsyncClient(server.url) as client:
            assert b"".join([chunk async for chunk in client.graph_bytes(model_id)]) == sent.content
            assert [item async for item in client.diagnostics(model_id)] == findings
            assert json.loads(await client.diagnostics_report(model_id))["version"] == "2.1.0"

    asyncio.run(twin())


def test_delete_then_list_no_longer_shows_it(server: ServiceUnderTest, tmp_path: Path) -> None:
    model = relu_model(tmp_path / "doomed.onnx", "doomed")
    model_id = json.loads(run_cli("--url", server.url, "import", str(model)).stdout)["id"]
    assert model_id in run_cli("--url", server.url, "list").stdout
    deleted = run_cli("--url", server.url, "delete", model_id)
    assert deleted.returncode == 0 and deleted.stdout == "" and deleted.stderr == ""
    after = run_cli("--url", server.url, "list")
    assert after.returncode == 0 and model_id not in after.stdout
    again = run_cli("--url", server.url, "delete", model_id)
    assert again.returncode == 2 and again.stdout == "" and json.loads(again.stderr)["status"] == 404


# -- retries


def test_a_503_is_retried_after_its_retry_after_until_the_import_goes_through(tmp_path: Path) -> None:
    with saturated(tmp_path) as busy:
        result = run_cli("--url", busy.url, "--retries", "20", "import-path", "if_subgraph.onnx")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["input"] == "if_subgraph.onnx"
    retries = retry_lines(result.stderr)
    assert retries and len(result.stderr.splitlines()) == len(retries)  # nothing else on stderr
    assert [note["retry"] for note in retries] == list(range(1, len(retries) + 1))
    for note in retries:
        assert note["cause"] == "503" and note["of"] == 20 and str(note["request"]).startswith("POST ")
        assert isinstance(note["wait"], float) and note["wait"] >= 1  # the service's Retry-After, not the 1 s backoff doubled


def test_a_refused_connection_is_retried_until_the_server_comes_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    port = free_port()
    backoff, max_delay = 0.1, 0.8
    command = [sys.executable, "-m", "service.client", "--url", f"http://127.0.0.1:{port}", "--retries", "60"]
    command += ["--retry-backoff", str(backoff), "--retry-max-delay", str(max_delay), "list", "--json"]
    started = time.monotonic()
    cli = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.5)  # a few refused attempts first
        assert cli.poll() is None, "the client gave up before the server came up"
        monkeypatch.setattr(service_harness, "free_port", lambda: port)
        server = ServiceProcess(tmp_path / "store", copy_samples(tmp_path / "root")).start()
        ready = time.monotonic()
        try:
            stdout, stderr = cli.communicate(timeout=60)
        finally:
            server.stop()
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait()
    done = time.monotonic()
    assert cli.returncode == 0, stderr
    assert json.loads(stdout) == []
    retries = retry_lines(stderr)
    assert len(retries) >= 3 and len(stderr.splitlines()) == len(retries)
    assert {note["cause"] for note in retries} <= {"ConnectError", "ConnectTimeout", "RemoteProtocolError", "ReadError"}
    assert retries[0]["cause"] == "ConnectError" and all(str(note["request"]).startswith("GET ") for note in retries)
    waits = [note["wait"] for note in retries]
    assert waits == [min(max_delay, backoff * 2**n) for n in range(len(waits))]  # doubling, bounded
    assert sum(waits) <= done - started  # each wait was waited
    assert done - ready < max_delay + 10  # found the server within one bounded backoff (and a slow start's slack)


def test_retries_are_given_up_after_their_number(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    result = run_cli("--url", f"http://127.0.0.1:{port}", "--retries", "2", "--retry-backoff", "0.05", "list")
    assert result.returncode == 1 and result.stdout == ""
    *retries, last = [json.loads(line) for line in result.stderr.splitlines()]
    assert [(note["retry"], note["of"], note["wait"], note["cause"]) for note in retries] == [
        (1, 2, 0.05, "ConnectError"),
        (2, 2, 0.1, "ConnectError"),
    ]
    assert last["error"] == "ConnectError"


class ResettingServer:
    """A socket server on the loopback: the first `resets` connections are
    reset (RST) once the request's first bytes came; later ones get a 200
    with a small JSON body. `connections` counts them."""

    def __init__(self, resets: int) -> None:
        self.resets = resets
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            with connection:
                self.connections += 1
                connection.recv(65536)
                if self.connections <= self.resets:
                    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")  # close with RST
                    continue
                body = b'{"id": "x", "items": [], "next_cursor": null}'
                head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                connection.sendall(head.encode() + body)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture()
def resetting() -> Iterator[Callable[[int], ResettingServer]]:
    servers: list[ResettingServer] = []

    def make(resets: int) -> ResettingServer:
        servers.append(ResettingServer(resets))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_a_reset_get_is_sent_again_and_a_reset_post_is_not(resetting: Callable[[int], ResettingServer], tmp_path: Path) -> None:
    policy = Retry(attempts=3, backoff=0.01)
    server = resetting(2)
    notes: list[RetryNote] = []
    with Client(server.url, retry=policy, on_retry=notes.append) as client:
        assert client.summary("x") == {"id": "x", "items": [], "next_cursor": None}
    assert server.connections == 3
    assert [(note.attempt, note.method, note.wait) for note in notes] == [(1, "GET", 0.01), (2, "GET", 0.02)]
    assert {note.cause for note in notes} <= {"ReadError", "RemoteProtocolError", "WriteError"}

    model = tmp_path / "m.onnx"
    model.write_bytes(b"model bytes" * 1000)
    server = resetting(1)
    notes.clear()
    with Client(server.url, retry=policy, on_retry=notes.append) as client, pytest.raises(httpx.TransportError):
        client.import_file(model)
    assert server.connections == 1 and notes == []  # the import may have been acted on: not sent again

    server = resetting(1)

    async def twin() -> list[RetryNote]:
        seen: list[RetryNote] = []
        async with AsyncClient(server.url, retry=policy, on_retry=seen.append) as client:
            assert [item async for item in client.models()] == []
        return seen

    assert [note.method for note in asyncio.run(twin())] == ["GET"] and server.connections == 2
