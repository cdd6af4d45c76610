"""Graph resolution (docs/import-rules.md §4): from the parsed graph to the graph proper.

Owns: the values of each graph in the stated order (inputs, initializers,
sparse initializers, node outputs; an initializer named like an input without
one is that input's default), scopes and captures of subgraphs, the check of
every reference (naming the node), opsets (the empty domain and `ai.onnx` are
one), value types (declarations, then value_info, then the initializer's own
tensor type), the topological order rule with `nodes_were_reordered`, and
consumers. Function bodies are not resolved.
"""

from __future__ import annotations

import heapq
from typing import Final

from importer.attribute_types import ATTRIBUTE_TYPES, AttributeType, ValueKind, value_items
from importer.errors import ReadFailure, invalid, quote
from importer.graph import (
    GRAPH_INPUT,
    INITIALIZER,
    NODE_OUTPUT,
    SPARSE_INITIALIZER,
    ResolvedGraph,
    ResolvedNode,
    Value,
)
from importer.messages import Graph, Model, Node, OperatorSetId, TensorType
from importer.tensor import SparseTensor, Tensor
from importer.wire import Buffer, find_field

DEFAULT_DOMAIN: Final = ""
_NODE_INPUT_KEY, _NODE_OUTPUT_KEY, _NODE_DOMAIN_KEY = 0x0A, 0x12, 0x3A
_GRAPH_TYPES: Final = frozenset(info.type for info in ATTRIBUTE_TYPES if info.kind is ValueKind.GRAPH)  # GRAPH, GRAPHS


def normalize_domain(domain: str) -> str:
    return DEFAULT_DOMAIN if domain == "ai.onnx" else domain


def collect_opsets(opset_import: list[OperatorSetId]) -> dict[str, int]:
    """Domain -> version; a domain imported twice must have one version."""
    opsets: dict[str, int] = {}
    for index, opset in enumerate(opset_import):
        domain = normalize_domain(opset.domain)
        if domain in opsets and opsets[domain] != opset.version:
            raise invalid(
                f"domain {quote(opset.domain)} imported with versions {opsets[domain]} and {opset.version}",
                opset.offset,
                f"opset_import[{index}]",
            )
        opsets[domain] = opset.version
    return opsets


class GraphResolver:
    """Resolves one model's main graph and, recursively, its subgraphs."""

    def __init__(self, buf: Buffer, opsets: dict[str, int]) -> None:
        self.buf = buf
        self.opsets = opsets
        # the version for each domain as nodes may spell it ("" and "ai.onnx" alike)
        self.domain_versions = dict(opsets)
        if DEFAULT_DOMAIN in opsets:
            self.domain_versions["ai.onnx"] = opsets[DEFAULT_DOMAIN]

    def resolve_model(self, model: Model) -> ResolvedGraph:
        assert model.graph is not None
        return self.resolve(model.graph, "graph", None)

    def resolve(self, proto: Graph, path: str, parent: ResolvedGraph | None) -> ResolvedGraph:
        graph = ResolvedGraph(proto, "ModelProto." + path, parent)
        self._define_values(graph, proto, path)
        reads, in_order = self._resolve_nodes(graph, proto, path)
        for index, info in enumerate(proto.output):
            value = self._lookup(graph, info.name) if info.name else None
            if value is None:
                raise invalid(f"graph output {quote(info.name)} is not defined", info.offset, f"{path}.output[{index}]")
            if value.graph_ref is graph.ref and value.type is None:
                value.type = info.type
            graph.outputs.append(value)
        self._assign_types(graph, proto)
        if not in_order:
            self._order_nodes(graph, reads, path)
        own = graph.ref
        for node in graph.nodes:
            for value in reads[node.index]:
                if value.graph_ref is own:
                    value.consumers.append(node)
        return graph

    # --- values

    def _define_values(self, graph: ResolvedGraph, proto: Graph, path: str) -> None:
        values = graph.values
        for index, info in enumerate(proto.input):
            if not info.name:
                raise invalid("graph input has an empty name", info.offset, f"{path}.input[{index}]")
            if info.name in values:
                raise invalid(f"graph input {quote(info.name)} is listed twice", info.offset, f"{path}.input[{index}]")
            value = Value(info.name, GRAPH_INPUT, graph, info.type)
            values[info.name] = value
            graph.inputs.append(value)
        for index, tensor in enumerate(proto.initializer):
            self._define_initializer(graph, tensor, path, index, INITIALIZER)
        for index, sparse in enumerate(proto.sparse_initializer):
            self._define_initializer(graph, sparse, path, index, SPARSE_INITIALIZER)
        for node_index, node in enumerate(proto.node):
            for output_index, name in enumerate(node.output):
                if not name:
                    continue
                if name in values:
                    raise self._node_error(
                        f"node {_describe(node, node_index)} defines {quote(name)}, which is already defined",
                        node, path, node_index, _NODE_OUTPUT_KEY, "output", output_index,
                    )  # fmt: skip
                values[name] = Value(name, NODE_OUTPUT, graph)

    def _define_initializer(self, graph: ResolvedGraph, tensor: Tensor | SparseTensor, graph_path: str, index: int, kind: str) -> None:
        name = tensor.name
        if not name:
            raise invalid(f"{kind.replace('_', ' ')} has an empty name", tensor.offset, f"{graph_path}.{kind}[{index}]")
        existing = graph.values.get(name)
        if existing is None:
            value = Value(name, kind, graph)
            value.initializer = tensor
            graph.values[name] = value
        elif kind == INITIALIZER and existing.kind == GRAPH_INPUT and existing.initializer is None:
            existing.initializer = tensor  # an input's default value (how IR < 4 lists initializers)
        else:
            raise invalid(f"{kind.replace('_', ' ')} {quote(name)} is already defined", tensor.offset, f"{graph_path}.{kind}[{index}]")

    def _lookup(self, graph: ResolvedGraph, name: str) -> Value | None:
        """Find `name` in this graph or an enclosing one, recording captures."""
        scope: ResolvedGraph | None = graph
        crossed: list[ResolvedGraph] = []
        while scope is not None:
            value = scope.values.get(name)
            if value is not None:
                for inner in crossed:
                    inner.capture(value)
                return value
            crossed.append(scope)
            scope = scope.parent
        return None

    # --- nodes

    def _resolve_nodes(self, graph: ResolvedGraph, proto: Graph, path: str) -> tuple[list[dict[Value, None]], bool]:
        """Resolve every node in file order; return what each node reads, and
        whether the file order is topological (every value read is produced
        by an earlier node)."""
        reads: list[dict[Value, None]] = []
        values = graph.values
        versions = self.domain_versions
        in_order = True
        own = graph.ref
        for index, node in enumerate(proto.node):
            version = versions.get(node.domain)
            if version is None:
                raise self._node_error(
                    f"node {_describe(node, index)} uses domain {quote(node.domain)}, which the model does not import",
                    node, path, index, _NODE_DOMAIN_KEY, "domain", -1,
                )  # fmt: skip
            resolved = ResolvedNode(node, index, graph, version)
            node_reads: dict[Value, None] = {}  # an ordered set (by identity): linear even for 100,000 inputs
            for input_index, name in enumerate(node.input):
                if not name:
                    continue
                value = values.get(name) or self._lookup(graph, name)
                if value is None:
                    raise self._node_error(
                        f"node {_describe(node, index)} reads {quote(name)}, which is not defined",
                        node, path, index, _NODE_INPUT_KEY, "input", input_index,
                    )  # fmt: skip
                node_reads[value] = None
            if node.attribute:
                self._resolve_subgraphs(graph, resolved, node, path, node_reads)
            for value in node_reads:
                if value.producer is None and value.kind == NODE_OUTPUT and value.graph_ref is own:
                    in_order = False  # produced by a later node (or by this one: a cycle)
            for name in node.output:
                if name:
                    values[name].producer = resolved
            graph.nodes.append(resolved)
            reads.append(node_reads)
        return reads, in_order

    def _resolve_subgraphs(
        self, graph: ResolvedGraph, resolved: ResolvedNode, node: Node, path: str, node_reads: dict[Value, None]
    ) -> None:
        subgraphs = []
        for attr_index, attribute in enumerate(node.attribute):
            for sub_path, subgraph in _subgraphs_of(attribute.type, attribute.value):
                full = f"{path}.node[{resolved.index}].attribute[{attr_index}].{sub_path}"
                resolved_sub = self.resolve(subgraph, full, graph)
                subgraphs.append((attribute.name, resolved_sub))
                for captured in resolved_sub.captures:
                    node_reads[captured] = None
        if subgraphs:
            resolved.subgraphs = subgraphs

    def _node_error(self, message: str, node: Node, path: str, index: int, key: int, field: str, field_index: int) -> ReadFailure:
        offset = find_field(self.buf, node.offset, key, max(field_index, 0))
        segment = f"{field}[{field_index}]" if field_index >= 0 else field
        if offset is None:
            return invalid(message, node.offset, f"{path}.node[{index}]")
        return invalid(message, offset, f"{path}.node[{index}].{segment}")

    # --- types

    def _assign_types(self, graph: ResolvedGraph, proto: Graph) -> None:
        for info in proto.value_info:
            value = graph.values.get(info.name)
            if value is not None and value.type is None:
                value.type = info.type
        for value in graph.values.values():
            if value.type is None and value.initializer is not None:
                tensor = value.initializer
                if isinstance(tensor, SparseTensor):
                    value.type = TensorType(int(tensor.values.data_type), tuple(tensor.dims), sparse=True)
                else:
                    value.type = TensorType(int(tensor.data_type), tuple(tensor.dims))

    # --- order

    def _order_nodes(self, graph: ResolvedGraph, reads: list[dict[Value, None]], path: str) -> None:
        """Sort nodes that are not in topological order: repeatedly take the
        ready node with the smallest file index (Kahn's algorithm, min-heap)."""
        nodes = graph.nodes
        own = graph.ref
        waiting = [0] * len(nodes)
        dependents: list[list[int]] = [[] for _ in nodes]
        producers_of: list[set[int]] = []
        for node in nodes:
            producers = {v.producer.index for v in reads[node.index] if v.producer is not None and v.graph_ref is own}
            producers_of.append(producers)
            waiting[node.index] = len(producers)
            for producer in producers:
                dependents[producer].append(node.index)
        ready = [index for index, count in enumerate(waiting) if count == 0]
        heapq.heapify(ready)
        order: list[int] = []
        while ready:
            index = heapq.heappop(ready)
            order.append(index)
            for dependent in dependents[index]:
                waiting[dependent] -= 1
                if waiting[dependent] == 0:
                    heapq.heappush(ready, dependent)
        if len(order) < len(nodes):
            stuck = _node_on_a_cycle(waiting, producers_of)
            stuck_node = nodes[stuck].proto
            raise invalid(f"node {_describe(stuck_node, stuck)} is part of a cycle", stuck_node.offset, f"{path}.node[{stuck}]")
        graph.nodes = [nodes[index] for index in order]
        graph.nodes_were_reordered = True


def _node_on_a_cycle(waiting: list[int], producers_of: list[set[int]]) -> int:
    """The smallest file index on a cycle among the nodes left unsorted.

    Walk from the first unsorted node to an unsorted producer, again and
    again: the walk must come back to a node it has seen, and the nodes from
    there on form a cycle (the first unsorted node may only wait on one).
    """
    index = min(i for i, count in enumerate(waiting) if count > 0)
    seen: dict[int, int] = {}
    while index not in seen:
        seen[index] = len(seen)
        index = min(p for p in producers_of[index] if waiting[p] > 0)
    cycle_start = seen[index]
    return min(node for node, step in seen.items() if step >= cycle_start)


def _subgraphs_of(attr_type: AttributeType, value: object) -> list[tuple[str, Graph]]:
    """The graphs of a GRAPH or GRAPHS attribute, each with its field path segment."""
    if attr_type not in _GRAPH_TYPES:
        return []
    return [(segment, item) for segment, item in value_items(attr_type, value) if isinstance(item, Graph)]


def _describe(node: Node, index: int) -> str:
    name = f" {quote(node.name)}" if node.name else ""
    return f"{index}{name} ({quote(node.op_type)})"
