"""The resolved graph: values, nodes in resolved order, scopes and captures.

Owns `Value`, `ResolvedNode`, `ResolvedGraph` and `OnnxModel` (the object the
public API returns). They are built by `importer.resolve` on top of the parsed
messages in `importer.messages`, which they keep as `proto`.

References point down the model (a model holds its graph, a graph its values,
nodes and, through its nodes, its subgraphs); the ones that point back up (a
value's or node's `graph`, a subgraph's `parent`) are weak. So a resolved
graph holds no reference cycle, and a dropped model is freed at once by
reference counting instead of waiting for (and costing) the cyclic garbage
collector: on a process that imports thousands of small models that is about
a third of the import time. Keep the model (or its `graph`) while using its
values and nodes: reaching a graph that was freed raises `ReferenceError`.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Final

from mypy_extensions import mypyc_attr

from importer.data_owner import DataOwner
from importer.messages import Function, Graph, Model, Node, TypeProto
from importer.tensor import SparseTensor, Tensor

# Value kinds
GRAPH_INPUT: Final = "input"
INITIALIZER: Final = "initializer"
SPARSE_INITIALIZER: Final = "sparse_initializer"
NODE_OUTPUT: Final = "node_output"


class Value:
    """A named value of one graph.

    `initializer` is the tensor of an initializer (or sparse initializer), or
    the default value of a graph input that has one. `consumers` are the
    nodes of this value's own graph that read it, directly or through their
    subgraphs, in resolved order, each once.
    """

    __slots__ = ("name", "kind", "type", "producer", "initializer", "graph_ref", "consumers")

    def __init__(self, name: str, kind: str, graph: ResolvedGraph, value_type: TypeProto | None = None) -> None:
        self.name = name
        self.kind = kind
        self.type = value_type
        self.producer: ResolvedNode | None = None
        self.initializer: Tensor | SparseTensor | None = None
        self.graph_ref = graph.ref  # the graph's one weak reference to itself, shared
        self.consumers: list[ResolvedNode] = []

    @property
    def graph(self) -> ResolvedGraph:
        """The graph this value belongs to."""
        return _alive(self.graph_ref)

    def __repr__(self) -> str:
        return f"Value({self.name!r}, {self.kind})"


class ResolvedNode:
    """A node with its opset version, input and output values and subgraphs.

    `index` is its position in the file; `inputs`/`outputs` hold None for an
    omitted optional (empty name). They are computed from the node's names and
    its graph's scopes when asked (resolution has checked every name), rather
    than stored: two lists fewer per node of a 200,000-node model. `subgraphs`
    pairs each attribute name with the subgraph it holds.
    """

    __slots__ = ("proto", "index", "graph_ref", "opset_version", "subgraphs")

    def __init__(self, proto: Node, index: int, graph: ResolvedGraph, opset_version: int) -> None:
        self.proto = proto
        self.index = index
        self.graph_ref = graph.ref
        self.opset_version = opset_version
        self.subgraphs: Sequence[tuple[str, ResolvedGraph]] = ()  # shared when there are none

    @property
    def graph(self) -> ResolvedGraph:
        """The graph this node belongs to."""
        return _alive(self.graph_ref)

    @property
    def inputs(self) -> list[Value | None]:
        graph = self.graph
        return [graph.lookup(name) if name else None for name in self.proto.input]

    @property
    def outputs(self) -> list[Value | None]:
        values = self.graph.values
        return [values[name] if name else None for name in self.proto.output]

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    @property
    def domain(self) -> str:
        return self.proto.domain

    def __repr__(self) -> str:
        return f"ResolvedNode({self.index}, {self.proto.op_type!r}, name={self.proto.name!r})"


# A plain Python class even in the compiled build: the compiler's native
# classes cannot be the target of a weak reference.
@mypyc_attr(native_class=False)
class ResolvedGraph:
    """A graph after resolution (docs/import-rules.md §4).

    `nodes` are in resolved (topological) order; `nodes_were_reordered` says
    whether that differs from the file. `captures` are the outer values this
    graph or its own subgraphs read, in first-read order. `path` is the field
    path of the GraphProto (`ModelProto.graph`, `...node[2].attribute[0].g`).
    `ref` is the graph's weak reference to itself, which its values, its
    nodes and its subgraphs share.
    """

    __slots__ = (
        "proto",
        "path",
        "parent_ref",
        "ref",
        "values",
        "inputs",
        "outputs",
        "nodes",
        "nodes_were_reordered",
        "_captures",
        "__weakref__",
    )

    def __init__(self, proto: Graph, path: str, parent: ResolvedGraph | None) -> None:
        self.proto = proto
        self.path = path
        self.ref: weakref.ReferenceType[ResolvedGraph] = weakref.ref(self)
        self.parent_ref = parent.ref if parent is not None else None
        self.values: dict[str, Value] = {}
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[ResolvedNode] = []
        self.nodes_were_reordered = False
        self._captures: dict[str, None] = {}  # names, an ordered set: the values are the parent's

    @property
    def parent(self) -> ResolvedGraph | None:
        """The enclosing graph (None for the main graph)."""
        return _alive(self.parent_ref) if self.parent_ref is not None else None

    @property
    def captures(self) -> list[Value]:
        if not self._captures:
            return []
        parent = self.parent
        assert parent is not None
        values = []
        for name in self._captures:
            value = parent.lookup(name)
            assert value is not None  # resolution found it there
            values.append(value)
        return values

    def lookup(self, name: str) -> Value | None:
        """The value `name` means here: this graph's own, else an enclosing one's."""
        scope: ResolvedGraph | None = self
        while scope is not None:
            value = scope.values.get(name)
            if value is not None:
                return value
            scope = scope.parent
        return None

    def capture(self, value: Value) -> None:
        """Record that this graph (or a subgraph of it) reads outer `value`
        (kept by name: the enclosing graphs hold the value itself)."""
        self._captures[value.name] = None

    @property
    def name(self) -> str:
        return self.proto.name

    def initializers(self) -> list[Tensor]:
        return self.proto.initializer

    def subgraphs(self) -> Iterator[ResolvedGraph]:
        """Every subgraph below this graph, depth first."""
        for node in self.nodes:
            for _, subgraph in node.subgraphs:
                yield subgraph
                yield from subgraph.subgraphs()


def _alive(ref: weakref.ReferenceType[ResolvedGraph]) -> ResolvedGraph:
    graph = ref()
    if graph is None:
        raise ReferenceError("the graph was freed: keep the model (or its graph) while using its values and nodes")
    return graph


class OnnxModel:
    """An imported model: the file as read (`proto`) and the resolved graph
    (`graph`; a model loaded with `resolve=False` resolves it when first
    asked for it, raising ModelImportError there if it cannot be).

    Use as a context manager, or call `close()`: it releases the model file's
    mapping and every external data mapping; tensor data read afterwards
    raises `ModelImportError` (kind Io).
    """

    __slots__ = ("proto", "_graph", "_resolver", "opsets", "input_name", "owners")

    def __init__(
        self,
        proto: Model,
        graph: ResolvedGraph | None,
        opsets: dict[str, int],
        input_name: str,
        owners: list[DataOwner],
        resolver: Callable[[], ResolvedGraph] | None = None,
    ) -> None:
        self.proto = proto
        self._graph = graph
        self._resolver = resolver  # when `graph` is None: resolves it
        self.opsets = opsets
        self.input_name = input_name
        self.owners = owners

    @property
    def graph(self) -> ResolvedGraph:
        graph = self._graph
        if graph is None:
            assert self._resolver is not None
            graph = self._graph = self._resolver()
            self._resolver = None
        return graph

    @property
    def ir_version(self) -> int:
        assert self.proto.ir_version is not None
        return self.proto.ir_version

    @property
    def functions(self) -> list[Function]:
        return self.proto.functions

    def close(self) -> None:
        for owner in self.owners:
            owner.close()

    def __enter__(self) -> OnnxModel:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()
