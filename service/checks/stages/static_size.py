"""Output sizes that constants fix, estimated before anything runs.

Owns `estimate_statics(model, max_bytes)`: every node output (in the
main graph, its subgraphs and the model-local functions' bodies) whose
element count the model's constants and static shapes fix, and which holds
more than `max_bytes` while its node makes more elements than it reads: the
amplifiers of a small file into a large allocation (`ConstantOfShape`,
`Range`, `Expand`, `Tile`, `Resize`/`Upsample`, `Pad`, `OneHot`,
`RandomNormal`/`RandomUniform`, `Reshape` to a constant shape, broadcasting
element-wise ops and `MatMul`/`Gemm` on static shapes, a `Loop`'s scan
outputs over a constant trip count), and sparse tensors (a sparse
initializer, a `Constant`'s `sparse_value`) whose dense form is that large,
since runtimes densify them; and every `Loop` whose trip count is a
constant (or absent), with whether anything can end it sooner (`LoopTrips`).

How: one walk in resolved order (function bodies in file order), keeping
per value what `service.checks.stages.size_values` knows of it: its
element type, its shape where known (from the op's rule in
`service.checks.stages.size_rules`, else its declared type) and,
for small numeric tensors only, its values. Sizes are Python ints; nothing
the model asks for is ever allocated. Where an input's shape is unknown, the
estimate is a lower bound (unknown dimensions taken as 1, or 0 for `Pad`),
reported as "at least". The walk's own cost is kept per node small: an op
that keeps its input's shape (most nodes of most models) costs one lookup
and one store, and an op without a rule only its declared outputs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Final

from importer.attribute_types import AttributeType
from importer.element_types import DataType, bits_per_element
from importer.graph import OnnxModel, ResolvedGraph
from importer.messages import Graph, Node, TypeProto
from importer.resolve import normalize_domain
from importer.tensor import SparseTensor
from service.checks.stages.size_rules import BOOL_RESULT, RULES, SAME_SHAPE
from service.checks.stages.size_values import (
    BOOL,
    Folder,
    Info,
    Out,
    declared_info,
    find_attribute,
    largest_input,
    static_shape,
)


@dataclass(frozen=True, slots=True)
class Oversized:
    """One output (or sparse tensor) past the bound, with its place.
    `node` is None for a sparse initializer; `output` is the output's name
    (the tensor's for a sparse initializer)."""

    field_path: str
    offset: int
    node: Node | None
    output: str
    op: str
    elem: int | None
    elements: int
    bytes: int
    at_least: bool
    what: str  # how it comes about, for the message ("densified from a sparse tensor"); may be ""


@dataclass(frozen=True, slots=True)
class LoopTrips:
    """A `Loop` (of the default domain) whose trip count M is a constant, or
    absent, with its place. `trips` is None when the Loop has no M (only its
    condition ends it). `runs_every_trip`: nothing ends it sooner, since its
    condition input is absent or a constant true, and its body's condition
    output is its condition input (directly or through `Identity` nodes) or
    a constant true."""

    field_path: str
    offset: int
    node: Node
    trips: int | None
    runs_every_trip: bool


@dataclass(frozen=True, slots=True)
class Statics:
    """What the estimate finds, each list in file order."""

    outputs: list[Oversized]  # past the bound
    loops: list[LoopTrips]  # every Loop of a constant (or no) trip count


def byte_size(elements: int, elem: int | None) -> int:
    """Bytes of `elements` elements of type `elem` (1 per element when the
    type is unknown or has no fixed width: a lower bound)."""
    bits = _BITS.get(elem, 0) if elem is not None else 0
    return (elements * bits + 7) // 8 if bits else elements


def estimate_statics(model: OnnxModel, max_bytes: int) -> Statics:
    """Every output whose constants fix a size past `max_bytes`, and every
    Loop of a constant (or no) trip count (see the module's docstring)."""
    return _Estimator(model, max_bytes).run()


_BITS: Final = {int(data_type): bits_per_element(data_type) for data_type in DataType}
_DEFAULT_DOMAINS: Final = frozenset({"", "ai.onnx"})
# Ops whose first output is their first input's shape and type and carries no values: never past their input.
_KEEPS_SHAPE: Final = SAME_SHAPE - {"Identity"}
_INDEX: Final = attrgetter("index")
_ATTRIBUTE: Final = attrgetter("attribute")
_TYPE: Final = attrgetter("type")
_GRAPH_ATTRIBUTES: Final = frozenset({AttributeType.GRAPH, AttributeType.GRAPHS})


class _Scope:
    """The values of one graph, and the enclosing graph's (names in a
    subgraph may be outer values)."""

    __slots__ = ("infos", "declared", "parent")

    def __init__(self, declared: dict[str, TypeProto | None], parent: _Scope | None) -> None:
        self.infos: dict[str, Info] = {}
        self.declared = declared
        self.parent = parent

    def lookup(self, name: str) -> Info | None:
        scope: _Scope | None = self
        while scope is not None:
            info = scope.infos.get(name)
            if info is not None:
                return info
            if name in scope.declared:
                return declared_info(scope.declared[name])
            scope = scope.parent
        return None


class _Estimator:
    """One model's walk. `found` lists the outputs past `max_bytes`, `loops` the Loops of a constant (or no) trip count."""

    def __init__(self, model: OnnxModel, max_bytes: int) -> None:
        self.model = model
        self.max_bytes = max_bytes
        self.found: list[Oversized] = []
        self.loops: list[LoopTrips] = []
        self.folder = Folder(model.opsets.get("", 1))
        self.resolved: dict[str, ResolvedGraph] = {model.graph.path: model.graph}
        for subgraph in model.graph.subgraphs():
            self.resolved[subgraph.path] = subgraph
        self.functions = {(normalize_domain(f.domain), f.name, f.overload) for f in model.functions}

    def run(self) -> Statics:
        main = self.model.graph
        self._graph(main.proto, main.path, None)
        for index, function in enumerate(self.model.functions):
            folder = self.folder
            folder.opset = next((entry.version for entry in function.opset_import if normalize_domain(entry.domain) == ""), folder.opset)
            scope = _Scope({name: None for name in function.input}, None)
            self._nodes(function.node, range(len(function.node)), f"ModelProto.functions[{index}]", scope)
        self.found.sort(key=lambda item: item.offset)
        self.loops.sort(key=lambda item: item.offset)
        return Statics(self.found, self.loops)

    # --- graphs

    def _graph(self, proto: Graph, path: str, parent: _Scope | None) -> _Scope:
        declared: dict[str, TypeProto | None] = {}
        for info in (*proto.value_info, *proto.output, *proto.input):  # inputs last: their declaration wins
            declared[info.name] = info.type
        scope = _Scope(declared, parent)
        for tensor in proto.initializer:  # an input's default too: a run that does not feed the input uses it
            scope.infos[tensor.name] = Info(int(tensor.data_type), tuple(tensor.dims), tensor)
        for index, sparse in enumerate(proto.sparse_initializer):
            self._sparse_initializer(sparse, f"{path}.sparse_initializer[{index}]")
            scope.infos[sparse.name] = Info(int(sparse.values.data_type), tuple(sparse.dims))
        resolved = self.resolved.get(path)
        order = list(map(_INDEX, resolved.nodes)) if resolved is not None and resolved.proto is proto else range(len(proto.node))
        self._nodes(proto.node, order, path, scope)
        return scope

    def _sparse_initializer(self, sparse: SparseTensor, field_path: str) -> None:
        elem = int(sparse.values.data_type)
        dims = tuple(sparse.dims)
        elements = math.prod(dims) if all(dim >= 0 for dim in dims) else 0
        size = byte_size(elements, elem)
        if size > self.max_bytes:
            self.found.append(
                Oversized(field_path, sparse.offset, None, sparse.name, "sparse initializer", elem, elements, size, False, "")
            )

    def _bodies(self, node: Node, node_path: str, scope: _Scope) -> dict[str, _Scope]:
        """Walk the node's subgraphs (before the node itself); the scopes of its GRAPH attributes, by name."""
        bodies: dict[str, _Scope] = {}
        for a_index, attribute in enumerate(node.attribute):
            if attribute.type is AttributeType.GRAPH and isinstance(attribute.value, Graph):
                bodies[attribute.name] = self._graph(attribute.value, f"{node_path}.attribute[{a_index}].g", scope)
            elif attribute.type is AttributeType.GRAPHS and isinstance(attribute.value, list):
                for g_index, item in enumerate(attribute.value):
                    if isinstance(item, Graph):
                        self._graph(item, f"{node_path}.attribute[{a_index}].graphs[{g_index}]", scope)
        return bodies

    # --- nodes

    def _nodes(self, nodes: Sequence[Node], order: Sequence[int], path: str, scope: _Scope) -> None:
        infos = scope.infos
        lookup = scope.lookup
        functions = self.functions
        subgraphs = not _GRAPH_ATTRIBUTES.isdisjoint(map(_TYPE, chain.from_iterable(filter(None, map(_ATTRIBUTE, nodes)))))
        for index in order:
            node = nodes[index]
            bodies = self._bodies(node, f"{path}.node[{index}]", scope) if subgraphs and node.attribute else _NO_BODIES
            op = node.op_type
            outputs = node.output
            if node.domain not in _DEFAULT_DOMAINS or (functions and ("", op, node.overload) in functions):
                # another domain's op, or a call of a model-local function (its body is walked on its own)
                self._store(node, path, index, scope, [], [])
                continue
            if op in _KEEPS_SHAPE:  # the common case, without the general rule's lists
                first_name = node.input[0] if node.input else ""
                first = (infos.get(first_name) or lookup(first_name)) if first_name else None
                if first is not None and first.shape is not None and len(outputs) == 1 and outputs[0]:
                    elem = BOOL if op in BOOL_RESULT else first.elem
                    same = elem == first.elem and first.tensor is None and first.array is None
                    infos[outputs[0]] = first if same else Info(elem, first.shape)
                    continue
            inputs = [lookup(name) if name else None for name in node.input]
            if op == "Loop":
                self._note_loop(node, f"{path}.node[{index}]", inputs, bodies)
                outs = self._loop(node, inputs, bodies)
            else:
                rule = RULES.get(op)
                outs = rule(self.folder, node, inputs) if rule is not None else []
            self._store(node, path, index, scope, inputs, outs)

    def _store(self, node: Node, path: str, index: int, scope: _Scope, inputs: list[Info | None], outs: list[Out | None]) -> None:
        """Keep what the rule found of each output (else its declared type), and flag an output made past the bound."""
        infos = scope.infos
        for position, name in enumerate(node.output):
            out = outs[position] if position < len(outs) else None
            if not name:
                continue
            if out is None or out.shape is None:
                fallback = scope.lookup(name)  # its declared type, when there is one
                if fallback is not None:
                    infos[name] = fallback if out is None or out.elem is None else Info(out.elem, fallback.shape)
                elif out is not None:
                    infos[name] = Info(out.elem, None)
                continue
            static = static_shape(out.shape)
            if static is None:
                infos[name] = Info(out.elem, out.shape)
                continue
            elements = math.prod(static)
            size = byte_size(elements, out.elem) if elements * 16 > self.max_bytes else 0  # no element is wider than 16 bytes
            if out.flag and size > self.max_bytes and elements > largest_input(inputs):  # made here, not passed on
                self.found.append(
                    Oversized(
                        f"{path}.node[{index}]", node.offset, node, name, node.op_type, out.elem, elements, size, out.at_least, out.what
                    )
                )
            if out.at_least:
                infos[name] = Info(out.elem, None)  # a lower bound is not the shape
                continue
            infos[name] = Info(out.elem, static, array=self.folder.keep(out.array, static))

    def _loop(self, node: Node, inputs: list[Info | None], bodies: dict[str, _Scope]) -> list[Out | None]:
        """A Loop's scan outputs: the trip count (a constant) times what each
        iteration adds, when the body fixes that statically."""
        body = bodies.get("body")
        attribute = find_attribute(node, "body")
        if body is None or attribute is None or not isinstance(attribute.value, Graph):
            return []
        trips = self.folder.scalar(inputs[0]) if inputs and inputs[0] is not None else None
        if not isinstance(trips, int) or trips < 0:
            return []
        outputs = attribute.value.output
        carried = len(node.input) - 2
        outs: list[Out | None] = [None] * max(carried, 0)
        for info in outputs[1 + carried :]:
            found = body.lookup(info.name)
            static = static_shape(found.shape) if found is not None else None
            outs.append(None if found is None or static is None else Out(found.elem, (trips, *static), what=f"over {trips} iterations"))
        return outs

    def _note_loop(self, node: Node, node_path: str, inputs: list[Info | None], bodies: dict[str, _Scope]) -> None:
        """Keep a Loop whose trip count is a constant (or absent), with whether anything can end it sooner."""
        trips = None
        if node.input and node.input[0]:
            count = self.folder.scalar(inputs[0])
            if not isinstance(count, int):
                return  # a trip count the estimate cannot tell
            trips = count
        has_condition = len(node.input) > 1 and bool(node.input[1])
        starts_true = not has_condition or _is_true(self.folder.scalar(inputs[1]))
        attribute = find_attribute(node, "body")
        body = bodies.get("body")
        keeps_true = (
            body is not None
            and attribute is not None
            and isinstance(attribute.value, Graph)
            and self._keeps_its_condition(attribute.value, body)
        )
        self.loops.append(LoopTrips(node_path, node.offset, node, trips, starts_true and keeps_true))

    def _keeps_its_condition(self, body: Graph, scope: _Scope) -> bool:
        """Whether a Loop body's condition output is its condition input, directly
        or through `Identity` nodes, or a constant true (in `scope`, the body's)."""
        if len(body.input) < 2 or not body.output:
            return False
        condition_in = body.input[1].name
        producers = {output: node for node in body.node for output in node.output if output}
        name = body.output[0].name
        for _ in range(len(body.node) + 1):  # an Identity chain is no longer than the body
            if name == condition_in:
                return True
            producer = producers.get(name)
            if producer is None or producer.op_type != "Identity" or producer.domain not in _DEFAULT_DOMAINS or not producer.input:
                break
            name = producer.input[0]
        return _is_true(self.folder.scalar(scope.lookup(name)))


def _is_true(value: float | int | None) -> bool:
    """Whether a folded scalar is a constant true (a bool's True, or any nonzero number)."""
    return value is not None and value != 0


_NO_BODIES: Final[dict[str, _Scope]] = {}
