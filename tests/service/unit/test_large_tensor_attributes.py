"""A TENSORS or SPARSE_TENSORS attribute of many items, in the graph document
and the tensor catalogue (service/tasks/graph_document.py, catalog.py).

An empty tensor in such an attribute costs 6 bytes of protobuf, its
reference in the graph document some 350 bytes of JSON and its catalogue row
some 200: so the document lists an attribute's first MAX_LISTED_TENSORS
items and gives the count and digest of the rest, and the catalogue gives
rows to its first MAX_CATALOGUED_PER_ATTRIBUTE. A user relies on: every
other document and catalogue exactly as before; the count and digest telling
exactly which tensors were left out, so a model diff still sees a change in
any of them (and reads a document of the earlier format, which listed every
item, alike); the summary saying how many tensors are not catalogued, its
counts and the catalogue's pages agreeing, and the catalogued tensors keeping
the positions, aliases and hrefs they had; an external file that only a
tensor left out reads still recorded (the import's id and checks cover it).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from importer import load_model, load_model_bytes
from service.store.catalog import Catalog
from service.tasks import catalog_builder as catalog_module
from service.tasks import graph_document as graph_module
from service.tasks.bounded_summary import bounded_summary
from service.tasks.catalog_builder import MAX_CATALOGUED_PER_ATTRIBUTE, build_catalog
from service.tasks.graph_document import MAX_LISTED_TENSORS, fold_listed, identity, omitted_digest, render_graph
from service.tasks.model_diff import ModelSide, compare_models

Json = Any
OPSETS = [helper.make_opsetid("", 21)]


def tensors(count: int, changed: int | None = None) -> list[onnx.TensorProto]:
    """`count` small float tensors of other names, dims and values, in raw_data and float_data by turns
    (some unnamed); tensor `changed` holds another value."""
    made = []
    for i in range(count):
        values = np.full((1 + i % 3,), 7.0 if i == changed else float(i), np.float32)
        name = f"t{i}" if i % 5 else ""
        made.append(numpy_helper.from_array(values, name) if i % 2 else helper.make_tensor(name, TensorProto.FLOAT, values.shape, values))
    return made


def packing_model(items: list[onnx.TensorProto], *, after: bool = True) -> bytes:
    """An initializer W, an Identity whose attribute `pack` holds `items`, then (`after`) a Constant named c."""
    node = helper.make_node("Identity", ["x"], ["y"], name="packer")
    node.attribute.append(helper.make_attribute("pack", items, attr_type=onnx.AttributeProto.TENSORS))
    nodes = [node]
    if after:
        nodes.append(helper.make_node("Constant", [], ["c"], name="c", value=numpy_helper.from_array(np.ones(2, np.float32), "")))
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        [numpy_helper.from_array(np.zeros(3, np.float32), "W")],
    )
    data: bytes = helper.make_model(graph, opset_imports=OPSETS).SerializeToString()
    return data


def sparse_model(count: int) -> bytes:
    sparse = [
        helper.make_sparse_tensor(
            numpy_helper.from_array(np.array([float(i)], np.float32), f"v{i}"),
            numpy_helper.from_array(np.array([i % 4], np.int64), f"i{i}"),
            [4],
        )
        for i in range(count)
    ]
    node = helper.make_node("Identity", ["x"], ["y"], name="sparse")
    node.attribute.append(helper.make_attribute("pack", sparse, attr_type=onnx.AttributeProto.SPARSE_TENSORS))
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    data: bytes = helper.make_model(graph, opset_imports=OPSETS).SerializeToString()
    return data


def rendered(data: bytes, model_id: str = "M") -> Json:
    """The graph document as the worker writes it, read back."""
    with load_model_bytes(data) as model:
        return json.loads(json.dumps(render_graph(model, model_id), allow_nan=False, separators=(",", ":"), ensure_ascii=False))


def pack(document: Json) -> Json:
    attribute: Json = document["graph"]["nodes"][0]["attributes"][0]
    return attribute


def full(data: bytes, model_id: str = "M") -> Json:
    """The document of an earlier format: every item listed (the cut lifted for one rendering)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(graph_module, "MAX_LISTED_TENSORS", 1 << 30)
        document = rendered(data, model_id)
    document["format"] = "onnx-service-graph/3"
    return document


# --- the graph document


def test_up_to_the_limit_a_document_is_as_before() -> None:
    for data, count in (
        (packing_model(tensors(MAX_LISTED_TENSORS)), MAX_LISTED_TENSORS),
        (packing_model(tensors(3)), 3),
        (sparse_model(MAX_LISTED_TENSORS), MAX_LISTED_TENSORS),
    ):
        document = rendered(data)
        assert document["format"] == "onnx-service-graph/4"
        assert {**document, "format": "onnx-service-graph/3"} == full(data)  # but for its format, what every item listed gives
        assert "omitted" not in pack(document) and len(pack(document)["value"]) == count


def test_the_items_past_the_limit_are_counted_and_digested() -> None:
    items = tensors(MAX_LISTED_TENSORS + 136)
    attribute = pack(rendered(packing_model(items)))
    assert list(attribute) == ["name", "type", "value", "omitted", "omitted_sha256"]
    assert attribute["omitted"] == 136
    assert [ref["field_path"] for ref in attribute["value"]] == [
        f"ModelProto.graph.node[0].attribute[0].tensors[{i}]" for i in range(MAX_LISTED_TENSORS)
    ]
    # the digest, from the model as onnx reads it: one line of compact JSON per tensor left out
    lines = b"".join(
        json.dumps(
            [t.name, "FLOAT", list(t.dims), hashlib.sha256(numpy_helper.to_array(t).astype("<f4").tobytes()).hexdigest()],
            separators=(",", ":"),
        ).encode()
        + b"\n"
        for t in items[MAX_LISTED_TENSORS:]
    )
    assert attribute["omitted_sha256"] == hashlib.sha256(lines).hexdigest()
    # the same as an earlier document's whole list folds to: from the references themselves
    assert fold_listed(pack(full(packing_model(items)))) == attribute
    assert attribute["omitted_sha256"] == omitted_digest(map(identity, pack(full(packing_model(items)))["value"][MAX_LISTED_TENSORS:]))


def test_a_sparse_tensors_attribute_is_cut_alike() -> None:
    data = sparse_model(MAX_LISTED_TENSORS + 6)
    attribute = pack(rendered(data))
    assert len(attribute["value"]) == MAX_LISTED_TENSORS and attribute["omitted"] == 6
    assert fold_listed(pack(full(data))) == attribute
    whole = pack(full(data))["value"]
    assert identity(whole[-1]) == [[4], identity(whole[-1]["sparse_tensor"]["values"]), identity(whole[-1]["sparse_tensor"]["indices"])]


def test_a_function_bodys_attribute_is_cut_too() -> None:
    node = helper.make_node("Identity", ["a"], ["b"])
    node.attribute.append(helper.make_attribute("pack", tensors(MAX_LISTED_TENSORS + 1), attr_type=onnx.AttributeProto.TENSORS))
    function = helper.make_function("local", "F", ["a"], ["b"], [node], OPSETS)
    graph = helper.make_graph(
        [helper.make_node("F", ["x"], ["y"], domain="local")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[*OPSETS, helper.make_opsetid("local", 1)], functions=[function])
    attribute = rendered(model.SerializeToString())["functions"][0]["nodes"][0]["attributes"][0]
    assert len(attribute["value"]) == MAX_LISTED_TENSORS and attribute["omitted"] == 1


# --- the model diff


def diff(a: Json, b: Json) -> Json:
    opsets = [{"domain": "", "version": 21}]
    return compare_models(ModelSide("A", a, opsets), ModelSide("B", b, opsets)).changes


def test_a_change_in_a_left_out_tensor_is_a_changed_node() -> None:
    count = MAX_LISTED_TENSORS + 136
    before = packing_model(tensors(count))
    for changed in (0, MAX_LISTED_TENSORS, count - 1):  # listed, the first left out, the last
        after = packing_model(tensors(count, changed=changed))
        attribute = pack(rendered(after))
        assert (attribute["omitted_sha256"] != pack(rendered(before))["omitted_sha256"]) == (changed >= MAX_LISTED_TENSORS)
        (change,) = diff(rendered(before, "A"), rendered(after, "B"))
        assert change["name"] == "packer" and change["fields"] == ["attributes"], changed
        # an earlier document (every item listed) against one of this format: alike
        (change,) = diff(full(before, "A"), rendered(after, "B"))
        assert change["fields"] == ["attributes"]
    assert diff(rendered(before, "A"), rendered(before, "B")) == []
    assert diff(full(before, "A"), rendered(before, "B")) == diff(rendered(before, "A"), full(before, "B")) == []


def test_one_tensor_more_is_a_changed_node() -> None:
    count = MAX_LISTED_TENSORS + 10
    (change,) = diff(rendered(packing_model(tensors(count)), "A"), rendered(packing_model(tensors(count + 1)), "B"))
    assert change["fields"] == ["attributes"]


# --- the catalogue and the summary


def built(data: bytes) -> Any:
    with load_model_bytes(data) as model:
        catalog = build_catalog(model.proto, keep_rows=MAX_CATALOGUED_PER_ATTRIBUTE + 10)
        summary = bounded_summary(model, "m.onnx", catalog, 100)
    return catalog, summary


def test_an_attributes_items_past_the_limit_get_no_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    count = MAX_CATALOGUED_PER_ATTRIBUTE + 5
    data = packing_model(tensors(count))
    catalog, summary = built(data)
    assert catalog.count == 1 + MAX_CATALOGUED_PER_ATTRIBUTE + 1 and catalog.not_catalogued == 5  # W, the first items, c
    assert summary["counts"]["tensors"] == catalog.count and summary["tensors_not_catalogued"] == 5
    assert "tensors" in summary["truncated"] and len(summary["tensors"]) == 100
    with monkeypatch.context() as patch:  # every tensor catalogued: the rows kept are those rows, unchanged
        patch.setattr(catalog_module, "MAX_CATALOGUED_PER_ATTRIBUTE", 1 << 30)
        every, _ = built(data)
    assert every.count == count + 2 and every.not_catalogued == 0
    kept = [
        row
        for row in every.rows
        if not row.field_path.endswith(tuple(f".tensors[{i}]" for i in range(MAX_CATALOGUED_PER_ATTRIBUTE, count)))
    ]
    assert catalog.rows == kept[: len(catalog.rows)]
    assert catalog.rows[-1].name == "" and catalog.rows[-1].field_path == "ModelProto.graph.node[1].attribute[0].t"
    assert catalog.rows[-1].seq == 1 + count and catalog.rows[-1].alias == every.rows[-1].alias  # its place in file order, its alias
    assert len(b"".join(catalog.converted)) < len(b"".join(every.converted))  # the left-out tensors' bytes are not converted
    (tmp_path / "catalog.sqlite").write_bytes(catalog.database)
    stored = Catalog(tmp_path / "catalog.sqlite")
    try:
        pages, after = [], -1
        while page := stored.page(after, 300, ""):
            pages += page
            after = page[-1].seq
        assert pages == catalog.rows
        last_kept = f"ModelProto.graph.node[0].attribute[0].tensors[{MAX_CATALOGUED_PER_ATTRIBUTE - 1}]"
        assert stored.by_field_path(last_kept) is not None
        assert stored.by_field_path(f"ModelProto.graph.node[0].attribute[0].tensors[{MAX_CATALOGUED_PER_ATTRIBUTE}]") is None
        assert stored.by_name(f"t{count - 1}", 10) == []  # not found, as an unknown name
        assert len(stored.by_name("", 1000)) == 1 + MAX_CATALOGUED_PER_ATTRIBUTE // 5  # the unnamed ones catalogued, and c
    finally:
        stored.close()


def test_every_tensor_a_document_lists_is_catalogued() -> None:
    assert MAX_LISTED_TENSORS <= MAX_CATALOGUED_PER_ATTRIBUTE  # so no href of a graph document is a 404
    data = packing_model(tensors(MAX_CATALOGUED_PER_ATTRIBUTE + 5))
    catalog, _ = built(data)
    catalogued = {row.field_path for row in catalog.rows}
    assert {ref["field_path"] for ref in pack(rendered(data))["value"]} <= catalogued


def test_a_model_within_the_limits_catalogues_every_tensor() -> None:
    catalog, summary = built(packing_model(tensors(MAX_CATALOGUED_PER_ATTRIBUTE)))
    assert catalog.count == MAX_CATALOGUED_PER_ATTRIBUTE + 2 and catalog.not_catalogued == 0
    assert "tensors_not_catalogued" not in summary and summary["counts"]["tensors"] == catalog.count


def test_a_sparse_tensors_items_are_counted_with_both_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_module, "MAX_CATALOGUED_PER_ATTRIBUTE", 3)
    catalog, summary = built(sparse_model(5))
    assert catalog.count == 6 and catalog.not_catalogued == 4 and summary["tensors_not_catalogued"] == 4
    assert [row.field_path.rsplit(".", 2)[-2:] for row in catalog.rows][-2:] == [
        ["sparse_tensors[2]", "values"],
        ["sparse_tensors[2]", "indices"],
    ]


def test_an_external_file_a_left_out_tensor_reads_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(catalog_module, "MAX_CATALOGUED_PER_ATTRIBUTE", 1)
    items = tensors(2)
    (tmp_path / "w.bin").write_bytes(items[1].raw_data)
    items[1].ClearField("raw_data")
    items[1].data_location = TensorProto.EXTERNAL
    for key, value in (("location", "w.bin"), ("offset", "0"), ("length", str(len((tmp_path / "w.bin").read_bytes())))):
        entry = items[1].external_data.add()
        entry.key, entry.value = key, value
    (tmp_path / "m.onnx").write_bytes(packing_model(items, after=False))
    with load_model(tmp_path / "m.onnx") as model:
        catalog = build_catalog(model.proto, keep_rows=10)
    assert catalog.not_catalogued == 1 and all(row.file != "w.bin" for row in catalog.rows)
    assert catalog.external_files == ["w.bin"]
