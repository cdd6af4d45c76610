"""POST /hooks/mlflow's answers that need no MLflow, in process: off without
--mlflow-url (404), the settings it needs, and what a delivery that starts
no validation gets (401 unsigned, 200 for another event and for a replay, 400 for a signed
payload without a model version, 413 past 64 KiB). The validations
themselves run against a real MLflow server in
tests/service/process/test_registry_mlflow.py."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from in_process import served_app
from support.service_harness import assert_problem

from service.registry.hook import webhook_secret
from service.registry.signature import signature_of
from service.settings import Settings
from service.settings.kinds import SettingsError

SAMPLES = Path(__file__).resolve().parents[3] / "testdata" / "samples"
SECRET = "route-secret"


@pytest.fixture
def hooked(tmp_path: Path) -> Iterator[TestClient]:
    yield from served_app(tmp_path, mlflow_url="http://127.0.0.1:9", mlflow_webhook_secret=SECRET)


def _signed(payload: Any) -> tuple[bytes, dict[str, str]]:
    body = json.dumps(payload).encode()
    delivery_id, timestamp = str(uuid.uuid4()), str(int(time.time()))
    return body, {"X-MLflow-Delivery-Id": delivery_id, "X-MLflow-Timestamp": timestamp,
                  "X-MLflow-Signature": signature_of(SECRET, delivery_id, timestamp, body)}  # fmt: skip


def _problem(response: Any, status: int, slug: str) -> str:
    """The problem's detail, once `assert_problem` has checked the problem."""
    detail: str = assert_problem(response, status, slug)["detail"]
    return detail


def test_the_hook_is_off_without_an_mlflow_url(tmp_path: Path) -> None:
    for client in served_app(tmp_path):
        assert "--mlflow-url" in _problem(client.post("/hooks/mlflow", content=b"{}"), 404, "not-found")


def test_the_hook_needs_its_secret_from_the_variable_or_a_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="ONNX_SERVICE_MLFLOW_WEBHOOK_SECRET or --mlflow-webhook-secret-file"):
        Settings(mlflow_url="http://127.0.0.1:5000")
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-a-file\n")
    assert webhook_secret(Settings(mlflow_url="http://127.0.0.1:5000", mlflow_webhook_secret_file=secret_file)) == "from-a-file"
    with pytest.raises(SettingsError, match="--mlflow-alias must be"):
        Settings(mlflow_alias="not an alias")


def test_deliveries_that_start_no_validation(hooked: TestClient) -> None:
    created = {"entity": "model_version", "action": "created", "data": {"name": "m", "version": "1"}}
    body, headers = _signed(created)
    del headers["X-MLflow-Signature"]
    assert "lacks X-MLflow-Signature" in _problem(hooked.post("/hooks/mlflow", content=body, headers=headers), 401, "unauthorized")
    body, headers = _signed({"entity": "registered_model", "action": "created", "data": {"name": "m"}})
    ignored = hooked.post("/hooks/mlflow", content=body, headers=headers)
    assert ignored.status_code == 200 and ignored.json()["status"] == "ignored"
    replayed = hooked.post("/hooks/mlflow", content=body, headers=headers)  # marked in the index before it is read
    assert replayed.status_code == 200 and replayed.json()["status"] == "duplicate"
    for data in ({"name": "m", "version": "one"}, {"name": "", "version": "1"}, {"version": "1"}, "not an object"):
        body, headers = _signed({**created, "data": data})
        _problem(hooked.post("/hooks/mlflow", content=body, headers=headers), 400, "bad-request")
    body, headers = _signed({**created, "padding": "x" * (64 << 10)})
    _problem(hooked.post("/hooks/mlflow", content=body, headers=headers), 413, "payload-too-large")
