"""API keys, tenants and metrics as an API, in the test process over ASGI
(support.asgi_service, its workers real): every refusal (401, 403; /metrics
only for a key with the metrics scope), no secret in what the service logs,
two tenants with the same bytes (each its own 201, name, listing and delete;
another tenant's model a 404 everywhere), and metrics moving after imports
and refusals with no names in labels. The start-up refusal, SIGHUP, the JSON
request log and keygen: process/test_service_access.py."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.api_keys import ACCESS_ROLES, key_file
from support.asgi_service import AsgiService, serving_over_asgi
from support.service_harness import SAMPLES, assert_problem, copy_samples

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


@pytest.fixture()
def keys(tmp_path: Path) -> dict[str, str]:
    """Secrets by role; the key file holds only their SHA-256."""
    return key_file(tmp_path / "keys.toml", ACCESS_ROLES)


@pytest.fixture()
def server(tmp_path: Path, keys: dict[str, str]) -> Iterator[AsgiService]:
    root = copy_samples(tmp_path / "root")
    with serving_over_asgi(tmp_path / "store", root, "--api-keys", str(tmp_path / "keys.toml")) as service:
        yield service


def as_(server: AsgiService, secret: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {secret}"} if secret is not None else {}
    return server.client(headers=headers)


def test_refusals_without_credentials_or_scope(server: AsgiService, keys: dict[str, str], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # everything the service logs, in this process
    with as_(server, None) as anonymous:
        for method, url in (("GET", "/models"), ("POST", "/models"), ("GET", f"/models/{'0' * 64}"), ("DELETE", f"/models/{'0' * 64}")):
            response = anonymous.request(method, url)
            assert_problem(response, 401, "unauthorized")
            assert response.headers["www-authenticate"].startswith("Bearer")
        for open_route in ("/healthz", "/readyz"):
            assert anonymous.get(open_route).status_code == 200
        assert_problem(anonymous.get("/metrics"), 401, "unauthorized")  # store totals span every tenant
    with as_(server, "oik_not-a-key") as stranger:
        assert_problem(stranger.get("/models"), 401, "unauthorized")
    with server.client(headers={"Authorization": f"Basic {keys['alice']}"}) as wrong_scheme:
        assert_problem(wrong_scheme.get("/models"), 401)
    with as_(server, keys["alice"]) as alice:
        model_id = alice.post("/models", json={"path": "add.onnx"}).json()["id"]
    with as_(server, keys["alice-reader"]) as reader:
        assert reader.get(f"/models/{model_id}").status_code == 200  # the same tenant, read scope
        assert_problem(reader.post("/models", json={"path": "add.onnx"}), 403, "forbidden")
        assert_problem(reader.delete(f"/models/{model_id}"), 403, "forbidden")
        assert_problem(reader.get("/metrics"), 403, "forbidden")
    with as_(server, keys["ops"]) as ops:
        assert ops.get("/metrics").status_code == 200
        assert_problem(ops.get("/models"), 403, "forbidden")
    log = "\n".join(f"{record.getMessage()} {record.__dict__}" for record in caplog.records)
    assert log  # the requests above were logged
    for secret in keys.values():
        assert secret not in log


def test_two_tenants_with_the_same_bytes(server: AsgiService, keys: dict[str, str]) -> None:
    model = (SAMPLES / "add.onnx").read_bytes()
    with as_(server, keys["alice"]) as alice, as_(server, keys["bob"]) as bob:
        mine = alice.post("/models", files={"model": ("alice-secret-project.onnx", model)})
        assert mine.status_code == 201
        theirs = bob.post("/models", files={"model": ("bob.onnx", model)})
        assert theirs.status_code == 201  # not 200: nothing tells bob alice had it
        model_id = mine.json()["id"]
        assert theirs.json()["id"] == model_id and theirs.json()["input"] == "bob.onnx" and "alice" not in theirs.text
        assert bob.get(f"/models/{model_id}").json()["input"] == "bob.onnx"
        assert alice.post("/models", files={"model": ("again.onnx", model)}).status_code == 200
        # alice's other model is invisible to bob everywhere
        other = alice.post("/models", json={"path": "typed_fields.onnx"}).json()["id"]
        for url in (f"/models/{other}", f"/models/{other}/graph", f"/models/{other}/tensors", f"/models/{other}/tensors/i32"):
            assert_problem(bob.get(url), 404, "not-found")
        assert_problem(bob.delete(f"/models/{other}"), 404, "not-found")
        assert {item["id"] for item in bob.get("/models").json()["items"]} == {model_id}
        assert {item["id"] for item in alice.get("/models").json()["items"]} == {model_id, other}
        # alice deletes: bob keeps reading; bob deletes: the bytes go
        assert alice.delete(f"/models/{model_id}").status_code == 204
        assert_problem(alice.get(f"/models/{model_id}"), 404)
        assert bob.get(f"/models/{model_id}/tensors/W").status_code == 200
        assert server.content_stored(model_id)
        assert bob.delete(f"/models/{model_id}").status_code == 204
        assert not server.content_stored(model_id)
        assert server.content_stored(other)


def metric(text: str, name: str, **labels: str) -> float:
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = re.fullmatch(r"([a-zA-Z_:][\w:]*)(\{(.*)\})? (\S+)", line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(3) or ""))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(match.group(4))
    return 0.0


def test_metrics_move_and_name_nothing_private(server: AsgiService, keys: dict[str, str]) -> None:
    with server.client() as anyone, as_(server, keys["alice"]) as alice, as_(server, keys["ops"]) as ops:
        before = ops.get("/metrics")
        assert before.headers["content-type"].startswith("text/plain")
        ok_before = metric(before.text, "onnx_import_imports_total", result="ok")
        bad_before = metric(before.text, "onnx_import_imports_total", result="Malformed")
        model_id = alice.post("/models", files={"model": ("private-name.onnx", (SAMPLES / "add.onnx").read_bytes())}).json()["id"]
        alice.get(f"/models/{model_id}/tensors/W")
        assert alice.post("/models", files={"model": ("broken.onnx", b"\x0a\xff\xff")}).status_code == 422
        assert alice.post("/models", json={"pat": "typo"}).status_code == 422  # a body that does not validate: not an ok
        anyone.get("/models")  # a 401
        after = ops.get("/metrics").text
        assert metric(after, "onnx_import_imports_total", result="ok") == ok_before + 1
        assert metric(after, "onnx_import_imports_total", result="Malformed") == bad_before + 1
        assert metric(after, "onnx_import_imports_total", result="validation-error") == 1
        assert metric(after, "onnx_import_import_duration_seconds_count") >= 2
        tensor_route = "/models/{model_id}/tensors/{name:path}"
        assert metric(after, "onnx_import_http_requests_total", route=tensor_route, method="GET", status="200") >= 1
        assert metric(after, "onnx_import_http_requests_total", route="/models", method="GET", status="401") >= 1
        assert metric(after, "onnx_import_store_models") >= 1 and metric(after, "onnx_import_store_bytes") > 0
        for gauge in ("onnx_import_imports_running", "onnx_import_imports_waiting", "onnx_import_uploads_receiving"):
            assert f"\n{gauge} " in after
        assert model_id not in after and "private-name" not in after and "team-a" not in after
