"""The operator-schema check through the service (in the test process, its
workers real): the worker runs it at import, the summary carries the counts and the first
findings, `GET /models/{id}/diagnostics` pages through all of them with their
field paths and byte offsets (which point at the field's key in the file)."""

from __future__ import annotations

from typing import Any

import httpx
import onnx
import pytest
from onnx import TensorProto, helper
from support.service_harness import assert_problem

from service.api.schemas import DiagnosticPage, ModelSummary

BROKEN_NODES = 30


def broken_model() -> bytes:
    """Relu nodes given an unknown attribute each, and one Add with three inputs."""
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"relu{i}", bogus=1) for i in range(BROKEN_NODES)]
    nodes.append(helper.make_node("Add", [f"v{BROKEN_NODES}", "v0", "v0"], ["y"], name="add3"))
    graph = helper.make_graph(
        nodes,
        "broken",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    with pytest.raises(onnx.checker.ValidationError):
        onnx.checker.check_model(model)
    return data


def pages(client: httpx.Client, url: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    next_url: str | None = url
    while next_url is not None:
        response = client.get(next_url)
        DiagnosticPage.model_validate_json(response.content)
        items += response.json()["items"]
        next_url = response.json()["links"]["next"]
    return items


def test_a_valid_model_has_no_error(client: httpx.Client) -> None:
    summary = client.post("/models", json={"path": "if_subgraph.onnx"}).json()
    assert summary["diagnostics"]["errors"] == 0
    assert pages(client, f"/models/{summary['id']}/diagnostics?severity=error") == []


def test_findings_carry_their_places(client: httpx.Client) -> None:
    model = broken_model()
    response = client.post("/models?checks=schema", files={"model": ("broken.onnx", model)})
    assert response.status_code == 201, response.text  # imported: the check reports, it does not refuse
    summary = ModelSummary.model_validate_json(response.content).model_dump()
    assert summary["diagnostics"]["errors"] == BROKEN_NODES + 1
    every = pages(client, f"/models/{summary['id']}/diagnostics?limit=7")
    errors = [d for d in every if d["severity"] == "error"]
    assert len(errors) == BROKEN_NODES + 1 and [d["code"] for d in errors].count("unknown-attribute") == BROKEN_NODES
    assert summary["diagnostics"]["items"][0] == every[0]
    extra = next(d for d in errors if d["op_type"] == "Add")
    assert extra["code"] == "too-many-inputs" and extra["node_name"] == "add3"
    assert extra["field_path"].startswith(f"ModelProto.graph.node[{BROKEN_NODES}]")
    for finding in errors:
        assert 0 <= finding["offset"] < len(model)
        key = model[finding["offset"]]
        if finding["code"] == "unknown-attribute":  # the attribute's own key: NodeProto field 5, length-delimited
            assert finding["field_path"].endswith(".attribute[0]") and key == 0x2A, finding
        else:  # the node's key (GraphProto field 1) or an input's (NodeProto field 1): both 0x0A
            assert key == 0x0A, finding
    only_errors = pages(client, f"/models/{summary['id']}/diagnostics?severity=error&limit=5")
    assert only_errors == errors
    assert_problem(client.get(f"/models/{summary['id']}/diagnostics", params={"cursor": "nope"}), 400)
    assert_problem(client.get(f"/models/{'0' * 64}/diagnostics"), 404)
