"""Every tensor of a model, with where it is: field path, role and holder.

Owns `tensor_places`: initializers, sparse initializer parts, and the tensors
of attributes (TENSOR, TENSORS, SPARSE_TENSOR, SPARSE_TENSORS, and those of
the subgraphs in GRAPH and GRAPHS), in the main graph and in function bodies,
in file order, depth first. Used to name tensors (the service's catalogue)
and to place errors about them (external data).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from importer.messages import Attribute, AttributeType, Graph, Model, Node
from importer.tensor import SparseTensor, Tensor

INITIALIZER = "initializer"
SPARSE_VALUES = "sparse_values"
SPARSE_INDICES = "sparse_indices"
ATTRIBUTE = "attribute"

_FIELDS = {
    AttributeType.TENSOR: "t",
    AttributeType.GRAPH: "g",
    AttributeType.SPARSE_TENSOR: "sparse_tensor",
    AttributeType.TENSORS: "tensors",
    AttributeType.GRAPHS: "graphs",
    AttributeType.SPARSE_TENSORS: "sparse_tensors",
}
_PLURAL = frozenset({AttributeType.TENSORS, AttributeType.GRAPHS, AttributeType.SPARSE_TENSORS})


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
    field = _FIELDS.get(attribute.type)
    if field is None:
        return
    plural = attribute.type in _PLURAL
    items = attribute.value if plural and isinstance(attribute.value, list) else [attribute.value]
    holder = f"{node.name or node.op_type}.{attribute.name}"
    for index, item in enumerate(items):
        item_path = f"{path}.{field}[{index}]" if plural else f"{path}.{field}"
        if isinstance(item, Tensor):
            yield TensorPlace(item, item_path, ATTRIBUTE, None, holder)
        elif isinstance(item, SparseTensor):
            yield from _sparse_parts(item, item_path, holder)
        elif isinstance(item, Graph):
            yield from _graph(item, item_path)
