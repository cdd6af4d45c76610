"""The structural dump, format `onnx-dump/1` (docs/dump-format.md).

Owns the canonical JSON rendering of a model as read: file order kept, nodes
not re-sorted, tensors by element type, dims and the SHA-256 of their raw
layout. `tools/onnx_dump.py` writes the same bytes from the onnx package.
"""

from __future__ import annotations

import json
from typing import Any, Final, assert_never

from importer.attribute_types import TYPE_INFO, AttributeType, ValueKind
from importer.messages import (
    Attribute,
    Function,
    Graph,
    MapType,
    Model,
    Node,
    OpaqueType,
    OperatorSetId,
    OptionalType,
    SequenceType,
    TensorType,
    TypeProto,
    ValueInfo,
)
from importer.tensor import SparseTensor, Tensor

FORMAT: Final = "onnx-dump/1"
Json = Any


def render_dump(model: Model) -> str:
    """The dump of `model`, as text ending in one newline."""
    return json.dumps(dump_model(model), ensure_ascii=True, sort_keys=True, indent=1) + "\n"


def dump_model(model: Model) -> Json:
    assert model.graph is not None
    return {
        "format": FORMAT,
        "ir_version": model.ir_version or 0,
        "model_version": model.model_version,
        "producer_name": model.producer_name,
        "producer_version": model.producer_version,
        "domain": model.domain,
        "doc_string": model.doc_string,
        "opset_import": [_opset(o) for o in model.opset_import],
        "metadata_props": [{"key": e.key, "value": e.value} for e in model.metadata_props],
        "graph": _graph(model.graph),
        "functions": [_function(f) for f in model.functions],
    }


def _opset(opset: OperatorSetId) -> Json:
    return {"domain": opset.domain, "version": opset.version}


def _graph(graph: Graph) -> Json:
    return {
        "name": graph.name,
        "doc_string": graph.doc_string,
        "input": [_value(v) for v in graph.input],
        "output": [_value(v) for v in graph.output],
        "value_info": [_value(v) for v in graph.value_info],
        "initializer": [dump_tensor(t) for t in graph.initializer],
        "sparse_initializer": [_sparse(s) for s in graph.sparse_initializer],
        "node": [_node(n) for n in graph.node],
    }


def _value(info: ValueInfo) -> Json:
    return {"name": info.name, "type": dump_type(info.type)}


def dump_type(value_type: TypeProto | None) -> Json:
    if value_type is None:
        return None
    if isinstance(value_type, TensorType):
        shape = None if value_type.shape is None else list(value_type.shape)
        member = "sparse_tensor" if value_type.sparse else "tensor"
        return {member: {"elem_type": value_type.elem_type, "shape": shape}}
    if isinstance(value_type, SequenceType):
        return {"sequence": dump_type(value_type.elem_type)}
    if isinstance(value_type, OptionalType):
        return {"optional": dump_type(value_type.elem_type)}
    if isinstance(value_type, MapType):
        return {"map": {"key_type": value_type.key_type, "value_type": dump_type(value_type.value_type)}}
    assert isinstance(value_type, OpaqueType)
    return {"opaque": {"domain": value_type.domain, "name": value_type.name}}


def dump_tensor(tensor: Tensor) -> Json:
    return {"name": tensor.name, "data_type": int(tensor.data_type), "dims": list(tensor.dims), "sha256": tensor.sha256()}


def _sparse(sparse: SparseTensor) -> Json:
    return {"dims": list(sparse.dims), "values": dump_tensor(sparse.values), "indices": dump_tensor(sparse.indices)}


def _node(node: Node) -> Json:
    return {
        "name": node.name,
        "op_type": node.op_type,
        "domain": node.domain,
        "overload": node.overload,
        "doc_string": node.doc_string,
        "input": list(node.input),
        "output": list(node.output),
        "attribute": [_attribute(a) for a in node.attribute],
    }


def _attribute(attribute: Attribute) -> Json:
    value = None if attribute.ref_attr_name else _attribute_value(attribute.type, attribute.value)
    return {"name": attribute.name, "type": attribute.type.name, "ref_attr_name": attribute.ref_attr_name, "value": value}


def _attribute_value(attr_type: AttributeType, value: object) -> Json:
    info = TYPE_INFO.get(attr_type)
    if info is None:  # UNDEFINED
        return None
    if info.plural:
        assert isinstance(value, list)
        return [_item(info.kind, item) for item in value]
    return _item(info.kind, value)


def _item(kind: ValueKind, value: object) -> Json:
    """One item of an attribute's value (docs/dump-format.md, ATTR)."""
    match kind:
        case ValueKind.FLOAT:
            assert isinstance(value, int)
            return f"0x{value:08x}"
        case ValueKind.INT:
            return value
        case ValueKind.BYTES:
            assert isinstance(value, bytes)
            return text_or_hex(value)
        case ValueKind.TENSOR:
            assert isinstance(value, Tensor)
            return dump_tensor(value)
        case ValueKind.GRAPH:
            assert isinstance(value, Graph)
            return _graph(value)
        case ValueKind.SPARSE_TENSOR:
            assert isinstance(value, SparseTensor)
            return _sparse(value)
        case ValueKind.TYPE_PROTO:
            return dump_type(value)  # type: ignore[arg-type]
        case _:
            assert_never(kind)


def text_or_hex(value: bytes) -> Json:
    """Bytes as a string when they are valid UTF-8, else {"hex": ...}."""
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": value.hex()}


def _function(function: Function) -> Json:
    return {
        "name": function.name,
        "domain": function.domain,
        "overload": function.overload,
        "doc_string": function.doc_string,
        "input": list(function.input),
        "output": list(function.output),
        "attribute": list(function.attribute),
        "attribute_proto": [_attribute(a) for a in function.attribute_proto],
        "opset_import": [_opset(o) for o in function.opset_import],
        "node": [_node(n) for n in function.node],
    }
