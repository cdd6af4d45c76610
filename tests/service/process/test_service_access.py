"""API keys and request logs where the process is the point: the start-up
refusal of an anonymous service off the loopback (`python -m service` exits
2), SIGHUP reloading the keys (and a broken file keeping the old ones), JSON
log lines with request ids and audit events in the service's log, and
`keygen`'s table and secret used by a service. Keys, tenants and metrics as
an API: api/test_api_keys.py.

Why a process: a command's exit status and output, a signal sent to the
service, and the log lines it writes with --log-format json (set up by
`python -m service`, read from its log file) belong to a process.
"""

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
from support.api_keys import ACCESS_ROLES, key_file
from support.paths import REPO
from support.service_harness import ServiceProcess, assert_problem, copy_samples, serving

from service.__main__ import anonymous_refusal, is_loopback
from service.access.keys import new_key
from service.settings import Settings

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


@pytest.fixture()
def keys(tmp_path: Path) -> dict[str, str]:
    """Secrets by role; the key file holds only their SHA-256."""
    return key_file(tmp_path / "keys.toml", ACCESS_ROLES)


@pytest.fixture()
def server(tmp_path: Path, keys: dict[str, str]) -> Iterator[ServiceProcess]:
    root = copy_samples(tmp_path / "root")
    args = ("--api-keys", str(tmp_path / "keys.toml"), "--log-format", "json")
    with serving(tmp_path / "store", root, *args) as service:
        yield service


def as_(server: ServiceProcess, secret: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {secret}"} if secret is not None else {}
    return server.client(headers=headers)


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
    secret, table = new_key("team-c", ["read"])
    keys_path = tmp_path / "keys.toml"
    with as_(server, secret) as carol:
        assert_problem(carol.get("/models"), 401)
        keys_path.write_text(keys_path.read_text() + "\n" + table)
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while carol.get("/models").status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert carol.get("/models").status_code == 200
        keys_path.write_text("[[key]]\nsha256 = 'broken")
        server.process.send_signal(signal.SIGHUP)
        server.wait_for_log("not reloaded", timeout=10)
        assert carol.get("/models").status_code == 200
    with as_(server, keys["alice"]) as alice:
        assert alice.get("/models").status_code == 200


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
