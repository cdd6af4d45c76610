"""Each tenant's check runs are its own, in process (`create_app`, the
temporary store, the real worker tasks in a thread): two tenants importing
the same bytes with other stages see only their own; a re-POST asking for
stages the tenant has not run runs them; `POST /models/{id}/checks` runs
what it is asked and answers the new checks and verdict. The jobs the
in-process sandbox was given say what ran."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import onnx
import pytest
from fastapi.testclient import TestClient
from in_process import InProcessSandbox
from test_app_in_process import SAMPLES, problem

from service.app import create_app
from service.settings import Settings

ALICE = {"Authorization": "Bearer alice-secret"}
BOB = {"Authorization": "Bearer bob-secret"}


@pytest.fixture
def tenants(tmp_path: Path) -> Iterator[tuple[TestClient, InProcessSandbox]]:
    keys = tmp_path / "keys.toml"
    keys.write_text("".join(
        f'[[key]]\nsha256 = "{hashlib.sha256(secret).hexdigest()}"\ntenant = "{tenant}"\nscopes = ["import", "read", "delete"]\n'
        for tenant, secret in (("alice", b"alice-secret"), ("bob", b"bob-secret"))
    ))  # fmt: skip
    settings = Settings(
        data_root=str(SAMPLES), store=str(tmp_path / "store"), store_backend="memory", workers=1, store_min_free=0, api_keys=keys
    )
    sandbox = InProcessSandbox(settings)
    with TestClient(create_app(settings, sandbox)) as client:
        yield client, sandbox


def stages_run(sandbox: InProcessSandbox, since: int) -> list[tuple[str, ...]]:
    """The stages of each import job given to the sandbox after the first `since` jobs."""
    return [tuple(job.checks) for job in sandbox.jobs[since:] if job.task == "import"]


def post(client: TestClient, headers: dict[str, str], checks: str, path: Path = SAMPLES / "add.onnx") -> Any:
    return client.post(f"/models?checks={checks}", files={"model": (path.name, path.read_bytes())}, headers=headers)


def test_a_tenant_sees_only_the_stages_it_ran(tenants: tuple[TestClient, InProcessSandbox]) -> None:
    client, _ = tenants
    first = post(client, ALICE, "schema,security,shape")
    assert first.status_code == 201, first.text
    model_id = first.json()["id"]
    second = post(client, BOB, "schema")
    assert second.status_code == 201 and second.json()["id"] == model_id
    assert set(second.json()["checks"]) == {"schema"}
    bob_view = client.get(f"/models/{model_id}", headers=BOB).json()
    alice_view = client.get(f"/models/{model_id}", headers=ALICE).json()
    assert set(bob_view["checks"]) == {"schema"}
    assert set(alice_view["checks"]) == {"schema", "security", "shape"}
    assert bob_view["checks"]["schema"]["ran_at"] != alice_view["checks"]["schema"]["ran_at"]  # bob's own run, not alice's
    bob_findings = client.get(f"/models/{model_id}/diagnostics", headers=BOB).json()["items"]
    assert {item["stage"] for item in bob_findings} <= {"schema"}


def test_each_stage_says_when_and_with_what_it_ran(tenants: tuple[TestClient, InProcessSandbox]) -> None:
    client, _ = tenants
    checks = post(client, ALICE, "schema,security,shape").json()["checks"]
    for stage, entry in checks.items():
        assert datetime.fromisoformat(entry["ran_at"].replace("Z", "+00:00")).tzinfo is not None, stage
    assert checks["shape"]["versions"] == {"onnx": onnx.__version__}
    assert set(checks["schema"]["versions"]) == {"onnx-import-service"}


def test_a_repost_runs_the_stages_this_tenant_has_not_run(tenants: tuple[TestClient, InProcessSandbox]) -> None:
    client, sandbox = tenants
    model_id = post(client, ALICE, "schema,security,shape").json()["id"]
    assert post(client, BOB, "schema").status_code == 201
    before = len(sandbox.jobs)
    again = post(client, BOB, "schema")
    assert again.status_code == 200 and stages_run(sandbox, before) == []  # nothing new asked: nothing ran
    before = len(sandbox.jobs)
    more = post(client, BOB, "security,shape")
    assert more.status_code == 200, more.text
    assert stages_run(sandbox, before) == [("security", "shape")]
    assert set(more.json()["checks"]) == {"schema", "security", "shape"}
    assert set(client.get(f"/models/{model_id}", headers=BOB).json()["checks"]) == {"schema", "security", "shape"}


def test_the_checks_route_runs_what_it_is_asked(tenants: tuple[TestClient, InProcessSandbox]) -> None:
    client, sandbox = tenants
    imported = post(client, BOB, "schema").json()
    model_id = imported["id"]
    before = len(sandbox.jobs)
    answer = client.post(f"/models/{model_id}/checks?checks=schema,shape", headers=BOB)
    assert answer.status_code == 200, answer.text
    assert stages_run(sandbox, before) == [("schema", "shape")]
    body = answer.json()
    assert set(body["checks"]) == {"schema", "shape"} and body["verdict"] == "pass"
    assert body["checks"]["schema"]["ran_at"] >= imported["checks"]["schema"]["ran_at"]
    assert body["input"] == "add.onnx"
    assert client.get(f"/models/{model_id}", headers=BOB).json()["checks"] == body["checks"]
    problem(client.post(f"/models/{model_id}/checks?checks=shape", headers=ALICE), 404, "not-found")  # bob's, not alice's
    problem(client.post(f"/models/{model_id}/checks?checks=nosuch", headers=BOB), 400, "bad-request")


def test_findings_of_a_recheck_are_the_tenants_own(tenants: tuple[TestClient, InProcessSandbox]) -> None:
    """A model whose shape stage finds an error: alice runs it, bob does not see it."""
    client, _ = tenants
    broken = _shape_error_model()
    alice = client.post("/models?checks=schema,shape", files={"model": ("broken.onnx", broken)}, headers=ALICE).json()
    assert alice["checks"]["shape"]["errors"] >= 1 and alice["verdict"] == "fail"
    bob = client.post("/models?checks=schema", files={"model": ("broken.onnx", broken)}, headers=BOB).json()
    model_id = bob["id"]
    assert "shape" not in bob["checks"]
    assert all(item["stage"] != "shape" for item in client.get(f"/models/{model_id}/diagnostics", headers=BOB).json()["items"])
    rechecked = client.post(f"/models/{model_id}/checks?checks=shape", headers=BOB).json()
    assert rechecked["checks"]["shape"]["errors"] == alice["checks"]["shape"]["errors"] and rechecked["verdict"] == "fail"
    shape_items = client.get(f"/models/{model_id}/diagnostics?stage=shape", headers=BOB).json()["items"]
    assert len(shape_items) == rechecked["checks"]["shape"]["errors"] + rechecked["checks"]["shape"]["warnings"]
    sarif = client.get(f"/models/{model_id}/diagnostics?format=sarif", headers=BOB).json()
    assert {result["properties"]["stage"] for result in sarif["runs"][0]["results"]} == {"shape"}


def test_a_deleted_holding_takes_its_runs_with_it(tenants: tuple[TestClient, InProcessSandbox]) -> None:
    client, _ = tenants
    model_id = post(client, BOB, "schema,shape").json()["id"]
    assert client.delete(f"/models/{model_id}", headers=BOB).status_code == 204
    again = post(client, BOB, "schema")
    assert again.status_code == 201 and set(again.json()["checks"]) == {"schema"}


def _shape_error_model() -> bytes:
    """An Add of a [2] and a [3] float: the operator check passes, strict shape inference fails."""
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        "broken",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2]), helper.make_tensor_value_info("b", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data
