"""How many nodes inlining the model-local functions would make, counted without inlining.

Owns `function_expansion(model, max_nodes)`. onnx's shape inference and
onnxruntime both expand each call of a model-local function into its body,
and a body's calls into theirs: 41 functions of two calls each, 3 KB, are
2^40 nodes once expanded. This counts them instead, each function once:

    count(f) = the sum over f's nodes (and the nodes of their subgraphs) of
               count(g) for a call of a local function g, else 1

and the model's expansion is the sum of count(callee) over the calls of the
main graph and its subgraphs (the nodes inlining adds; a graph without calls
expands to nothing). A function that calls itself, directly or through
others, expands without end. A function defined twice counts as its larger
definition. Functions no graph calls are not counted (nothing inlines them).

The walk is linear in the size of the model: each function body is read
once, and the functions are followed with a stack of our own (a chain of
100,000 functions needs no Python recursion); only subgraphs recurse, as
deep as the importer's nesting bound lets them be.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from importer.attribute_types import AttributeType
from importer.graph import OnnxModel
from importer.messages import Function, Graph, Node
from importer.resolve import normalize_domain

FunctionKey = tuple[str, str, str]  # (domain, normalized; name; overload)
UNBOUNDED: Final = -1  # the count of a function that calls itself: it expands without end


@dataclass(frozen=True, slots=True)
class Body:
    """A function body's nodes as the count sees them: `plain` nodes that call
    no local function, and the `calls` of local functions, subgraphs included."""

    plain: int
    calls: tuple[FunctionKey, ...]


@dataclass(frozen=True, slots=True)
class Expansion:
    """What inlining the model's calls would make. `nodes`: the nodes all its
    calls expand to (UNBOUNDED when one never ends); `node`, `field_path`:
    the outermost call at which the running total first passes `max_nodes`
    (None when it does not), `callee` its function and `callee_nodes` what
    that call alone expands to (UNBOUNDED: without end)."""

    nodes: int
    node: Node | None = None
    field_path: str = ""
    callee: FunctionKey | None = None
    callee_nodes: int = 0

    @property
    def too_large(self) -> bool:
        return self.node is not None


def function_key(node: Node) -> FunctionKey:
    return normalize_domain(node.domain), node.op_type, node.overload


def function_expansion(model: OnnxModel, max_nodes: int) -> Expansion:
    """The expansion of `model`'s calls, and where it first passes `max_nodes`."""
    counter = _Counter(model.functions)
    if not counter.bodies:
        return Expansion(0)
    total = 0
    crossing: tuple[Node, str, FunctionKey, int] | None = None
    main = model.proto.graph  # as read: the count needs no resolved graph
    for path, node in _calls_in(main.node if main is not None else [], "ModelProto.graph", counter.bodies):
        key = function_key(node)
        count = counter.count(key)
        total = UNBOUNDED if UNBOUNDED in (total, count) else total + count
        if crossing is None and (total == UNBOUNDED or total > max_nodes):
            crossing = node, path, key, count
    return Expansion(total) if crossing is None else Expansion(total, *crossing)


def _calls_in(nodes: Sequence[Node], path: str, functions: dict[FunctionKey, list[Body]]) -> Iterator[tuple[str, Node]]:
    """The calls of local functions among `nodes` and in their subgraphs, in file order, with their field paths."""
    for index, node in enumerate(nodes):
        node_path = f"{path}.node[{index}]"
        if function_key(node) in functions:
            yield node_path, node
        for graph_path, graph in _subgraphs(node, node_path):
            yield from _calls_in(graph.node, graph_path, functions)


def _subgraphs(node: Node, path: str) -> Iterator[tuple[str, Graph]]:
    for index, attribute in enumerate(node.attribute):
        if attribute.type is AttributeType.GRAPH and isinstance(attribute.value, Graph):
            yield f"{path}.attribute[{index}].g", attribute.value
        elif attribute.type is AttributeType.GRAPHS and isinstance(attribute.value, list):
            for g_index, item in enumerate(attribute.value):
                if isinstance(item, Graph):
                    yield f"{path}.attribute[{index}].graphs[{g_index}]", item


class _Counter:
    """count(f) for every function key, memoized; cycles are UNBOUNDED."""

    def __init__(self, functions: Sequence[Function]) -> None:
        keys = [(normalize_domain(function.domain), function.name, function.overload) for function in functions]
        self.bodies: dict[FunctionKey, list[Body]] = {key: [] for key in keys}
        for key, function in zip(keys, functions, strict=True):
            self.bodies[key].append(self._body(function.node))
        self.counts: dict[FunctionKey, int] = {}

    def _body(self, nodes: Sequence[Node]) -> Body:
        plain = 0
        calls: list[FunctionKey] = []
        pending: list[Sequence[Node]] = [nodes]
        while pending:
            for node in pending.pop():
                key = function_key(node)
                if key in self.bodies:
                    calls.append(key)
                else:
                    plain += 1
                pending.extend(graph.node for _, graph in _subgraphs(node, ""))
        return Body(plain, tuple(calls))

    def count(self, root: FunctionKey) -> int:
        """The nodes one call of `root` expands to (UNBOUNDED: without end)."""
        counts = self.counts
        if root in counts:
            return counts[root]
        # A frame: the function, the calls of its definitions (flattened), the next to look at, and whether a call
        # of a function still on the stack (a cycle) was met.
        on_stack: set[FunctionKey] = {root}
        stack: list[tuple[FunctionKey, list[FunctionKey], list[int], list[bool]]] = [(root, self._calls(root), [0], [False])]
        while stack:
            key, calls, position, cyclic = stack[-1]
            while position[0] < len(calls):
                callee = calls[position[0]]
                position[0] += 1
                if callee in counts:
                    continue
                if callee in on_stack:
                    cyclic[0] = True
                    continue
                on_stack.add(callee)
                stack.append((callee, self._calls(callee), [0], [False]))
                break
            else:
                stack.pop()
                on_stack.discard(key)
                counts[key] = UNBOUNDED if cyclic[0] else self._finished(key)
        return counts[root]

    def _calls(self, key: FunctionKey) -> list[FunctionKey]:
        return [callee for body in self.bodies[key] for callee in body.calls]

    def _finished(self, key: FunctionKey) -> int:
        """count(key) once every callee is counted: its largest definition."""
        largest = 0
        for body in self.bodies[key]:
            nodes = body.plain
            for callee in body.calls:
                count = self.counts[callee]
                if count == UNBOUNDED:
                    return UNBOUNDED
                nodes += count
            largest = max(largest, nodes)
        return largest
