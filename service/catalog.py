"""The tensor catalogue of one model: every tensor, with a unique URL-safe name.

Owns `catalog_tensors` (run in the worker): initializers, sparse initializer
parts, attribute tensors (Constant values and any TENSOR/TENSORS/SPARSE_TENSOR
attribute) in the main graph, every subgraph and every function, in file
order, depth first.

Naming scheme (stable: the same model always gives the same names):
- the base is the tensor's name; a sparse tensor's parts are
  `<name>.values` and `<name>.indices`; an unnamed attribute tensor is
  `<node name or op_type>.<attribute name>`;
- every character outside `A-Z a-z 0-9 . _ -` becomes `_`, the base is cut to
  100 characters, and a base that is empty or starts with `.` gets a `_` prefix;
- the first tensor with a base gets the base itself, later ones
  `<base>~2`, `<base>~3`, ... (`~` never occurs in a base, so no suffixed name
  collides with a plain one).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from importer import SparseTensor, Tensor
from importer.messages import Attribute, AttributeType, Graph, Model, Node

MAX_BASE_CHARS = 100
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    url_name: str
    tensor: Tensor
    field_path: str  # e.g. ModelProto.graph.node[3].attribute[0].t
    role: str  # initializer, sparse_values, sparse_indices, attribute


def slug(text: str) -> str:
    base = _UNSAFE.sub("_", text)[:MAX_BASE_CHARS]
    if not base or base.startswith("."):
        base = "_" + base
    return base


def catalog_tensors(model: Model) -> list[CatalogEntry]:
    entries: list[CatalogEntry] = []
    taken: dict[str, int] = {}
    for base, tensor, path, role in _model_tensors(model):
        name = slug(base)
        count = taken.get(name, 0) + 1
        taken[name] = count
        entries.append(CatalogEntry(name if count == 1 else f"{name}~{count}", tensor, path, role))
    return entries


Found = tuple[str, Tensor, str, str]  # base name, tensor, field path, role


def _model_tensors(model: Model) -> Iterator[Found]:
    if model.graph is not None:
        yield from _graph_tensors(model.graph, "ModelProto.graph")
    for f_index, function in enumerate(model.functions):
        yield from _nodes_tensors(function.node, f"ModelProto.functions[{f_index}]")


def _graph_tensors(graph: Graph, path: str) -> Iterator[Found]:
    for index, tensor in enumerate(graph.initializer):
        yield tensor.name, tensor, f"{path}.initializer[{index}]", "initializer"
    for index, sparse in enumerate(graph.sparse_initializer):
        yield from _sparse_parts(sparse, sparse.name, f"{path}.sparse_initializer[{index}]")
    yield from _nodes_tensors(graph.node, path)


def _sparse_parts(sparse: SparseTensor, name: str, path: str) -> Iterator[Found]:
    yield f"{name}.values", sparse.values, f"{path}.values", "sparse_values"
    yield f"{name}.indices", sparse.indices, f"{path}.indices", "sparse_indices"


def _nodes_tensors(nodes: list[Node], path: str) -> Iterator[Found]:
    for n_index, node in enumerate(nodes):
        for a_index, attribute in enumerate(node.attribute):
            yield from _attribute_tensors(node, attribute, f"{path}.node[{n_index}].attribute[{a_index}]")


def _attribute_tensors(node: Node, attribute: Attribute, path: str) -> Iterator[Found]:
    T = AttributeType
    fallback = f"{node.name or node.op_type}.{attribute.name}"
    plural = attribute.type in (T.TENSORS, T.GRAPHS, T.SPARSE_TENSORS)
    items = attribute.value if plural and isinstance(attribute.value, list) else [attribute.value]
    field = {T.TENSOR: "t", T.GRAPH: "g", T.SPARSE_TENSOR: "sparse_tensor", T.TENSORS: "tensors", T.GRAPHS: "graphs"}.get(
        attribute.type, "sparse_tensors"
    )
    for index, item in enumerate(items):
        item_path = f"{path}.{field}[{index}]" if plural else f"{path}.{field}"
        if isinstance(item, Tensor):
            yield item.name or fallback, item, item_path, "attribute"
        elif isinstance(item, SparseTensor):
            yield from _sparse_parts(item, item.name or fallback, item_path)
        elif isinstance(item, Graph):
            yield from _graph_tensors(item, item_path)
