"""The full resolved graph as JSON-ready data (run in the worker).

Owns `render_graph`: nodes in resolved order with their attributes as JSON
values, values with types, producers and consumers (node positions in the
resolved order of the same graph), subgraphs inline in the attribute that
holds them, with their captures; functions as written. Tensors are never
inlined: a reference gives the tensor's name, field path, type, dims, the
SHA-256 of its bytes as served raw (what a model diff compares,
`service.tasks.model_diff`) and the href they are served at
(`service.store.catalog.tensor_href`); a small one of numbers (at most
SMALL_VALUES elements, its bytes at hand) gives its `values` too, flat, as
the explorer draws them in their consumer's box (`axes = [1]`). Floats that JSON
cannot hold are the strings "NaN", "Infinity" and "-Infinity".

A document's size follows what the model holds, not its bytes alone: a
TENSORS or SPARSE_TENSORS attribute lists its first MAX_LISTED_TENSORS items
(a few bytes of protobuf each, a few hundred of JSON), and its item in
`attributes` gives how many it left out (`omitted`) and `omitted_sha256`, the
digest `omitted_digest` makes of them: one line of compact, ASCII JSON per
left-out item, `[name, elem_type, dims, sha256]` for a tensor and
`[dims, <values>, <indices>]` for a sparse tensor (`identity`), so that a
model diff still tells two such attributes apart by any left-out tensor. The
cut is part of the format (`FORMAT`): `fold_listed` gives an attribute of an
earlier document, which listed every item, in this form (what
`service.tasks.model_diff` compares).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Iterable
from typing import Any, assert_never

from importer import OnnxModel, ResolvedGraph, ResolvedNode, SparseTensor, Tensor, Value
from importer.attribute_types import TYPE_INFO, AttributeType, ValueKind
from importer.dump import text_or_hex
from importer.element_types import DataType
from importer.messages import Attribute, Function, Graph, Node, float_from_bits
from importer.summary import describe_type, element_type_name
from importer.tensor_places import tensor_places
from service.tasks.catalog_format import tensor_href

Json = Any
FORMAT = "onnx-service-graph/4"  # 4: plural tensor attributes cut at MAX_LISTED_TENSORS items (3: tensor references' sha256)
SMALL_VALUES = 8  # a tensor of at most this many numbers carries its values in its reference
MAX_LISTED_TENSORS = 64  # items a TENSORS or SPARSE_TENSORS attribute lists; the rest are counted and digested
LISTED_TYPES = frozenset(  # the attribute types MAX_LISTED_TENSORS cuts, by name: TENSORS and SPARSE_TENSORS
    info.type.name for info in TYPE_INFO.values() if info.plural and info.kind in (ValueKind.TENSOR, ValueKind.SPARSE_TENSOR)
)
NUMBERS = frozenset(
    {
        DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.BOOL,
        DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64,
        DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64,
    }
)  # fmt: skip


def _json_float(value: float) -> Json:
    if math.isfinite(value):
        return value
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _float(bits: object) -> Json:
    return _json_float(float_from_bits(bits))


def _number(value: object) -> Json:
    """One element of a small tensor as JSON: ints and bools as they are, floats as `_float` writes them."""
    return _json_float(value) if isinstance(value, float) else value


def identity(reference: Json) -> Json:
    """What `omitted_digest` reads of one item of a plural tensor attribute, from
    its reference in a document: a tensor's [name, elem_type, dims, sha256], a
    sparse tensor's [dims, <its values'>, <its indices'>]; None for anything else."""
    if not isinstance(reference, dict):
        return None
    sparse = reference.get("sparse_tensor")
    if isinstance(sparse, dict):
        return [sparse.get("dims"), identity(sparse.get("values")), identity(sparse.get("indices"))]
    return [reference.get("name"), reference.get("elem_type"), reference.get("dims"), reference.get("sha256")]


def omitted_digest(identities: Iterable[Json]) -> str:
    """The SHA-256 of the items an attribute left out, given as `identity` gives
    them: one line of compact JSON (ASCII, every other character escaped) each."""
    digest = hashlib.sha256()
    for item in identities:
        digest.update(json.dumps(item, separators=(",", ":"), allow_nan=False).encode() + b"\n")
    return digest.hexdigest()


def fold_listed(attribute: Json) -> Json:
    """An attribute item of a document that listed every item of a plural
    tensor attribute (before FORMAT 4) as this format gives it: its first
    MAX_LISTED_TENSORS items, `omitted` and `omitted_sha256`; any other item as it is."""
    if not isinstance(attribute, dict) or attribute.get("type") not in LISTED_TYPES or "omitted" in attribute:
        return attribute
    value = attribute.get("value")
    if not isinstance(value, list) or len(value) <= MAX_LISTED_TENSORS:
        return attribute
    left_out = value[MAX_LISTED_TENSORS:]
    digest = omitted_digest(map(identity, left_out))
    return {**attribute, "value": value[:MAX_LISTED_TENSORS], "omitted": len(left_out), "omitted_sha256": digest}


class GraphRenderer:
    def __init__(self, model_id: str, places: dict[int, tuple[str, int]]) -> None:
        self.model_id = model_id
        self.places = places  # id(Tensor) -> (field path, how many tensors share its name)
        self.digests: dict[int, str] = {}  # id(Tensor) -> its SHA-256: each tensor hashed once

    def model(self, model: OnnxModel) -> Json:
        return {
            "format": FORMAT,
            "graph": self.graph(model.graph),
            "functions": [self.function(f) for f in model.functions],
        }

    def sha256(self, tensor: Tensor) -> str:
        return self.digests.get(id(tensor)) or self.digests.setdefault(id(tensor), tensor.sha256())

    def tensor_ref(self, tensor: Tensor) -> Json:
        field_path, shared = self.places[id(tensor)]
        ref = {
            "name": tensor.name,
            "field_path": field_path,
            "elem_type": element_type_name(tensor.data_type),
            "dims": list(tensor.dims),
            "sha256": self.sha256(tensor),
            "href": tensor_href(self.model_id, tensor.name, field_path, shared),
        }
        if tensor.element_count <= SMALL_VALUES and tensor.data_type in NUMBERS and tensor.is_bound:
            ref["values"] = [_number(value) for value in tensor.to_numpy().reshape(-1).tolist()]
        return ref

    def sparse_ref(self, sparse: SparseTensor) -> Json:
        return {
            "sparse_tensor": {
                "dims": list(sparse.dims),
                "values": self.tensor_ref(sparse.values),
                "indices": self.tensor_ref(sparse.indices),
            }
        }

    def graph(self, graph: ResolvedGraph) -> Json:
        positions = {id(node): position for position, node in enumerate(graph.nodes)}

        def value(v: Value) -> Json:
            item: dict[str, Json] = {
                "name": v.name,
                "kind": v.kind,
                "type": describe_type(v.type),
                "producer": positions.get(id(v.producer)) if v.producer is not None else None,
                "consumers": [positions[id(node)] for node in v.consumers if id(node) in positions],
            }
            if isinstance(v.initializer, Tensor):
                item["initializer"] = self.tensor_ref(v.initializer)
            elif isinstance(v.initializer, SparseTensor):
                item["initializer"] = self.tensor_ref(v.initializer.values)
            return item

        return {
            "name": graph.name,
            "path": graph.path,
            "inputs": [v.name for v in graph.inputs],
            "outputs": [v.name for v in graph.outputs],
            "captures": [v.name for v in graph.captures],
            "nodes_were_reordered": graph.nodes_were_reordered,
            "values": [value(v) for v in graph.values.values()],
            "nodes": [self.node(node, position) for position, node in enumerate(graph.nodes)],
        }

    def node(self, node: ResolvedNode, position: int) -> Json:
        subgraphs = {id(sub.proto): sub for _, sub in node.subgraphs}
        return {
            "position": position,
            "index": node.index,
            "name": node.name,
            "op_type": node.op_type,
            "domain": node.domain,
            "opset_version": node.opset_version,
            "inputs": [name or None for name in node.proto.input],  # resolution checked every name
            "outputs": [name or None for name in node.proto.output],
            "attributes": [self.attribute(a, subgraphs) for a in node.proto.attribute],
        }

    def attribute(self, attribute: Attribute, subgraphs: dict[int, ResolvedGraph]) -> Json:
        item: dict[str, Json] = {"name": attribute.name, "type": attribute.type.name}
        if attribute.ref_attr_name:
            item["ref_attr_name"] = attribute.ref_attr_name
            return item
        value = attribute.value
        left_out: list[object] = []
        if attribute.type.name in LISTED_TYPES and isinstance(value, list) and len(value) > MAX_LISTED_TENSORS:
            value, left_out = value[:MAX_LISTED_TENSORS], value[MAX_LISTED_TENSORS:]
        item["value"] = self.attribute_value(attribute.type, value, subgraphs)
        if left_out:
            item["omitted"] = len(left_out)
            item["omitted_sha256"] = omitted_digest(map(self.identity, left_out))
        return item

    def identity(self, value: object) -> Json:
        """`identity` of an item left out, from the item itself (its reference is never made)."""
        if isinstance(value, Tensor):  # hashed, not kept: a tensor left out is in no other reference
            return [value.name, element_type_name(value.data_type), list(value.dims), self.digests.get(id(value)) or value.sha256()]
        if isinstance(value, SparseTensor):
            return [list(value.dims), self.identity(value.values), self.identity(value.indices)]
        return None

    def attribute_value(self, attr_type: AttributeType, value: object, subgraphs: dict[int, ResolvedGraph]) -> Json:
        info = TYPE_INFO.get(attr_type)
        if info is None:  # UNDEFINED
            return None
        if info.plural:
            assert isinstance(value, list)
            return [self.item(info.kind, item, subgraphs) for item in value]
        return self.item(info.kind, value, subgraphs)

    def item(self, kind: ValueKind, value: object, subgraphs: dict[int, ResolvedGraph]) -> Json:
        """One item of an attribute's value."""
        match kind:
            case ValueKind.FLOAT:
                return _float(value)
            case ValueKind.INT:
                return value
            case ValueKind.BYTES:
                assert isinstance(value, bytes)
                return text_or_hex(value)
            case ValueKind.TENSOR:
                return self.tensor_ref(value) if isinstance(value, Tensor) else None
            case ValueKind.SPARSE_TENSOR:
                return self.sparse_ref(value) if isinstance(value, SparseTensor) else None
            case ValueKind.GRAPH:
                if not isinstance(value, Graph):
                    return None
                resolved = subgraphs.get(id(value))
                if resolved is not None:
                    return self.graph(resolved)
                return {"name": value.name, "nodes": [self.function_node(n) for n in value.node]}  # in a function: not resolved
            case ValueKind.TYPE_PROTO:
                return describe_type(value)  # type: ignore[arg-type]
            case _:
                assert_never(kind)

    def function(self, function: Function) -> Json:
        return {
            "name": function.name,
            "domain": function.domain,
            "overload": function.overload,
            "inputs": list(function.input),
            "outputs": list(function.output),
            "attributes": list(function.attribute),
            "attribute_defaults": [self.attribute(a, {}) for a in function.attribute_proto],
            "opset_import": [{"domain": o.domain, "version": o.version} for o in function.opset_import],
            "nodes": [self.function_node(n) for n in function.node],
        }

    def function_node(self, node: Node) -> Json:
        return {
            "name": node.name,
            "op_type": node.op_type,
            "domain": node.domain,
            "inputs": list(node.input),
            "outputs": list(node.output),
            "attributes": [self.attribute(a, {}) for a in node.attribute],
        }


def render_graph(model: OnnxModel, model_id: str) -> Json:
    """The graph document of `model`, stored as `model_id`."""
    places = list(tensor_places(model.proto))
    shared = Counter(place.tensor.name for place in places)
    return GraphRenderer(model_id, {id(p.tensor): (p.field_path, shared[p.tensor.name]) for p in places}).model(model)
