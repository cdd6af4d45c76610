"""Hypothesis strategies for random valid ONNX models, written with the onnx package.

The models are valid by the import rules (docs/import-rules.md: every
reference defined, domains imported, names unique) but otherwise as varied as
the format allows: every element type in raw_data and in its typed field
(with out-of-range entries that the conversion rules truncate), every
attribute type, every TypeProto member, subgraphs that capture outer values,
functions, metadata, and nodes stored out of topological order.
"""

from __future__ import annotations

import math
from typing import Any

import onnx
from hypothesis import strategies as st
from onnx import TensorProto, helper

ALL_DATA_TYPES = list(range(1, 29))
CUSTOM_DOMAIN = "com.example"
_FLOAT32 = st.floats(width=32)
_INT32 = st.integers(-(2**31), 2**31 - 1)
_INT64 = st.integers(-(2**63), 2**63 - 1)
_UINT64 = st.integers(0, 2**64 - 1)
_NAMES = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=6)

_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64, 15: 128, 16: 16,
         17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8, 25: 2, 26: 2, 27: 6, 28: 6}  # fmt: skip


def typed_entry_count(data_type: int, count: int) -> int:
    bits = _BITS[data_type]
    if bits == 4:
        return (count + 1) // 2
    if bits == 2:
        return (count + 3) // 4
    if data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        return 2 * count
    return count


@st.composite
def tensors(draw: st.DrawFn, name: str) -> TensorProto:
    data_type = draw(st.sampled_from(ALL_DATA_TYPES))
    dims = draw(st.lists(st.integers(0, 3), max_size=3))
    count = math.prod(dims)
    tensor = TensorProto(name=name, data_type=data_type, dims=dims)
    if data_type == TensorProto.STRING:
        tensor.string_data.extend(draw(st.lists(st.binary(max_size=4), min_size=count, max_size=count)))
        return tensor
    if count and draw(st.booleans()):
        size = (count * _BITS[data_type] + 7) // 8
        tensor.raw_data = draw(st.binary(min_size=size, max_size=size))
        return tensor
    entries = typed_entry_count(data_type, count)
    if data_type in (TensorProto.FLOAT, TensorProto.COMPLEX64):
        tensor.float_data.extend(draw(st.lists(_FLOAT32, min_size=entries, max_size=entries)))
    elif data_type in (TensorProto.DOUBLE, TensorProto.COMPLEX128):
        tensor.double_data.extend(draw(st.lists(st.floats(), min_size=entries, max_size=entries)))
    elif data_type == TensorProto.INT64:
        tensor.int64_data.extend(draw(st.lists(_INT64, min_size=entries, max_size=entries)))
    elif data_type in (TensorProto.UINT64, TensorProto.UINT32):
        tensor.uint64_data.extend(draw(st.lists(_UINT64, min_size=entries, max_size=entries)))
    else:
        tensor.int32_data.extend(draw(st.lists(_INT32, min_size=entries, max_size=entries)))
    return tensor


@st.composite
def shapes(draw: st.DrawFn) -> list[int | str | None] | None:
    if draw(st.booleans()):
        return None
    return draw(st.lists(st.one_of(st.integers(-1, 9), st.sampled_from(["N", "batch", "é"]), st.none()), max_size=4))


@st.composite
def type_protos(draw: st.DrawFn, depth: int = 0) -> onnx.TypeProto:
    kinds = ["tensor", "sparse", "opaque", "empty"] + (["sequence", "optional", "map"] if depth < 2 else [])
    kind = draw(st.sampled_from(kinds))
    elem_type = draw(st.sampled_from(ALL_DATA_TYPES))
    if kind == "tensor":
        return helper.make_tensor_type_proto(elem_type, draw(shapes()))
    if kind == "sparse":
        return helper.make_sparse_tensor_type_proto(elem_type, draw(shapes()))
    if kind == "sequence":
        return helper.make_sequence_type_proto(draw(type_protos(depth + 1)))
    if kind == "optional":
        return helper.make_optional_type_proto(draw(type_protos(depth + 1)))
    if kind == "map":
        return helper.make_map_type_proto(draw(st.sampled_from([2, 3, 6, 7, 8])), draw(type_protos(depth + 1)))
    proto = onnx.TypeProto()
    if kind == "opaque":
        proto.opaque_type.domain = draw(st.sampled_from(["", "d"]))
        proto.opaque_type.name = draw(st.sampled_from(["", "thing"]))
    return proto


@st.composite
def attributes(draw: st.DrawFn, name: str, outer_values: list[str]) -> onnx.AttributeProto:
    kind = draw(st.sampled_from(["f", "i", "s", "t", "g", "sparse", "tp", "floats", "ints", "strings", "tensors", "tps", "ref"]))
    if kind == "f":
        return helper.make_attribute(name, draw(_FLOAT32))
    if kind == "i":
        return helper.make_attribute(name, draw(_INT64))
    if kind == "s":
        return helper.make_attribute(name, draw(st.binary(max_size=6)))
    if kind == "t":
        return helper.make_attribute(name, draw(tensors("t")))
    if kind == "g":
        return helper.make_attribute(name, draw(subgraphs(outer_values)))
    if kind == "sparse":
        values = helper.make_tensor("v", TensorProto.FLOAT, [2], [1.0, 2.0])
        indices = helper.make_tensor("i", TensorProto.INT64, [2], [0, 3])
        return helper.make_attribute(name, helper.make_sparse_tensor(values, indices, [5]))
    if kind == "tp":
        return helper.make_attribute(name, draw(type_protos()))
    if kind == "floats":
        return helper.make_attribute(name, draw(st.lists(_FLOAT32, min_size=1, max_size=4)), attr_type=onnx.AttributeProto.FLOATS)
    if kind == "ints":
        return helper.make_attribute(name, draw(st.lists(_INT64, min_size=1, max_size=4)))
    if kind == "strings":
        return helper.make_attribute(name, draw(st.lists(st.binary(max_size=4), min_size=1, max_size=3)))
    if kind == "tensors":
        return helper.make_attribute(name, [draw(tensors(f"t{i}")) for i in range(draw(st.integers(1, 2)))])
    if kind == "tps":
        return helper.make_attribute(name, [draw(type_protos()) for _ in range(2)])
    return helper.make_attribute_ref(name, onnx.AttributeProto.INT)


@st.composite
def subgraphs(draw: st.DrawFn, outer_values: list[str]) -> onnx.GraphProto:
    """A one-node graph that reads (captures) an outer value."""
    read = draw(st.sampled_from(outer_values))
    node = helper.make_node("Identity", [read], ["sub_out"])
    out = helper.make_tensor_value_info("sub_out", TensorProto.FLOAT, None)
    return helper.make_graph([node], "sub", [], [out])


@st.composite
def models(draw: st.DrawFn) -> onnx.ModelProto:
    """A random valid model (see the module header)."""
    inputs = [helper.make_value_info(f"in{i}", draw(type_protos())) for i in range(draw(st.integers(1, 3)))]
    values = [v.name for v in inputs]
    initializers = []
    for index in range(draw(st.integers(0, 3))):
        tensor = draw(tensors(f"init{index}"))
        initializers.append(tensor)
        values.append(tensor.name)
    if draw(st.booleans()):
        initializers.append(draw(tensors(inputs[0].name)))  # an input's default value
    nodes = []
    for index in range(draw(st.integers(1, 6))):
        reads = draw(st.lists(st.sampled_from([*values, ""]), min_size=1, max_size=3))
        node_attributes = [draw(attributes(f"a{k}", values)) for k in range(draw(st.integers(0, 3)))]
        node = helper.make_node(
            draw(st.sampled_from(["Add", "Relu", "Custom"])),
            reads,
            [f"v{index}"],
            name=draw(_NAMES),
            domain=draw(st.sampled_from(["", "ai.onnx", CUSTOM_DOMAIN])),
        )
        node.attribute.extend(node_attributes)
        nodes.append(node)
        values.append(f"v{index}")
    if draw(st.booleans()):
        nodes = draw(st.permutations(nodes))  # out of topological order: must still import
    outputs = [helper.make_value_info(values[-1], draw(type_protos()))]
    value_info = [helper.make_value_info(name, draw(type_protos())) for name in draw(st.lists(st.sampled_from(values), max_size=3))]
    graph = helper.make_graph(nodes, draw(_NAMES), inputs, outputs, initializer=initializers, value_info=value_info)
    opsets = [helper.make_opsetid("", draw(st.integers(1, 23))), helper.make_opsetid(CUSTOM_DOMAIN, 1)]
    model = helper.make_model(graph, opset_imports=opsets, producer_name=draw(_NAMES))
    model.ir_version = draw(st.integers(3, 13))
    if draw(st.booleans()):
        function_node = helper.make_node("Add", ["x", "x"], ["y"])
        model.functions.append(helper.make_function(CUSTOM_DOMAIN, "Double", ["x"], ["y"], [function_node], opsets, ["alpha"]))
    for key in draw(st.lists(_NAMES, max_size=2)):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, "v"
    return model


def serialize(model: Any) -> bytes:
    data: bytes = model.SerializeToString()
    return data
