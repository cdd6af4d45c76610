"""The whole application in process: `create_app` with a TestClient, the
temporary store (SQLite) and the in-process sandbox (the real import task in a
thread). The routes, the import use case, the problem map and tenancy,
without a process or a port; the process tests cover the same API over
real processes."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from fastapi.testclient import TestClient
from in_process import served_app
from onnx import numpy_helper

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "testdata" / "samples"
PROBLEMS = "https://onnx-import.example/problems/"


def problem(response: Any, status: int, slug: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["type"] == PROBLEMS + slug, body
    return body


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    yield from served_app(tmp_path)


def upload(client: TestClient, path: Path, **headers: str) -> Any:
    return client.post("/models", files={"model": (path.name, path.read_bytes())}, headers=headers)


def test_an_upload_is_imported_listed_served_and_deleted(client: TestClient) -> None:
    created = upload(client, SAMPLES / "add.onnx")
    assert created.status_code == 201, created.text
    summary = created.json()
    model_id = summary["id"]
    assert created.headers["location"] == f"/models/{model_id}"
    assert summary["input"] == "add.onnx"
    assert summary["model_file"]["sha256"] == hashlib.sha256((SAMPLES / "add.onnx").read_bytes()).hexdigest()
    again = upload(client, SAMPLES / "add.onnx")
    assert again.status_code == 200 and again.json()["id"] == model_id
    listed = client.get("/models").json()["items"]
    assert [item["id"] for item in listed] == [model_id]
    assert client.get(f"/models/{model_id}").json() == summary
    graph = client.get(f"/models/{model_id}/graph")
    assert graph.status_code == 200 and json.loads(graph.content)["graph"]
    assert client.delete(f"/models/{model_id}").status_code == 204
    problem(client.get(f"/models/{model_id}"), 404, "not-found")


def test_a_path_import_serves_external_tensor_bytes(client: TestClient) -> None:
    created = client.post("/models", json={"path": "external/model.onnx"})
    assert created.status_code == 201, created.text
    model_id = created.json()["id"]
    tensors = client.get(f"/models/{model_id}/tensors").json()["items"]
    weights = next(t for t in tensors if t["name"] == "W")
    body = client.get(weights["href"])
    assert body.status_code == 200
    reference = onnx.load(str(SAMPLES / "external" / "model.onnx"))  # the reference reader, external data loaded
    expected = next(numpy_helper.to_array(t) for t in reference.graph.initializer if t.name == "W")
    assert np.array_equal(np.frombuffer(body.content, dtype=np.float32).reshape(weights["dims"]), expected)
    partial = client.get(weights["href"], headers={"Range": "bytes=0-7"})
    assert partial.status_code == 206 and partial.content == body.content[:8]


def test_a_converted_tensor_is_served_from_the_store(client: TestClient) -> None:
    model_id = upload(client, SAMPLES / "typed_fields.onnx").json()["id"]
    for tensor in client.get(f"/models/{model_id}/tensors").json()["items"]:
        got = client.get(tensor["href"])
        assert got.status_code == 200, (tensor["name"], got.text)
        assert len(got.content) == int(got.headers["content-length"])


def test_import_errors_are_problems_naming_the_place(client: TestClient) -> None:
    broken = client.post("/models", files={"model": ("bad.onnx", b"\x0a\xff\xff\xff\xff\x0f")})
    body = problem(broken, 422, "malformed")
    assert body["kind"] == "Malformed" and body["input"] == "bad.onnx"
    assert isinstance(body["offset"], int)
    problem(client.post("/models", json={"path": "../etc/passwd"}), 400, "path-refused")
    problem(client.post("/models", json={"path": "missing.onnx"}), 404, "not-found")
    problem(client.post("/models", content=b"x", headers={"content-type": "text/plain"}), 415, "unsupported-media-type")


def test_tenants_see_only_their_own_models(tmp_path: Path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text("".join(
        f'[[key]]\nsha256 = "{hashlib.sha256(secret).hexdigest()}"\ntenant = "{tenant}"\nscopes = ["import", "read", "delete"]\n'
        for tenant, secret in (("alice", b"alice-secret"), ("bob", b"bob-secret"))
    ))  # fmt: skip
    for client in served_app(tmp_path, api_keys=keys):
        alice = {"Authorization": "Bearer alice-secret"}
        bob = {"Authorization": "Bearer bob-secret"}
        problem(client.get("/models"), 401, "unauthorized")
        model_id = upload(client, SAMPLES / "add.onnx", **alice).json()["id"]
        problem(client.get(f"/models/{model_id}", headers=bob), 404, "not-found")
        problem(client.delete(f"/models/{model_id}", headers=bob), 404, "not-found")
        assert client.get("/models", headers=bob).json()["items"] == []
        shared = upload(client, SAMPLES / "add.onnx", **bob)
        assert shared.status_code == 201  # nothing tells bob that alice has it
        assert client.delete(f"/models/{model_id}", headers=alice).status_code == 204
        assert client.get(f"/models/{model_id}", headers=bob).status_code == 200


def test_a_tenant_over_its_quota_gets_507(tmp_path: Path) -> None:
    for client in served_app(tmp_path, tenant_max_models=1):
        assert upload(client, SAMPLES / "add.onnx").status_code == 201
        body = problem(upload(client, SAMPLES / "if_subgraph.onnx"), 507, "tenant-quota-exceeded")
        assert body["limit"] == "tenant_max_models"


def test_an_import_over_its_byte_cap_gets_413(tmp_path: Path) -> None:
    for client in served_app(tmp_path, max_import_bytes=1 << 20, max_upload=4 << 20):
        body = problem(client.post("/models", files={"model": ("big.onnx", b"\0" * ((1 << 20) + 1))}), 413, "payload-too-large")
        assert body["limit"] == "max_import_bytes"


def test_readiness_and_metrics_answer(client: TestClient) -> None:
    ready = client.get("/readyz")
    assert ready.status_code in (200, 503)
    assert "store_writable" in json.dumps(ready.json())
    upload(client, SAMPLES / "add.onnx")
    metrics = client.get("/metrics").text
    assert 'onnx_import_imports_total{result="ok"} 1.0' in metrics


def test_the_graph_document_is_kept_compressed_and_sent_as_each_client_takes_it(client: TestClient) -> None:
    """gzip as stored to a client that takes it (a fraction of the JSON); inflated JSON to one that does not."""
    model_id = upload(client, SAMPLES / "if_subgraph.onnx").json()["id"]
    url = f"/models/{model_id}/graph"
    with client.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as compressed:
        raw = b"".join(compressed.iter_raw())
    assert compressed.headers["content-encoding"] == "gzip" and compressed.headers["vary"] == "Accept-Encoding"
    assert int(compressed.headers["content-length"]) == len(raw)
    plain = client.get(url, headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in plain.headers and plain.headers["vary"] == "Accept-Encoding"
    assert gzip.decompress(raw) == plain.content and len(raw) < len(plain.content) / 2
    assert json.loads(plain.content)["format"] == "onnx-service-graph/4"
    assert client.head(url, headers={"Accept-Encoding": "gzip"}).headers["content-length"] == str(len(raw))


@pytest.mark.parametrize("accept", ["gzip", "identity"])
def test_a_graph_document_kept_by_an_earlier_release_is_sent_as_it_is(tmp_path: Path, accept: str) -> None:
    """Plain JSON (how the store kept graph documents before they were compressed), whatever the client takes."""
    import asyncio

    from starlette.requests import Request

    from service.api.graph_responses import graph_response

    document = tmp_path / "graph.json"
    document.write_bytes(b'{"format":"onnx-service-graph/3","graph":{}}')
    scope = {"type": "http", "method": "GET", "path": "/", "headers": [(b"accept-encoding", accept.encode())], "query_string": b""}
    response = graph_response(Request(scope), os.open(document, os.O_RDONLY))
    assert "content-encoding" not in response.headers and response.headers["content-length"] == str(document.stat().st_size)

    async def body() -> bytes:
        return b"".join([bytes(chunk) async for chunk in response.body_iterator])  # type: ignore[attr-defined]

    assert asyncio.run(body()) == document.read_bytes()
