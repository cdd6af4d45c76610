"""The resolved graph: values, nodes in resolved order, scopes and captures.

Owns `Value`, `ResolvedNode`, `ResolvedGraph` and `OnnxModel` (the object the
public API returns). They are built by `importer.resolve` on top of the parsed
messages in `importer.messages`, which they keep as `proto`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import TracebackType

from importer.data_owner import DataOwner
from importer.messages import Function, Graph, Model, Node, TypeProto
from importer.tensor import SparseTensor, Tensor

# Value kinds
GRAPH_INPUT = "input"
INITIALIZER = "initializer"
SPARSE_INITIALIZER = "sparse_initializer"
NODE_OUTPUT = "node_output"


class Value:
    """A named value of one graph.

    `initializer` is the tensor of an initializer (or sparse initializer), or
    the default value of a graph input that has one. `consumers` are the
    nodes of this value's own graph that read it, directly or through their
    subgraphs, in resolved order, each once.
    """

    __slots__ = ("name", "kind", "type", "producer", "initializer", "graph", "consumers")

    def __init__(self, name: str, kind: str, graph: ResolvedGraph, value_type: TypeProto | None = None) -> None:
        self.name = name
        self.kind = kind
        self.type = value_type
        self.producer: ResolvedNode | None = None
        self.initializer: Tensor | SparseTensor | None = None
        self.graph = graph
        self.consumers: list[ResolvedNode] = []

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

    __slots__ = ("proto", "index", "graph", "opset_version", "subgraphs")

    def __init__(self, proto: Node, index: int, graph: ResolvedGraph, opset_version: int) -> None:
        self.proto = proto
        self.index = index
        self.graph = graph
        self.opset_version = opset_version
        self.subgraphs: Sequence[tuple[str, ResolvedGraph]] = ()  # shared when there are none

    @property
    def inputs(self) -> list[Value | None]:
        return [self.graph.lookup(name) if name else None for name in self.proto.input]

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


class ResolvedGraph:
    """A graph after resolution (docs/import-rules.md §4).

    `nodes` are in resolved (topological) order; `nodes_were_reordered` says
    whether that differs from the file. `captures` are the outer values this
    graph or its own subgraphs read, in first-read order. `path` is the field
    path of the GraphProto (`ModelProto.graph`, `...node[2].attribute[0].g`).
    """

    __slots__ = (
        "proto",
        "path",
        "parent",
        "values",
        "inputs",
        "outputs",
        "nodes",
        "nodes_were_reordered",
        "_captures",
    )

    def __init__(self, proto: Graph, path: str, parent: ResolvedGraph | None) -> None:
        self.proto = proto
        self.path = path
        self.parent = parent
        self.values: dict[str, Value] = {}
        self.inputs: list[Value] = []
        self.outputs: list[Value] = []
        self.nodes: list[ResolvedNode] = []
        self.nodes_were_reordered = False
        self._captures: dict[Value, None] = {}  # an ordered set, by identity

    @property
    def captures(self) -> list[Value]:
        return list(self._captures)

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
        """Record that this graph (or a subgraph of it) reads outer `value`."""
        self._captures[value] = None

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


class OnnxModel:
    """An imported model: the file as read (`proto`) and the resolved graph.

    Use as a context manager, or call `close()`: it releases the model file's
    mapping and every external data mapping; tensor data read afterwards
    raises `ModelImportError` (kind Io).
    """

    __slots__ = ("proto", "graph", "opsets", "input_name", "owners")

    def __init__(self, proto: Model, graph: ResolvedGraph, opsets: dict[str, int], input_name: str, owners: list[DataOwner]) -> None:
        self.proto = proto
        self.graph = graph
        self.opsets = opsets
        self.input_name = input_name
        self.owners = owners

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
