"""Every tensor of a model, with where it is: field path, role and holder.

Owns `tensor_places`: initializers, sparse initializer parts, and the tensors
of attributes (those whose items are tensors or sparse tensors, and those of
the subgraphs in graph attributes; see `importer.attribute_types`), in the
main graph, the graphs of `training_info` and function bodies, in file
order, depth first. Used to name tensors (the service's catalogue)
and to place errors about them (external data).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from importer.attribute_types import TYPE_INFO, ValueKind, value_items
from importer.messages import Attribute, Graph, Model, Node
from importer.tensor import SparseTensor, Tensor

INITIALIZER: Final = "initializer"
SPARSE_VALUES: Final = "sparse_values"
SPARSE_INDICES: Final = "sparse_indices"
ATTRIBUTE: Final = "attribute"

# The kinds of attribute item that are, or may hold, tensors.
_HOLDS_TENSORS: Final = frozenset({ValueKind.TENSOR, ValueKind.SPARSE_TENSOR, ValueKind.GRAPH})


@dataclass(frozen=True, slots=True)
class TensorPlace:
    """One tensor and its place. `sparse`: the sparse tensor it is a part of.
    `holder`: for a tensor in an attribute, `<node name or op_type>.<attribute name>`."""

    tensor: Tensor
    field_path: str
    role: str
    sparse: SparseTensor | None = None
    holder: str = ""


def tensor_places(model: Model, root: str = "ModelProto") -> Iterator[TensorPlace]:
    if model.graph is not None:
        yield from _graph(model.graph, f"{root}.graph")
    for index, training in enumerate(model.training_info):  # field 20, before the functions (25)
        for field, graph in (("initialization", training.initialization), ("algorithm", training.algorithm)):
            if graph is not None:
                yield from _graph(graph, f"{root}.training_info[{index}].{field}")
    for index, function in enumerate(model.functions):
        yield from _nodes(function.node, f"{root}.functions[{index}]")


def _graph(graph: Graph, path: str) -> Iterator[TensorPlace]:
    for index, tensor in enumerate(graph.initializer):
        yield TensorPlace(tensor, f"{path}.initializer[{index}]", INITIALIZER)
    for index, sparse in enumerate(graph.sparse_initializer):
        yield from _sparse_parts(sparse, f"{path}.sparse_initializer[{index}]", "")
    yield from _nodes(graph.node, path)


def _sparse_parts(sparse: SparseTensor, path: str, holder: str) -> Iterator[TensorPlace]:
    yield TensorPlace(sparse.values, f"{path}.values", SPARSE_VALUES, sparse, holder)
    yield TensorPlace(sparse.indices, f"{path}.indices", SPARSE_INDICES, sparse, holder)


def _nodes(nodes: Sequence[Node], path: str) -> Iterator[TensorPlace]:
    for n_index, node in enumerate(nodes):
        for a_index, attribute in enumerate(node.attribute):
            yield from _attribute(node, attribute, f"{path}.node[{n_index}].attribute[{a_index}]")


def _attribute(node: Node, attribute: Attribute, path: str) -> Iterator[TensorPlace]:
    info = TYPE_INFO.get(attribute.type)
    if info is None or info.kind not in _HOLDS_TENSORS:
        return
    holder = f"{node.name or node.op_type}.{attribute.name}"
    for segment, item in value_items(attribute.type, attribute.value):
        item_path = f"{path}.{segment}"
        if isinstance(item, Tensor):
            yield TensorPlace(item, item_path, ATTRIBUTE, None, holder)
        elif isinstance(item, SparseTensor):
            yield from _sparse_parts(item, item_path, holder)
        elif isinstance(item, Graph):
            yield from _graph(item, item_path)
