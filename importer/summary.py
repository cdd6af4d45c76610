"""A human-friendly summary of an imported model, as JSON-ready data.

Owns `summarize`: producer, opsets, graph inputs and outputs with types and
shapes, node count and op-type histogram, initializers (element type, dims,
byte length and where their bytes are), functions, the NodesWereReordered
flag and the subgraph count. It reads no tensor bytes.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from importer.element_types import DataType
from importer.graph import OnnxModel, Value
from importer.messages import MapType, OpaqueType, OptionalType, SequenceType, TensorType, TypeProto
from importer.tensor import FROM_EXTERNAL, FROM_RAW_DATA, SparseTensor, Tensor

Json = Any


def element_type_name(code: int) -> str:
    try:
        return DataType(code).name
    except ValueError:
        return f"UNKNOWN({code})"


def op_type_key(domain: str, op_type: str) -> str:
    """How summaries count an op type: bare in ONNX's default domain, else `domain::op_type`."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}::{op_type}"


def describe_type(value_type: TypeProto | None) -> Json:
    """A readable type: {"tensor": "FLOAT", "shape": [1, "N", null]} and so on."""
    if value_type is None:
        return None
    if isinstance(value_type, TensorType):
        kind = "sparse_tensor" if value_type.sparse else "tensor"
        shape = None if value_type.shape is None else list(value_type.shape)
        return {"kind": kind, "elem_type": element_type_name(value_type.elem_type), "shape": shape}
    if isinstance(value_type, (SequenceType, OptionalType)):
        kind = "sequence" if isinstance(value_type, SequenceType) else "optional"
        return {"kind": kind, "elem_type": describe_type(value_type.elem_type)}
    if isinstance(value_type, MapType):
        key_type = element_type_name(value_type.key_type)
        return {"kind": "map", "key_type": key_type, "value_type": describe_type(value_type.value_type)}
    assert isinstance(value_type, OpaqueType)
    return {"kind": "opaque", "domain": value_type.domain, "name": value_type.name}


def describe_value(value: Value) -> Json:
    return {"name": value.name, "type": describe_type(value.type)}


def tensor_location(tensor: Tensor) -> Json:
    """Where a tensor's bytes are: a range of a file, or converted in memory."""
    if tensor.source in (FROM_RAW_DATA, FROM_EXTERNAL):
        return {"source": tensor.source, "file": tensor.data_file, "offset": tensor.data_offset, "length": tensor.byte_length}
    return {"source": tensor.source}


def describe_tensor(tensor: Tensor) -> Json:
    return {
        "name": tensor.name,
        "elem_type": element_type_name(tensor.data_type),
        "dims": list(tensor.dims),
        "byte_length": tensor.byte_length,
        "location": tensor_location(tensor),
    }


def describe_model(model: OnnxModel) -> Json:
    """The model's own fields: IR version, producer, domain, version, opsets."""
    proto = model.proto
    return {
        "ir_version": model.ir_version,
        "producer": {"name": proto.producer_name, "version": proto.producer_version},
        "domain": proto.domain,
        "model_version": proto.model_version,
        "opsets": [{"domain": domain, "version": version} for domain, version in model.opsets.items()],
    }


def summarize(model: OnnxModel) -> Json:
    graph = model.graph
    proto = model.proto
    subgraphs = list(graph.subgraphs())
    op_types = Counter(op_type_key(node.domain, node.op_type) for node in graph.nodes)
    initializers = [describe_tensor(t) for t in proto.graph.initializer] if proto.graph else []
    sparse: list[SparseTensor] = proto.graph.sparse_initializer if proto.graph else []
    return {
        "input": model.input_name,
        **describe_model(model),
        "graph": {
            "name": graph.name,
            "inputs": [describe_value(v) for v in graph.inputs],
            "outputs": [describe_value(v) for v in graph.outputs],
            "node_count": len(graph.nodes),
            "op_types": dict(sorted(op_types.items())),
            "initializers": initializers,
            "sparse_initializers": [
                {"name": s.name, "dims": list(s.dims), "values": describe_tensor(s.values), "indices": describe_tensor(s.indices)}
                for s in sparse
            ],
            "nodes_were_reordered": graph.nodes_were_reordered,
            "subgraph_count": len(subgraphs),
        },
        "functions": [
            {
                "domain": f.domain,
                "name": f.name,
                "overload": f.overload,
                "inputs": f.input,
                "outputs": f.output,
                "node_count": len(f.node),
            }
            for f in model.functions
        ],
        "metadata_props": {e.key: e.value for e in proto.metadata_props},
    }
