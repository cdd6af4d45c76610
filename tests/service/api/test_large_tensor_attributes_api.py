"""A model whose one node holds a TENSORS attribute of many tensors, against
the real service (in the test process, its workers real).

A user relies on: the summary telling how many tensors the catalogue left
out (`tensors_not_catalogued`) while its `counts.tensors` is what the tensor
list pages through; the graph document listing the attribute's first items
with the count and digest of the rest; a listed tensor served by its href,
one past the catalogue's limit a 404 like an unknown name, and the model's
other tensors found as before; a model diff seeing a change in a tensor
that neither the document nor the catalogue lists.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.asgi_service import AsgiService
from support.service_harness import assert_problem, copy_samples

from service.client import Client
from service.tasks.catalog_builder import MAX_CATALOGUED_PER_ATTRIBUTE
from service.tasks.graph_document import MAX_LISTED_TENSORS

ITEMS = MAX_CATALOGUED_PER_ATTRIBUTE + 200


def packed(path: Path, changed: int | None = None) -> None:
    """Identity, its attribute `pack` holding ITEMS empty tensors (tensor `changed`: one element) and W, then a Constant."""
    items = []
    for index in range(ITEMS):
        tensor = onnx.TensorProto(name=f"p{index}", data_type=TensorProto.FLOAT, dims=[1 if index == changed else 0])
        if index == changed:
            tensor.float_data.append(1.0)
        items.append(tensor)
    node = helper.make_node("Identity", ["x"], ["y"], name="packer")
    node.attribute.append(helper.make_attribute("pack", items, attr_type=onnx.AttributeProto.TENSORS))
    constant = helper.make_node("Constant", [], ["c"], name="c", value=numpy_helper.from_array(np.ones(2, np.float32), "c_value"))
    graph = helper.make_graph(
        [node, constant],
        "packed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]), helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])],
        [numpy_helper.from_array(np.zeros(3, np.float32), "W")],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(path))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_samples(tmp_path_factory.mktemp("root") / "root")
    packed(root / "packed.onnx")
    packed(root / "changed.onnx", changed=ITEMS - 1)  # in neither the document's list nor the catalogue
    return root


@pytest.fixture()
def client(server: AsgiService) -> Iterator[Client]:
    with Client(server.url, transport=server.transport()) as session:
        yield session


def test_the_summary_the_tensor_list_and_the_lookups_agree(client: Client, server: AsgiService) -> None:
    summary = client.import_path("packed.onnx")
    model_id = summary["id"]
    assert summary["tensors_not_catalogued"] == ITEMS - MAX_CATALOGUED_PER_ATTRIBUTE
    assert summary["counts"]["tensors"] == MAX_CATALOGUED_PER_ATTRIBUTE + 2  # W, the first items, c_value
    listed = list(client.tensors(model_id))
    assert len(listed) == summary["counts"]["tensors"] and [t["name"] for t in listed][-2:] == [
        f"p{MAX_CATALOGUED_PER_ATTRIBUTE - 1}",
        "c_value",
    ]
    assert client.summary(model_id)["tensors_not_catalogued"] == ITEMS - MAX_CATALOGUED_PER_ATTRIBUTE
    with server.client(timeout=30) as http:
        assert http.get(f"/models/{model_id}/tensors/c_value").content == np.ones(2, np.float32).tobytes()
        assert http.get(f"/models/{model_id}/tensors/p{MAX_CATALOGUED_PER_ATTRIBUTE - 1}").status_code == 200
        gone = assert_problem(http.get(f"/models/{model_id}/tensors/p{MAX_CATALOGUED_PER_ATTRIBUTE}"), 404, "not-found")
        assert f"has no tensor 'p{MAX_CATALOGUED_PER_ATTRIBUTE}'" in gone["detail"]


def test_the_graph_document_lists_the_first_items_and_digests_the_rest(client: Client) -> None:
    model_id = client.import_path("packed.onnx")["id"]
    graph = client.graph(model_id)
    assert graph["format"] == "onnx-service-graph/4"
    (attribute,) = graph["graph"]["nodes"][0]["attributes"]
    assert attribute["type"] == "TENSORS" and len(attribute["value"]) == MAX_LISTED_TENSORS
    assert attribute["omitted"] == ITEMS - MAX_LISTED_TENSORS and len(attribute["omitted_sha256"]) == 64
    assert [ref["name"] for ref in attribute["value"]] == [f"p{i}" for i in range(MAX_LISTED_TENSORS)]
    assert (
        client.graph(client.import_path("changed.onnx")["id"])["graph"]["nodes"][0]["attributes"][0]["omitted_sha256"]
        != (attribute["omitted_sha256"])
    )


def test_a_diff_sees_a_change_in_a_tensor_listed_nowhere(client: Client) -> None:
    before, after = client.import_path("packed.onnx")["id"], client.import_path("changed.onnx")["id"]
    diff = client.diff(before, after)
    assert not diff["identical"]
    (change,) = diff["changes"]
    assert change["name"] == "packer" and change["fields"] == ["attributes"]
    assert client.diff(before, before)["identical"]
