"""The check stages through the real service (in the test process over ASGI,
its workers real; the one without the runtime extra is a process, its
PYTHONPATH its own): `POST /models?checks=...&dim=...`
runs them in the real sandboxed workers, the summary carries each stage's
status and one fail-closed verdict, `/diagnostics` pages every finding by
stage, and `?format=sarif` (validated against the official SARIF 2.1.0
schema) and `?format=junit` give the report for CI. A denial-of-service
model (Range, ConstantOfShape, Expand) is flagged by `security` and never run; a wrong declared type is found
by `shape` at its node; a model with external data loads in onnxruntime
from its path over the files the check worker bound (`weights`: "mapped";
"handed over", from the importer's memory, where the host gives no mount
namespace); a smoke run past the worker's memory is `incomplete`;
and without onnx and onnxruntime the stages that need them are `incomplete`,
saying so, and the verdict is never `pass`. A 3 KB model whose function
calls would inline to 2^40 nodes fails `security` at once, and no other
stage is given it; an initializer of `training_info` at `/etc/passwd` is
refused by the importer (issue 35). A `?dim=` binding the model has no
place for is a 400 on POST /models and POST /models/{id}/checks, and a
dimension without a name is bound by input and axis (`?dim=x%5B0%5D:2`,
issue 36). A model that runs at batch 1 and not at 2 fails with all five
stages, its finding naming the binding (issue 56).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.asgi_service import serving_over_asgi
from support.batch_models import baked_batch
from support.fanout_model import fanout_model
from support.sarif_multitool import multitool_errors
from support.sarif_schema import valid_sarif
from support.service_harness import SAMPLES, assert_problem, serving
from support.small_models import unnamed_reshape
from support.training_info_model import FIELD_PATH as TRAINING_FIELD_PATH
from support.training_info_model import training_info_model

ALL = "schema,security,shape,runtime,smoke"


def _write(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, str(path))
    return path


def range_bomb(path: Path) -> Path:
    """One Range node whose constant inputs ask for 4.3e9 floats (17 GB): the
    checker, shape inference and a session all accept it."""
    start, limit, delta = (numpy_helper.from_array(np.array(value, np.float32), name) for name, value in
                           (("start", 0.0), ("limit", 4.3e9), ("delta", 1.0)))  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="bomb")],
        "range_bomb",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [start, limit, delta],
    )
    return _write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def constant_of_shape_bomb(path: Path) -> Path:
    """ConstantOfShape of a constant shape [65536, 65536] (16 GiB of floats)."""
    shape = numpy_helper.from_array(np.array([65536, 65536], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("ConstantOfShape", ["shape"], ["y"], name="bomb")],
        "constant_of_shape_bomb",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [shape],
    )
    return _write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def expand_bomb(path: Path) -> Path:
    """Expand of one float to a constant shape [1 << 20, 1 << 12] (16 GiB)."""
    one = numpy_helper.from_array(np.ones([1], np.float32), "one")
    shape = numpy_helper.from_array(np.array([1 << 20, 1 << 12], np.int64), "shape")
    graph = helper.make_graph(
        [helper.make_node("Expand", ["one", "shape"], ["y"], name="bomb")],
        "expand_bomb",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [one, shape],
    )
    return _write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


def wrong_type(path: Path) -> Path:
    """Add of two floats, its output declared INT64."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r", "x"], ["y"], name="add")],
        "wrong_type",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, ["N", 3])],
    )
    return _write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def symbolic_relu(path: Path, name: str = "symbolic_relu") -> Path:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    return _write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("check-models")
    return {
        "Range": range_bomb(folder / "range_bomb.onnx"),
        "ConstantOfShape": constant_of_shape_bomb(folder / "constant_of_shape_bomb.onnx"),
        "Expand": expand_bomb(folder / "expand_bomb.onnx"),
        "wrong": wrong_type(folder / "wrong_type.onnx"),
        "relu": symbolic_relu(folder / "symbolic_relu.onnx"),
    }


def post(client: httpx.Client, path: Path, query: str = "", externals: list[tuple[Path, str]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    files = [("model", (path.name, path.read_bytes()))]
    files += [("external_data", (name, file.read_bytes())) for file, name in externals]
    response = client.post(f"/models{query}", files=files)
    assert response.status_code in (200, 201), response.text
    summary: dict[str, Any] = response.json()
    return summary


def diagnostics(client: httpx.Client, model_id: str, stage: str) -> list[dict[str, Any]]:
    response = client.get(f"/models/{model_id}/diagnostics", params={"stage": stage, "limit": 1000})
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    assert all(item["stage"] == stage for item in items)
    return items


def test_the_default_stages_pass_a_sound_model(client: httpx.Client) -> None:
    summary = post(client, SAMPLES / "add.onnx")
    assert {name: entry["status"] for name, entry in summary["checks"].items()} == {"schema": "pass", "security": "pass", "shape": "pass"}
    assert summary["verdict"] == "pass"


def undeclared_middle(path: Path) -> Path:
    """x -> Relu -> h -> Transpose -> y: `h` declared nowhere."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="relu"), helper.make_node("Transpose", ["h"], ["y"], name="swap")],
        "undeclared_middle",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, "batch"])],
    )
    return _write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_the_shapes_inferred_at_import_are_served_for_undeclared_values(client: httpx.Client, tmp_path: Path) -> None:
    model = undeclared_middle(tmp_path / "undeclared_middle.onnx")
    summary = post(client, model)
    assert summary["checks"]["shape"]["status"] == "pass"
    shapes = client.get(summary["links"]["shapes"])
    assert shapes.status_code == 200, shapes.text
    assert shapes.json() == {
        "format": "onnx-service-shapes/1",
        "values": [{"name": "h", "type": {"kind": "tensor", "elem_type": "FLOAT", "shape": ["batch", 4]}}],
    }
    assert "h" not in {v["name"] for v in client.get(summary["links"]["graph"]).json()["graph"]["values"] if v["type"]}
    assert client.get("/models/" + "0" * 64 + "/shapes").status_code == 404


def test_an_import_without_the_shape_stage_keeps_no_shapes(client: httpx.Client, tmp_path: Path) -> None:
    model = undeclared_middle(tmp_path / "undeclared_middle_unchecked.onnx")
    graph = onnx.load(str(model))
    graph.graph.name = "unchecked"  # other bytes: another model than the one above
    onnx.save(graph, str(model))
    summary = post(client, model, "?checks=schema")
    assert client.get(f"/models/{summary['id']}/shapes").json()["values"] == []


def test_every_stage_runs_a_model_with_external_data(client: httpx.Client) -> None:
    external = SAMPLES / "external"
    parts = [(external / "weights.bin", "weights.bin"), (external / "more" / "bias.bin", "more/bias.bin")]
    summary = post(client, external / "model.onnx", f"?checks={ALL}", parts)
    statuses = {name: entry["status"] for name, entry in summary["checks"].items()}
    assert statuses == dict.fromkeys(ALL.split(","), "pass"), summary["checks"]
    assert summary["verdict"] == "pass"
    minimal_root = "minimal-root" in client.get("/readyz").json()["worker_sandbox"]  # a mount namespace: the files bound
    assert summary["checks"]["runtime"]["weights"] == ("mapped" if minimal_root else "handed over"), summary["checks"]["runtime"]


def test_a_model_read_in_place_has_its_external_files_listed_once(client: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    """The listing that sizes the check worker's memory also names the files it binds: one short worker, not two."""
    with caplog.at_level(logging.INFO, logger="service"):
        response = client.post(f"/models?checks={ALL}", json={"path": "external/model.onnx"})
    assert response.status_code in (200, 201), response.text
    assert response.json()["verdict"] == "pass", response.json()["checks"]
    listings = [record.getMessage() for record in caplog.records if record.getMessage().startswith("externals of ")]
    assert len(listings) == 1, listings


def test_a_model_read_in_place_whose_bytes_name_no_location_runs_no_listing(client: httpx.Client, caplog: pytest.LogCaptureFixture) -> None:
    """A model file in which the bytes `location` (every external tensor's key) are nowhere names no external file:
    no listing worker is run to tell (check_worker.names_no_external_file), and its check worker binds it alone."""
    assert b"location" not in (SAMPLES / "add.onnx").read_bytes()
    with caplog.at_level(logging.INFO, logger="service"):
        response = client.post(f"/models?checks={ALL}", json={"path": "add.onnx"})
    assert response.status_code in (200, 201), response.text
    assert response.json()["verdict"] == "pass", response.json()["checks"]
    messages = [record.getMessage() for record in caplog.records]
    assert not [message for message in messages if message.startswith("externals of ")], messages
    assert [message for message in messages if message.startswith("checks of ")], messages


@pytest.mark.parametrize("op_type", ["Range", "ConstantOfShape", "Expand"])
def test_a_denial_of_service_model_is_flagged_and_never_run(client: httpx.Client, models: dict[str, Path], op_type: str) -> None:
    summary = post(client, models[op_type], f"?checks={ALL}")
    checks = summary["checks"]
    assert checks["security"]["status"] == "fail"
    for stage in ("runtime", "smoke"):
        assert checks[stage]["status"] == "skipped"
        assert "--max-static-output" in checks[stage]["reason"]
    assert summary["verdict"] == "fail"
    (finding,) = [item for item in diagnostics(client, summary["id"], "security") if item["code"] == "static-output-too-large"]
    assert (finding["field_path"], finding["node_name"], finding["op_type"]) == ("ModelProto.graph.node[0]", "bomb", op_type)
    raw = models[op_type].read_bytes()
    assert raw[finding["offset"]] == (1 << 3) | 2, "the offset is the key of graph.node[0]"  # GraphProto.node: field 1, LEN


def test_a_wrong_declared_type_is_found_at_its_node(client: httpx.Client, models: dict[str, Path]) -> None:
    summary = post(client, models["wrong"], "?checks=shape")
    assert summary["checks"]["shape"]["status"] == "fail"
    assert summary["verdict"] == "fail"
    found = diagnostics(client, summary["id"], "shape")
    assert found and found[0]["field_path"].startswith("ModelProto.graph.node[1]") and found[0]["node_name"] == "add"


def test_reports_for_ci(client: httpx.Client, models: dict[str, Path]) -> None:
    summary = post(client, models["Range"], f"?checks={ALL}")
    sarif = client.get(f"/models/{summary['id']}/diagnostics", params={"format": "sarif"})
    assert sarif.status_code == 200 and sarif.headers["content-type"].startswith("application/sarif+json")
    log = valid_sarif(sarif.content)
    (run,) = log["runs"]
    assert run["properties"]["verdict"] == "fail"
    assert any(result["ruleId"] == "static-output-too-large" and result["level"] == "error" for result in run["results"])
    assert multitool_errors(log) == []  # GitHub code scanning's rules (Microsoft's SARIF Multitool)
    assert log["runs"][0]["tool"]["driver"]["rules"][0]["fullDescription"]["text"]
    sound = post(client, SAMPLES / "add.onnx")
    passing = valid_sarif(client.get(f"/models/{sound['id']}/diagnostics", params={"format": "sarif"}).content)
    assert passing["runs"][0]["properties"]["verdict"] == "pass" and passing["runs"][0]["results"] == []
    assert multitool_errors(passing) == []
    junit = client.get(f"/models/{summary['id']}/diagnostics", params={"format": "junit"})
    assert junit.status_code == 200
    root = ET.fromstring(junit.content)
    suites = {suite.get("name"): suite for suite in root.iter("testsuite")}
    assert suites["onnx-import.security"].find("testcase/failure") is not None
    assert suites["onnx-import.smoke"].find("testcase/skipped") is not None


def test_the_command_line_and_the_service_make_the_same_sarif(client: httpx.Client, models: dict[str, Path]) -> None:
    """The same model and stages: the same rules, results and fingerprints
    from `onnx-import check` as from ?format=sarif; only the artifact (and the
    base the command line knows, the stage times, the service's model id) differ."""
    checks = "schema,security,shape"
    model = models["wrong"]
    summary = post(client, model, f"?checks={checks}")
    served = valid_sarif(client.get(f"/models/{summary['id']}/diagnostics", params={"format": "sarif"}).content)
    command = Path(sys.executable).with_name("onnx-import")
    done = subprocess.run(
        [str(command), "check", model.name, "--checks", checks, "--format", "sarif"],
        cwd=model.parent,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    local = valid_sarif(done.stdout)
    served_run, local_run = served["runs"][0], local["runs"][0]
    assert served_run["results"] and served_run["results"] == local_run["results"]
    assert served_run["tool"] == local_run["tool"]
    assert served_run["automationDetails"] == local_run["automationDetails"]
    assert served_run["properties"]["checks"] == local_run["properties"]["checks"]
    assert served_run["artifacts"][0]["location"] == local_run["artifacts"][0]["location"] == {"uri": model.name, "uriBaseId": "SRCROOT"}
    assert "originalUriBaseIds" not in served_run and local_run["originalUriBaseIds"]["SRCROOT"]["uri"] == model.parent.as_uri() + "/"
    assert multitool_errors(served) == multitool_errors(local) == []


def test_the_smoke_run_binds_dimensions_and_a_run_past_the_memory_limit_is_incomplete(
    client: httpx.Client, models: dict[str, Path], tmp_path: Path
) -> None:
    bound = post(client, models["relu"], "?checks=smoke&dim=batch:3")
    assert bound["checks"]["smoke"]["status"] == "pass" and bound["verdict"] == "pass"
    huge = post(client, symbolic_relu(tmp_path / "huge.onnx", "huge"), "?checks=smoke&dim=batch:100000000000")  # 1.6 TB of input
    assert huge["checks"]["runtime"]["status"] == "pass"
    assert huge["checks"]["smoke"]["status"] == "incomplete", huge["checks"]
    assert huge["verdict"] == "incomplete"


def test_unknown_checks_are_refused(client: httpx.Client) -> None:
    response = client.post("/models?checks=schema,telepathy", files=[("model", ("add.onnx", (SAMPLES / "add.onnx").read_bytes()))])
    assert response.status_code == 400
    assert "telepathy" in response.json()["detail"]


def test_without_the_runtime_extra_its_stages_are_incomplete(tmp_path: Path, data_root: Path) -> None:
    """A sitecustomize that blocks onnx and onnxruntime in every process of the service."""
    blocker = tmp_path / "no_onnx"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text("import sys\nsys.modules['onnx'] = None\nsys.modules['onnxruntime'] = None\n")
    with serving(tmp_path / "store", data_root, env={"PYTHONPATH": str(blocker)}) as service, service.client() as session:
        summary = post(session, SAMPLES / "add.onnx", f"?checks={ALL}")
    checks = summary["checks"]
    assert (checks["schema"]["status"], checks["security"]["status"]) == ("pass", "pass")
    for stage in ("shape", "runtime", "smoke"):
        assert checks[stage]["status"] == "incomplete", checks[stage]
        assert "runtime" in checks[stage]["reason"] and "extra" in checks[stage]["reason"]
    assert summary["verdict"] == "incomplete"


def test_the_api_document_names_the_checks_parameters(client: httpx.Client) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    posted = {parameter["name"] for parameter in paths["/models"]["post"]["parameters"]}
    assert {"checks", "dim"} <= posted
    diagnostics = {parameter["name"]: parameter for parameter in paths["/models/{model_id}/diagnostics"]["get"]["parameters"]}
    assert {"stage", "severity", "format"} <= set(diagnostics)
    assert set(diagnostics["format"]["schema"]["enum"]) == {"json", "sarif", "junit"}


def endless_loop(path: Path) -> Path:
    """A Loop of 10^12 iterations adding one to a scalar: loads at once, runs for ever."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    body = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "one"], ["acc_out"]), helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
            helper.make_tensor_value_info("acc_in", TensorProto.FLOAT, []),
        ],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("acc_out", TensorProto.FLOAT, [])],
    )
    trips = numpy_helper.from_array(np.array(10**12, np.int64), "trips")
    start = numpy_helper.from_array(np.array(0.0, np.float32), "start")
    graph = helper.make_graph(
        [helper.make_node("Loop", ["trips", "", "start"], ["total"], body=body, name="endless")],
        "endless_loop",
        [],
        [helper.make_tensor_value_info("total", TensorProto.FLOAT, [])],
        [trips, start, one],
    )
    return _write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_a_check_worker_killed_at_its_deadline_leaves_its_stages_incomplete(tmp_path: Path, data_root: Path) -> None:
    model = endless_loop(tmp_path / "endless.onnx")
    unbounded = ("--max-loop-trips", str(10**13), "--smoke-cpu-seconds", "1000")  # neither the security stage nor the smoke budget stops it
    with serving_over_asgi(tmp_path / "store", data_root, "--worker-timeout", "3", *unbounded) as service, service.client() as session:
        summary = post(session, model, f"?checks={ALL}")
        assert session.get("/healthz").status_code == 200
    checks = summary["checks"]
    assert [checks[stage]["status"] for stage in ("schema", "security", "shape", "runtime")] == ["pass"] * 4, checks
    assert checks["smoke"]["status"] == "incomplete" and "deadline" in checks["smoke"]["reason"], checks["smoke"]
    assert summary["verdict"] == "incomplete"


def test_a_declared_input_past_the_bound_loads_but_is_not_run(client: httpx.Client, tmp_path: Path) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "wide_input",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [65536, 65536])],  # 16 GiB to make
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [65536, 65536])],
    )
    summary = post(client, _write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "wide.onnx"),
                   f"?checks={ALL}")  # fmt: skip
    checks = summary["checks"]
    assert (checks["security"]["status"], checks["security"]["warnings"]) == ("pass", 1)
    assert checks["runtime"]["status"] == "pass", "loading makes no input: it runs"
    assert checks["smoke"]["status"] == "skipped" and "an input past --max-static-output" in checks["smoke"]["reason"]
    assert summary["verdict"] == "incomplete"


def test_a_3_kb_model_of_two_to_the_40_inlined_nodes_fails_at_once_with_the_default_checks(client: httpx.Client, tmp_path: Path) -> None:
    """Issue 35: 41 functions each calling the previous twice ran `shape` to the worker's CPU limit; counted, it fails in seconds."""
    model = _write(fanout_model(40), tmp_path / "fanout.onnx")
    assert model.stat().st_size < 4096
    started = time.monotonic()
    summary = post(client, model)  # the default checks: schema, shape, security
    assert time.monotonic() - started < 5
    checks = summary["checks"]
    assert set(checks) == {"schema", "security", "shape"}
    assert checks["security"]["status"] == "fail"
    assert checks["shape"]["status"] == "skipped" and "--max-inlined-nodes" in checks["shape"]["reason"], checks["shape"]
    assert summary["verdict"] == "fail"
    (finding,) = [item for item in diagnostics(client, summary["id"], "security") if item["code"] == "function-expansion-too-large"]
    assert (finding["severity"], finding["field_path"], finding["op_type"]) == ("error", "ModelProto.graph.node[0]", "f40")
    assert model.read_bytes()[finding["offset"]] == (1 << 3) | 2, "the offset is the key of graph.node[0]"


def test_every_stage_past_security_is_skipped_for_it_when_all_are_asked(client: httpx.Client, tmp_path: Path) -> None:
    summary = post(client, _write(fanout_model(40, calls=2), tmp_path / "fanout2.onnx"), f"?checks={ALL}")
    checks = summary["checks"]
    for stage in ("shape", "runtime", "smoke"):
        assert checks[stage]["status"] == "skipped" and "--max-inlined-nodes" in checks[stage]["reason"], checks[stage]
    assert summary["verdict"] == "fail"


def test_a_training_info_initializer_at_etc_passwd_is_refused(client: httpx.Client, tmp_path: Path) -> None:
    model = _write(training_info_model("/etc/passwd"), tmp_path / "training.onnx")
    response = client.post("/models", files=[("model", (model.name, model.read_bytes()))])
    body = assert_problem(response, 422, "external-data")
    assert (body["kind"], body["field_path"]) == ("ExternalData", TRAINING_FIELD_PATH)
    assert model.read_bytes()[body["offset"]] == (5 << 3) | 2, "the offset is the key of the initializer"  # GraphProto.initializer


def test_a_binding_the_model_has_no_place_for_is_a_400_and_an_axis_binding_is_taken(
    client: httpx.Client, models: dict[str, Path], tmp_path: Path
) -> None:
    """A process test: the binding is read against the model in the check worker, and its refusal travels back as a 400."""
    files = [("model", ("symbolic_relu.onnx", models["relu"].read_bytes()))]
    refused = assert_problem(client.post("/models?checks=smoke&dim=nosuch:5", files=files), 400, "bad-request")
    assert refused["detail"].startswith("unknown dimension binding nosuch:5: ") and "'batch'" in refused["detail"]
    held = post(client, symbolic_relu(tmp_path / "held.onnx", "held_relu"), "?checks=schema")  # bytes no other test posts
    recheck = client.post(f"/models/{held['id']}/checks?checks=smoke&dim=nosuch:5")
    assert "unknown dimension binding nosuch:5" in assert_problem(recheck, 400, "bad-request")["detail"]
    assert "smoke" not in client.get(f"/models/{held['id']}").json()["checks"]  # nothing of the refused run is kept
    unnamed = tmp_path / "unnamed.onnx"
    unnamed.write_bytes(unnamed_reshape())
    bound = post(client, unnamed, "?checks=smoke&dim=x%5B0%5D:2&dim=x%5B1%5D:3")
    assert bound["checks"]["smoke"]["status"] == "pass" and bound["checks"]["smoke"]["dims"] == {"x[0]": 2, "x[1]": 3}


def test_a_model_broken_at_batch_2_fails_every_stage_asked_naming_the_binding(client: httpx.Client, tmp_path: Path) -> None:
    model = tmp_path / "baked_batch.onnx"
    model.write_bytes(baked_batch())
    summary = post(client, model, f"?checks={ALL}")
    smoke = summary["checks"]["smoke"]
    assert (summary["verdict"], smoke["status"]) == ("fail", "fail"), summary["checks"]
    assert all(summary["checks"][stage]["status"] == "pass" for stage in ("schema", "security", "shape", "runtime"))
    assert smoke["bindings"] == [{"batch": 1}, {"batch": 2}] and smoke["binding_sources"] == {"batch": "default"}
    [finding] = [item for item in summary["diagnostics"]["items"] if item["stage"] == "smoke"]
    assert finding["node_name"] == "Reshape_3" and "at the second binding (batch=2) failed" in finding["message"]
    sarif = client.get(f"/models/{summary['id']}/diagnostics?format=sarif").json()
    assert sarif["runs"][0]["invocations"][0]["properties"]["smoke_bindings"][0]["text"] == "batch=1,2"
    # The request's binding comes first: bound to 1, nothing is left unbound, and the one run passes.
    bound = client.post(f"/models/{summary['id']}/checks?checks=smoke&dim=batch:1")
    assert bound.status_code == 200, bound.text
    assert bound.json()["checks"]["smoke"]["bindings"] == [{"batch": 1}] and bound.json()["verdict"] == "pass"
