"""A client that leaves takes its import with it: a queued import is dropped
before it starts, a running one has its workers ended, and neither holds a
place afterwards (`service.api.client_presence`, `service.imports.workers`).

The service runs in the test process with its real sandbox; the clients
speak raw TCP on loopback, because closing a connection mid-request is what
is tested (httpx's ASGI transport cannot leave).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support.faults import FAULTS
from support.in_process_service import InProcessService, serving_in_process
from support.service_harness import copy_samples

HOOKS = FAULTS  # the X-Test-* headers (support/faults.py)


@pytest.fixture
def service(tmp_path: Path) -> Iterator[InProcessService]:
    data_root = copy_samples(tmp_path / "root")
    with serving_in_process(tmp_path / "store", data_root, "--workers", "1", "--queue", "8", "--tenant-share", "1", env=HOOKS) as server:
        yield server


def _posted_and_kept_open(port: int, path: str, sleep: float = 0.0) -> socket.socket:
    """A POST /models of a data-root path whose client then only waits (its connection open)."""
    body = json.dumps({"path": path}).encode()
    head = (
        f"POST /models HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        f"X-Test-Worker-Sleep: {sleep}\r\n\r\n"
    )
    connection = socket.create_connection(("127.0.0.1", port), timeout=10)
    connection.sendall(head.encode() + body)
    return connection


def _ready(service: InProcessService) -> dict[str, int]:
    answer = httpx.get(service.url + "/readyz", timeout=10).json()
    return {key: answer[key] for key in ("imports_running", "imports_waiting")}


def _until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_queued_imports_whose_clients_left_are_dropped_before_they_start(service: InProcessService) -> None:
    answers: list[int] = []
    holder = threading.Thread(
        target=lambda: answers.append(
            httpx.post(service.url + "/models", json={"path": "add.onnx"}, headers={"X-Test-Worker-Sleep": "4"}, timeout=60).status_code
        )
    )
    holder.start()
    try:
        assert _until(lambda: _ready(service)["imports_running"] == 1, 20)
        leaving = [_posted_and_kept_open(service.port, name) for name in ("if_subgraph.onnx", "typed_fields.onnx", "external/model.onnx")]
        assert _until(lambda: _ready(service)["imports_waiting"] == 3, 10), _ready(service)
        for connection in leaving:
            connection.close()
        assert _until(lambda: _ready(service)["imports_waiting"] == 0, 3), _ready(service)
        assert _ready(service)["imports_running"] == 1  # the holder's client still waits: its import goes on
    finally:
        holder.join()
    assert answers == [201]
    with service.client() as client:  # none of the three was imported
        assert [item["input"] for item in client.get("/models").json()["items"]] == ["add.onnx"]


def test_a_running_import_whose_client_left_has_its_worker_ended(service: InProcessService) -> None:
    leaving = _posted_and_kept_open(service.port, "add.onnx", sleep=60)
    assert _until(lambda: _ready(service)["imports_running"] == 1, 20)
    began = time.monotonic()
    leaving.close()
    assert _until(lambda: _ready(service) == {"imports_running": 0, "imports_waiting": 0}, 5), _ready(service)
    assert time.monotonic() - began < 5  # ended, not waited out (the worker would sleep 60 s)
    with service.client() as client:
        assert client.post("/models", json={"path": "if_subgraph.onnx"}).status_code == 201  # the place is free
        assert [item["input"] for item in client.get("/models").json()["items"]] == ["if_subgraph.onnx"]
