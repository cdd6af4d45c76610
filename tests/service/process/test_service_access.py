"""API keys, tenants, metrics and request logs, against real server processes:
every refusal (401, 403; /metrics only for a key with the metrics scope), two
tenants with the same bytes (each its own 201, name, listing and delete;
another tenant's model a 404 everywhere), the start-up refusal, SIGHUP
reload (and a broken file keeping the old keys), metrics moving after imports
and refusals with no names in labels, and JSON log lines with request ids and
audit events."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.paths import REPO
from support.service_harness import SAMPLES, ServiceProcess, assert_problem, copy_samples, serving

from service.__main__ import anonymous_refusal, is_loopback
from service.access.keys import new_key
from service.settings import Settings

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


def key(tenant: str, scopes: list[str]) -> tuple[str, str]:
    return new_key(tenant, scopes)


@pytest.fixture()
def keys(tmp_path: Path) -> dict[str, str]:
    """Secrets by role; the key file holds only their SHA-256."""
    made = {
        "alice": key("team-a", ["import", "read", "delete"]),
        "alice-reader": key("team-a", ["read"]),
        "bob": key("team-b", ["import", "read", "delete"]),
        "ops": key("ops", ["metrics"]),  # reads /metrics, nothing else
    }
    (tmp_path / "keys.toml").write_text("\n".join(table for _, table in made.values()))
    return {role: secret for role, (secret, _) in made.items()}


@pytest.fixture()
def server(tmp_path: Path, keys: dict[str, str]) -> Iterator[ServiceProcess]:
    root = copy_samples(tmp_path / "root")
    args = ("--api-keys", str(tmp_path / "keys.toml"), "--log-format", "json")
    with serving(tmp_path / "store", root, *args) as service:
        yield service


def as_(server: ServiceProcess, secret: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {secret}"} if secret is not None else {}
    return server.client(headers=headers)


def test_refusals_without_credentials_or_scope(server: ServiceProcess, keys: dict[str, str]) -> None:
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
    log = server.log.read_text()
    for secret in keys.values():
        assert secret not in log


def test_two_tenants_with_the_same_bytes(server: ServiceProcess, keys: dict[str, str]) -> None:
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


def test_anonymous_service_refuses_to_start_off_the_loopback(tmp_path: Path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost") and not is_loopback("0.0.0.0")
    root = copy_samples(tmp_path / "root")
    assert anonymous_refusal(Settings(host="0.0.0.0", data_root=str(root))) is not None
    assert anonymous_refusal(Settings(host="0.0.0.0", data_root=str(root), allow_anonymous=True)) is None
    assert anonymous_refusal(Settings(host="127.0.0.1", data_root=str(root))) is None
    command = [sys.executable, "-m", "service", "--host", "0.0.0.0", "--data-root", str(root), "--store", str(tmp_path / "s")]
    started = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert started.returncode == 2
    assert "--api-keys" in started.stderr and "--allow-anonymous" in started.stderr
    assert not (tmp_path / "s").exists()


def test_sighup_reloads_the_keys_and_a_broken_file_keeps_them(server: ServiceProcess, tmp_path: Path, keys: dict[str, str]) -> None:
    assert server.process is not None
    secret, table = key("team-c", ["read"])
    key_file = tmp_path / "keys.toml"
    with as_(server, secret) as carol:
        assert_problem(carol.get("/models"), 401)
        key_file.write_text(key_file.read_text() + "\n" + table)
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while carol.get("/models").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert carol.get("/models").status_code == 200
        key_file.write_text("[[key]]\nsha256 = 'broken")
        server.process.send_signal(signal.SIGHUP)
        server.wait_for_log("not reloaded", timeout=10)
        assert carol.get("/models").status_code == 200
    with as_(server, keys["alice"]) as alice:
        assert alice.get("/models").status_code == 200


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


def test_metrics_move_and_name_nothing_private(server: ServiceProcess, keys: dict[str, str]) -> None:
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


def test_json_request_logs_request_ids_and_audit_lines(server: ServiceProcess, keys: dict[str, str]) -> None:
    with as_(server, keys["alice"]) as alice:
        posted = alice.post("/models", json={"path": "add.onnx"}, headers={"X-Request-ID": "trace-42"})
        assert posted.headers["x-request-id"] == "trace-42"
        model_id = posted.json()["id"]
        problem = alice.get("/models/" + "1" * 64, headers={"X-Request-ID": "x" * 500})
        generated = problem.headers["x-request-id"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated) and problem.json()["request_id"] == generated
        assert alice.delete(f"/models/{model_id}").status_code == 204
    with server.client() as anyone:
        anyone.get("/models", headers={"X-Request-ID": "refused-1"})
    time.sleep(0.3)
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if line.startswith("{")]
    assert lines and all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    requests = {line["request_id"]: line for line in lines if line.get("event") == "request"}
    traced = requests["trace-42"]
    assert traced["route"] == "/models" and traced["method"] == "POST" and traced["status"] == 201
    assert traced["tenant"] == "team-a" and traced["model_id"] == model_id and traced["duration_ms"] > 0
    assert requests["refused-1"]["status"] == 401 and requests["refused-1"]["tenant"] is None
    events = [(line["event"], line.get("tenant"), line.get("outcome")) for line in lines if line.get("logger") == "service.audit"]
    assert ("import", "team-a", "ok") in events and ("delete", "team-a", "ok") in events
    assert any(event == "auth-refused" for event, _, _ in events)


def test_keygen_prints_the_table_on_stdout_and_the_secret_on_stderr(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "service", "keygen", "--tenant", "team-z", "--scopes", "read"], cwd=REPO, capture_output=True, text=True
    )
    assert made.returncode == 0
    secret = made.stderr.rsplit(": ", 1)[1].strip()
    assert secret and secret not in made.stdout
    (tmp_path / "keys.toml").write_text(made.stdout)
    root = copy_samples(tmp_path / "root")
    with serving(tmp_path / "store", root, "--api-keys", str(tmp_path / "keys.toml")) as server, as_(server, secret) as client:
        assert client.get("/models").status_code == 200
        assert_problem(client.post("/models", json={"path": "add.onnx"}), 403, "forbidden")
