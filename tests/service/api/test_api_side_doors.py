"""Side doors of the API, in the test process over ASGI (support.asgi_service,
its workers real): /metrics needs the `metrics` scope when the service has
API keys (HEAD too; a key made by `python -m service keygen`) and stays open
without them; a forged cursor is a 400, never a 500 (nothing logged as a
traceback); every operation of /openapi.json has its own operationId and
every GET path a HEAD. What needs raw bytes on a socket (made-up methods,
paths that do not decode, heads over 16 KiB) and key files refused at the
start or on SIGHUP: process/test_service_side_doors.py."""

from __future__ import annotations

import base64
import json
import logging
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.asgi_service import AsgiService, serving_over_asgi
from support.paths import REPO
from support.service_harness import assert_problem, copy_samples
from support.tensor_models import import_path, names_model

from service.access.keys import new_key


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """names.onnx beside the samples, for the module's `server` (support/servers.py:
    anonymous, no API keys)."""
    root = copy_samples(tmp_path_factory.mktemp("side-doors") / "root")
    names_model(root / "names.onnx")
    return root


@pytest.fixture(scope="module")
def model_ids(server: AsgiService) -> dict[str, str]:
    with server.client() as client:
        return {path: import_path(client, path) for path in ("add.onnx", "names.onnx")}


# 2. /metrics needs the metrics scope when the service has API keys


@pytest.fixture()
def keyed(tmp_path: Path) -> Iterator[tuple[AsgiService, dict[str, str]]]:
    """A server whose key file holds a tenant key (import, read) and a metrics
    key made by `python -m service keygen --scopes metrics`."""
    tenant_secret, tenant_table = new_key("team-a", ["import", "read"])
    made = subprocess.run(
        [sys.executable, "-m", "service", "keygen", "--tenant", "ops", "--scopes", "metrics"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert 'scopes = ["metrics"]' in made.stdout
    metrics_secret = made.stderr.rsplit(": ", 1)[1].strip()
    (tmp_path / "keys.toml").write_text(tenant_table + "\n" + made.stdout)
    root = copy_samples(tmp_path / "root")
    with serving_over_asgi(tmp_path / "store", root, "--api-keys", str(tmp_path / "keys.toml")) as service:
        yield service, {"tenant": tenant_secret, "metrics": metrics_secret}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def test_metrics_need_the_metrics_scope_with_api_keys(keyed: tuple[AsgiService, dict[str, str]]) -> None:
    server, secrets = keyed
    with server.client() as client:
        assert client.post("/models", json={"path": "add.onnx"}, headers=bearer(secrets["tenant"])).status_code == 201
        for method in ("GET", "HEAD"):
            refused = client.request(method, "/metrics")
            assert refused.status_code == 401 and refused.headers["www-authenticate"].startswith("Bearer"), method
            assert client.request(method, "/metrics", headers=bearer("oik_unknown")).status_code == 401
            assert client.request(method, "/metrics", headers=bearer(secrets["tenant"])).status_code == 403
        assert_problem(client.get("/metrics"), 401, "unauthorized")
        forbidden = assert_problem(client.get("/metrics", headers=bearer(secrets["tenant"])), 403, "forbidden")
        assert "metrics" in forbidden["detail"]
        body = client.get("/metrics", headers=bearer(secrets["tenant"])).text
        assert "onnx_import_store_bytes" not in body
        allowed = client.get("/metrics", headers=bearer(secrets["metrics"]))
        assert allowed.status_code == 200 and allowed.headers["content-type"].startswith("text/plain")
        assert re.search(r"^onnx_import_store_bytes [1-9]", allowed.text, re.M) and "\nonnx_import_store_models 1.0" in allowed.text
        head = client.head("/metrics", headers=bearer(secrets["metrics"]))
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == allowed.headers["content-type"]
        # the metrics key is no tenant key
        assert client.get("/models", headers=bearer(secrets["metrics"])).status_code == 403
        assert client.get("/healthz").status_code == 200 and client.head("/healthz").status_code == 200


def test_metrics_stay_open_without_api_keys(server: AsgiService) -> None:
    with server.client() as client:
        got = client.get("/metrics")
        assert got.status_code == 200 and "onnx_import_store_bytes" in got.text
        head = client.head("/metrics")
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == got.headers["content-type"]


# 3. Forged cursors


def forged(*position: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(list(position)).encode()).decode().rstrip("=")


@pytest.mark.parametrize("listing", ["tensors", "diagnostics"])
def test_a_forged_cursor_is_a_400_never_a_500(
    server: AsgiService, model_ids: dict[str, str], listing: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # everything the service logs, in this process
    url = f"/models/{model_ids['add.onnx']}/{listing}"
    cursors = [
        forged(listing, 2**63),
        forged(listing, 2**64),
        forged(listing, -1),
        forged(listing, -(2**63) - 1),
        forged(listing, 10**400),
        forged(listing, 1.5),
        forged(listing, True),
        forged(listing, "12"),
        forged(listing, 1, 2),
        "garbage!",
        "%%%",
        "\u00e9t\u00e9",
        base64.urlsafe_b64encode(b"\xff\xfe[").decode(),
    ]
    with server.client() as client:
        for cursor in cursors:
            for method in ("GET", "HEAD"):
                response = client.request(method, url, params={"cursor": cursor})
                assert response.status_code == 400, (cursor, method, response.text)
            assert_problem(client.get(url, params={"cursor": cursor}), 400, "bad-request")
        # the largest position SQLite holds is a valid cursor: an empty page
        last = client.get(url, params={"cursor": forged(listing, 2**63 - 1)})
        assert last.status_code == 200 and last.json()["items"] == []
        assert_problem(client.get("/models", params={"cursor": forged("models", 2**63, "x")}), 400, "bad-request")
        assert_problem(client.get("/models", params={"cursor": forged("models", 1, "\ud800")}), 400, "bad-request")
    assert not [record for record in caplog.records if record.exc_info], caplog.text  # no traceback logged


# 5. The OpenAPI document


def test_every_operation_has_its_own_id_and_every_get_a_head(server: AsgiService, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)  # everything the service logs, in this process (and warnings are errors here)
    with server.client() as client:
        document = client.get("/openapi.json").json()
        ids = [operation["operationId"] for item in document["paths"].values() for operation in item.values()]
        assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)
        assert len(ids) >= 20
        gets = [path for path, item in document["paths"].items() if "get" in item]
        assert gets and [path for path in gets if "head" not in document["paths"][path]] == []
        for path in gets:
            if "{" not in path:  # HEAD answers as GET does, without a body
                got, head = client.get(path), client.head(path)
                assert head.status_code == got.status_code and head.content == b"", path
    assert "duplicate operation" not in caplog.text.lower()
