"""The attribute type table (importer/attribute_types.py) against onnx.proto,
and every attribute type read, dumped and walked through that one table.

The table is checked against the AttributeProto descriptor of the installed
onnx package: the codes, the field names, numbers and wire types, repeated
or not, and the message type of each item. Then one attribute of every type,
declared and inferred, must give the reference dump (tools/onnx_dump.py)
and be walked by the tensor walk and rendered by the graph JSON.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import onnx_dump
import pytest
from onnx import TensorProto, helper, numpy_helper

from importer import load_model_bytes
from importer.attribute_types import ATTRIBUTE_TYPES, TYPE_INFO, AttributeType, ValueKind, value_items
from importer.dump import render_dump
from importer.tensor_places import tensor_places
from importer.wire import WIRE_FIXED32, WIRE_LEN, WIRE_VARINT
from service.tasks.graph_document import render_graph

_FD = type(onnx.AttributeProto.DESCRIPTOR.fields_by_name["f"])  # protobuf's FieldDescriptor
_PROTO_TYPE = {  # (protobuf field type, wire type) of one item of each kind
    ValueKind.FLOAT: (_FD.TYPE_FLOAT, WIRE_FIXED32),
    ValueKind.INT: (_FD.TYPE_INT64, WIRE_VARINT),
    ValueKind.BYTES: (_FD.TYPE_BYTES, WIRE_LEN),
    ValueKind.TENSOR: (_FD.TYPE_MESSAGE, WIRE_LEN),
    ValueKind.GRAPH: (_FD.TYPE_MESSAGE, WIRE_LEN),
    ValueKind.SPARSE_TENSOR: (_FD.TYPE_MESSAGE, WIRE_LEN),
    ValueKind.TYPE_PROTO: (_FD.TYPE_MESSAGE, WIRE_LEN),
}


def test_the_codes_are_those_of_onnx_proto() -> None:
    assert {t.name: int(t) for t in AttributeType} == dict(onnx.AttributeProto.AttributeType.items())


def test_each_row_is_its_attributeproto_field() -> None:
    fields = onnx.AttributeProto.DESCRIPTOR.fields_by_name
    assert sorted(info.type for info in ATTRIBUTE_TYPES) == sorted(t for t in AttributeType if t != AttributeType.UNDEFINED)
    for info in ATTRIBUTE_TYPES:
        field = fields[info.field]
        proto_type, wire_type = _PROTO_TYPE[info.kind]
        assert (info.number, field.type, info.wire_type) == (field.number, proto_type, wire_type), info
        assert info.key == field.number << 3 | wire_type
        assert info.plural == field.is_repeated, info
        assert info.packed_key == (field.number << 3 | WIRE_LEN if info.plural and wire_type != WIRE_LEN else None)
        assert info.is_message == (field.type == _FD.TYPE_MESSAGE)
        if info.is_message:
            assert field.message_type.name == info.kind.value, info


def test_a_plural_type_holds_items_of_its_singular_type() -> None:
    for info in ATTRIBUTE_TYPES:
        item = TYPE_INFO[info.singular]
        assert not item.plural
        assert item.kind == info.kind
        assert info.plural == (info.singular != info.type)


def test_the_table_is_in_inference_order() -> None:
    """docs/import-rules.md §2: f, i, s, t, g, sparse_tensor, tp, then the
    repeated fields; onnx.proto declares the types in that order."""
    declared = [v.name for v in onnx.AttributeProto.AttributeType.DESCRIPTOR.values if v.number]
    assert [info.type.name for info in ATTRIBUTE_TYPES] == declared
    assert [info.plural for info in ATTRIBUTE_TYPES] == sorted(info.plural for info in ATTRIBUTE_TYPES)


def test_value_items_name_each_item_by_its_field() -> None:
    assert value_items(AttributeType.GRAPH, "g0") == [("g", "g0")]
    assert value_items(AttributeType.SPARSE_TENSORS, ["a", "b"]) == [("sparse_tensors[0]", "a"), ("sparse_tensors[1]", "b")]
    assert value_items(AttributeType.TENSORS, None) == []  # a ref_attr_name has no value
    assert value_items(AttributeType.UNDEFINED, None) == []


def _samples() -> dict[AttributeType, Any]:
    tensor = numpy_helper.from_array(np.array([1.5, -2.0], dtype=np.float32), "w")
    sparse = helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([3], dtype=np.int64), "sv"), numpy_helper.from_array(np.array([1], dtype=np.int64), "si"), [4]
    )
    body = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "body",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    tp = helper.make_tensor_type_proto(TensorProto.INT8, [2, "n"])
    T = AttributeType
    return {
        T.FLOAT: 0.1, T.INT: -7, T.STRING: b"\xff\x00", T.TENSOR: tensor, T.GRAPH: body, T.SPARSE_TENSOR: sparse, T.TYPE_PROTO: tp,
        T.FLOATS: [1.0, float("nan")], T.INTS: [1, -(1 << 63)], T.STRINGS: [b"a", "é".encode()], T.TENSORS: [tensor, tensor],
        T.GRAPHS: [body], T.SPARSE_TENSORS: [sparse], T.TYPE_PROTOS: [tp, tp],
    }  # fmt: skip


@pytest.mark.parametrize("declared", [True, False], ids=["declared", "inferred"])
@pytest.mark.parametrize("attr_type", [info.type for info in ATTRIBUTE_TYPES], ids=lambda t: t.name)
def test_every_type_reads_as_onnx_dumps_it(attr_type: AttributeType, declared: bool) -> None:
    attribute = helper.make_attribute("a", _samples()[attr_type], attr_type=int(attr_type))
    if not declared:
        attribute.ClearField("type")
    node = helper.make_node("Identity", ["x"], ["y"])
    node.attribute.append(attribute)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with load_model_bytes(model.SerializeToString()) as imported:
        assert render_dump(imported.proto) == onnx_dump.render(onnx_dump.model_doc(model))
        assert imported.proto.graph is not None
        read = imported.proto.graph.node[0].attribute[0]
        assert read.type == attr_type
        places = [place.field_path for place in tensor_places(imported.proto)]
        rendered = render_graph(imported, "M")["graph"]["nodes"][0]["attributes"][0]
    assert rendered["type"] == attr_type.name
    info = TYPE_INFO[attr_type]
    if info.kind is ValueKind.GRAPH:  # resolved, inline, at the path of its field
        graphs = rendered["value"] if info.plural else [rendered["value"]]
        assert [g["path"].rsplit(".", 1)[1] for g in graphs] == [segment for segment, _ in value_items(attr_type, read.value)]
    prefix = "ModelProto.graph.node[0].attribute[0]."
    walked = {path.removeprefix(prefix).split(".")[0] for path in places if path.startswith(prefix)}
    if info.kind in (ValueKind.TENSOR, ValueKind.SPARSE_TENSOR):
        assert walked == {segment for segment, _ in value_items(attr_type, read.value)}
    else:
        assert walked == set()  # the sample subgraphs hold no tensors
    if info.kind is ValueKind.TENSOR:  # a reference: the field path the tensor walk gives, and its href
        refs = rendered["value"] if info.plural else [rendered["value"]]
        assert [ref["field_path"] for ref in refs] == [p for p in places if p.startswith(prefix)]
        assert all(ref["href"].startswith("/models/M/tensors/") for ref in refs)
