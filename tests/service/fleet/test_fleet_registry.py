"""The MLflow gate on a fleet: a delivery is seen once by every replica.

Real processes: three `python -m service` over one bucket (a real SeaweedFS)
and one database (a real PostgreSQL), started by the session's
`fleet_servers` (skipped with the reason where those servers cannot be had),
each with `--mlflow-url` pointing at a small MLflow of this test (its REST
calls the gate makes: a version, its artifact folder and file, the alias,
the tags). Deliveries are signed here with the webhook's secret, as MLflow
signs them. The same delivery sent to the three replicas at once is taken
by one (202) and a duplicate to the others (200); replayed later to each
replica it is a duplicate, and the version is validated once, by one
replica (the markers are rows of the shared index, not files of a replica).

Why a process: the replicas are separate services sharing only the bucket
and the database, as in a fleet; the one validation is counted in their logs
and in the MLflow calls they make.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from support.small_models import weight_model
from test_fleet_replicas import Fleet

from service.registry.signature import signature_of

SECRET = "fleet-webhook-secret"
FOLDER = "0/r1/artifacts/model"


class FakeMlflow:
    """The MLflow REST calls the gate makes, for one registered model whose versions are one model.onnx each."""

    def __init__(self, model: bytes) -> None:
        self.model = model
        self.calls: list[str] = []
        self.tags: dict[tuple[str, str], dict[str, str]] = {}
        self.lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def answer(self, status: int, body: bytes, kind: str = "application/json") -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                url = urlsplit(self.path)
                query = {key: values[0] for key, values in parse_qs(url.query).items()}
                with fake.lock:
                    fake.calls.append(url.path)
                if url.path == "/api/2.0/mlflow/model-versions/get":
                    version = {"name": query["name"], "version": query["version"], "source": f"mlflow-artifacts:/{FOLDER}", "tags": []}
                    self.answer(200, json.dumps({"model_version": version}).encode())
                elif url.path == "/api/2.0/mlflow-artifacts/artifacts":
                    files = [{"path": "model.onnx", "is_dir": False, "file_size": len(fake.model)}]
                    self.answer(200, json.dumps({"files": files}).encode())
                elif url.path == f"/api/2.0/mlflow-artifacts/artifacts/{FOLDER}/model.onnx":
                    self.answer(200, fake.model, "application/octet-stream")
                else:  # the alias: no version holds it
                    self.answer(404, json.dumps({"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "no"}).encode())

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake.lock:
                    fake.calls.append(self.path)
                    if self.path.endswith("/model-versions/set-tag"):
                        fake.tags.setdefault((body["name"], body["version"]), {})[body["key"]] = body["value"]
                self.answer(200, b"{}")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FakeMlflow:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def mlflow() -> Iterator[FakeMlflow]:
    with FakeMlflow(weight_model(91)) as fake:
        yield fake


@pytest.fixture(scope="module")
def fleet(fleet_servers: Any, mlflow: FakeMlflow, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    folder = tmp_path_factory.mktemp("registry-fleet")
    secret = folder / "secret"
    secret.write_text(SECRET + "\n")
    started = Fleet(fleet_servers, folder, 3, "--mlflow-url", mlflow.url, "--mlflow-webhook-secret-file", str(secret))
    yield started
    started.stop()


def delivery(name: str, version: str) -> tuple[bytes, dict[str, str]]:
    """A model_version.created delivery signed as MLflow signs it."""
    body = json.dumps({"entity": "model_version", "action": "created", "data": {"name": name, "version": version}}).encode()
    delivery_id, timestamp = str(uuid.uuid4()), str(int(time.time()))
    headers = {"Content-Type": "application/json", "X-MLflow-Delivery-Id": delivery_id, "X-MLflow-Timestamp": timestamp,
               "X-MLflow-Signature": signature_of(SECRET, delivery_id, timestamp, body)}  # fmt: skip
    return body, headers


def validations(fleet: Fleet, name: str) -> int:
    return sum(Path(replica.log).read_text().count(f"mlflow: validating {name} version") for replica in fleet.replicas)


def verdict_of(mlflow: FakeMlflow, name: str, version: str, timeout: float = 120.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with mlflow.lock:
            tags = dict(mlflow.tags.get((name, version), {}))
        if "onnx_import.verdict" in tags:
            return tags
        time.sleep(0.25)
    raise AssertionError(f"{name} version {version} got no verdict in {timeout} s")


def test_a_delivery_is_taken_by_one_replica_and_a_replay_to_any_other_is_a_duplicate(fleet: Fleet, mlflow: FakeMlflow) -> None:
    body, headers = delivery("fleet-model", "1")

    def send(replica: Any) -> httpx.Response:
        return httpx.post(replica.url + "/hooks/mlflow", content=body, headers=headers, timeout=30)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(send, fleet.replicas))
    assert sorted(answer.status_code for answer in answers) == [200, 200, 202], [answer.text for answer in answers]
    assert [answer.json()["status"] for answer in answers if answer.status_code == 200] == ["duplicate", "duplicate"]
    tags = verdict_of(mlflow, "fleet-model", "1")
    assert tags["onnx_import.verdict"] == "pass", tags
    for replica in fleet.replicas:  # a captured delivery replayed later, to each replica
        replayed = send(replica)
        assert replayed.status_code == 200 and replayed.json()["status"] == "duplicate", replayed.text
    time.sleep(1)
    assert validations(fleet, "fleet-model") == 1
    assert mlflow.calls.count("/api/2.0/mlflow/model-versions/get") == 1  # fetched and validated once, by one replica
