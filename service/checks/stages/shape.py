"""The `shape` stage: onnx's strict type and shape inference, each finding placed at its node.

Owns `shape_stage(model) -> StageResult`. onnx (the `runtime` extra) is
imported inside the function, never at module level; without it the stage is
`incomplete`. The stage runs onnx's inference (the C++ function behind
`onnx.shape_inference.infer_shapes`, its answer kept as bytes) with
`check_type=True, strict_mode=True, data_prop=True` on a copy of the model's
bytes made by `_Rewrite`, in which:

- when onnx reports an error (a model that passes is inferred once, as it
  is), every node (main graph, subgraphs at any depth, model-local function
  bodies) is named with a tag unique to the run (a name field appended to the
  node: the last one wins when protobuf parses it), so each error onnx
  reports, which names only the op and the node's name, is placed at the
  node it comes from: field path `ModelProto.graph.node[17]`,
  `...node[3].attribute[0].g.node[2]`, `ModelProto.functions[1].node[4]`,
  byte offset of the node's key in the model file. An error inside a
  function of onnx's own (a schema function body such as
  MeanVarianceNormalization's) is placed at the model's node that calls it;
- initializers of 64 KiB or more (`STRIP_BYTES`) have their values set
  aside: kept are their name, element type and dims, marked as external
  data, so inference sees the same types and shapes without a copy of the
  weights (and a model of GBs of weights stays under the 2 GB protobuf limit
  of onnx's parser). Shape inference reads a tensor's values only for
  shape-like inputs (Reshape's shape, Slice's starts, ...), which are small;
  should it ask for one that was set aside, onnx names it ("Cannot parse
  data from external tensors ... tensor: NAME") and the stage runs again
  with that tensor's values kept (the last of `MAX_RUNS` runs sets nothing
  aside), and likewise a tensor of an external data file it asks for is
  given inline from the importer's own view of the file (onnx on the file
  alone cannot read it). A model still over 2 GB is `incomplete`, saying so.

The types onnx inferred for the main graph's values the model does not
declare go back with the result (`StageResult.inferred`,
`service.checks.stages.inferred_types`): from the strict run when it
passes, else from one more run without the strict checks (types only, never
a finding).

In strict mode onnx reports every node's error of a graph at its end (all
of them, not only the first), except after a node whose op has no schema
(it then reports no error after it in that graph: `shape-not-inferred`
says so), and except an error that ends inference at once (an input type
outside the op's constraints, found by `check_type`; input types that
contradict each other): onnx then reports that one alone and drops what it
had collected. The stage gets those back: up to that node, inference
without `check_type` does exactly the same, so the errors it reports for
the nodes before that one are the ones dropped. The stage reports only
errors onnx reports; it sorts them by what a registry acts on.

Codes (stable; severity):

- `declared-type-conflict` (error): the element type (or the kind of type)
  onnx infers for a node's output differs from the one the model declares
  (value_info, graph output);
- `declared-shape-conflict` (error): the inferred rank or a dimension
  differs from the declared one;
- `shape-inference-error` (error): any other inference error at a node
  (input types outside the op's constraints, incompatible dimensions, bad
  attributes, ...); or, with field path `ModelProto`, an error onnx gives
  for the model as a whole;
- `shape-inference-follow-on` (warning): a node whose input has no type
  because the node producing it failed inference (onnx reports both; the
  first is the error);
- `shape-not-inferred` (warning): a node whose op has no schema (a custom
  domain, an op onnx does not know), at the first such node of each graph or
  function: onnx infers no types for its outputs and reports no error
  after it in that graph;
- `shape-data-unavailable` (warning): inference needs the values of a tensor
  of an external data file too large to give inline (over `INLINE_BYTES`).

Any other exception (a bug, onnx refusing bytes the importer accepted, no
memory) makes the stage `incomplete` with the reason: it fails closed.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from importer.attribute_types import AttributeType
from importer.element_types import DataType
from importer.graph import OnnxModel
from importer.messages import Attribute, Function, Graph, Node
from importer.tensor import FROM_EXTERNAL, Tensor
from importer.wire import Buffer, FieldCursor
from service.checks.outcome import Finding, StageResult, incomplete
from service.checks.stages.inferred_types import inferred_types
from service.checks.stages.protobuf_writing import SET_ASIDE, field, varint

SHAPE_INFERENCE_ERROR: Final = "shape-inference-error"
DECLARED_TYPE_CONFLICT: Final = "declared-type-conflict"
DECLARED_SHAPE_CONFLICT: Final = "declared-shape-conflict"
SHAPE_INFERENCE_FOLLOW_ON: Final = "shape-inference-follow-on"
SHAPE_NOT_INFERRED: Final = "shape-not-inferred"
SHAPE_DATA_UNAVAILABLE: Final = "shape-data-unavailable"

ONNX_MISSING: Final = "onnx is not installed (install the `runtime` extra)"
STRIP_BYTES: Final = 1 << 16  # initializers this large go to onnx without their values
INLINE_BYTES: Final = 1 << 26  # an external tensor inference reads is given inline up to this size
PROTOBUF_LIMIT: Final = (1 << 31) - 1  # onnx's parser refuses a message this large
MAX_RUNS: Final = 4  # runs that keep the values inference asked for; the last sets none aside
INFERENCE_OPTIONS: Final = {"check_type": True, "strict_mode": True, "data_prop": True}
LENIENT_OPTIONS: Final = {"check_type": False, "strict_mode": False, "data_prop": True}  # for types after an error

# Keys (field number << 3 | wire type) of the fields the rewrite looks into.
_MODEL_GRAPH: Final = 7 << 3 | 2
_MODEL_FUNCTION: Final = 25 << 3 | 2
_GRAPH_NODE: Final = 1 << 3 | 2
_GRAPH_INITIALIZER: Final = 5 << 3 | 2
_NODE_NAME: Final = 3 << 3 | 2
_NODE_ATTRIBUTE: Final = 5 << 3 | 2
_ATTRIBUTE_G: Final = 6 << 3 | 2
_ATTRIBUTE_GRAPHS: Final = 11 << 3 | 2
_FUNCTION_NODE: Final = 7 << 3 | 2
_TENSOR_KEPT_FIELDS: Final = frozenset({1, 2, 8})  # dims, data_type, name
_TENSOR_RAW_DATA: Final = 9 << 3 | 2
_GRAPH_TYPES: Final = (AttributeType.GRAPH, AttributeType.GRAPHS)

_PREFIXES: Final = ("[ShapeInferenceError]", "[TypeInferenceError]", "Inference error(s):")
_TYPE_CONFLICTS: Final = (
    "Inferred elem type differs from existing elem type",
    "type case mismatch",
    "key type mismatch",
    "mismatch for opaque type",
)
_SHAPE_CONFLICTS: Final = ("Inferred shape and existing shape differ",)
_NULL_INPUT: Final = re.compile(r"Input (\d+) expected to have type but instead is null|Input type was null")
_ELEM_TYPES: Final = re.compile(r"elem type: \((\d+)\) vs \((\d+)\)")
_COLLECTED: Final = "[ShapeInferenceError] Inference error(s): "  # the errors of a graph, collected to its end
_NEEDS_DATA: Final = "Cannot parse data from external tensors. Please load external data into raw data for tensor: "


def shape_stage(model: OnnxModel) -> StageResult:
    """onnx's strict type and shape inference over the whole model, each
    error placed at its node. Never raises: an unexpected failure is
    `incomplete`, with the reason."""
    started = time.perf_counter()
    try:
        import onnx.shape_inference  # noqa: F401 (the extra may be missing)
    except ImportError:
        result = incomplete("shape", ONNX_MISSING)
    else:
        try:
            result = _Inference(model).run()
        except Exception as error:  # fail closed: anything unexpected is incomplete
            result = incomplete("shape", f"shape inference did not finish: {type(error).__name__}: {error}")
    result.seconds = time.perf_counter() - started
    return result


# --- the model's bytes, as onnx is given them


@dataclass(slots=True)
class _Place:
    """A tagged node: where it is, and the scope (graph or function) it is in."""

    scope: str
    index: int
    node: Node
    offset: int

    @property
    def field_path(self) -> str:
        return f"{self.scope}.node[{self.index}]"


@dataclass(slots=True)
class _Scope:
    """A graph or a function body: its nodes, and the enclosing scope's path
    (None for the main graph and for functions, which see no outer values)."""

    nodes: Sequence[Node]
    parent: str | None
    produced: dict[str, int] | None = None  # output name -> node index, made when needed

    def producer(self, name: str) -> int | None:
        if self.produced is None:
            self.produced = {output: index for index, node in enumerate(self.nodes) for output in node.output if output}
        return self.produced.get(name)


_Part = bytes | memoryview
_Built = tuple[list[_Part], int]
_Handler = Callable[[int, int, int, int], "_Built | None"]


class _Rewrite:
    """The model's bytes with every node tagged and large initializers set
    aside, as parts (views into the model's buffer, and small new pieces)
    and their total length. The walk follows the importer's parsed messages
    field by field: they are in file order, one per field."""

    def __init__(
        self,
        buf: Buffer,
        model: OnnxModel,
        token: str,
        keep: set[int],
        inline: dict[int, memoryview],
        *,
        set_aside: bool,
        tag: bool,
    ) -> None:
        self.buf = buf
        self.strip = set_aside
        self.tag = tag
        self.view = memoryview(buf)
        self.token = token
        self.keep = keep  # offsets of initializers whose values stay
        self.inline = inline  # offsets of external initializers -> their values, given inline
        self.places: list[tuple[str, int, Node, int]] = []  # a tag's number -> its node: scope, index, node, offset
        self.scopes: dict[str, _Scope] = {}
        self.set_aside: dict[str, list[Tensor]] = {}  # name -> initializers whose values were set aside
        self.external: dict[str, list[Tensor]] = {}  # name -> initializers of external data files, as written
        initializers = model.proto.graph.initializer if model.proto.graph is not None else []
        if tag or any(self._changes(tensor) for tensor in initializers):
            self.parts, self.length = self._model(model)
        else:  # the untagged copy of a model with no initializer to change is its bytes as they are: no walk
            self.parts, self.length = [self.view], len(buf)
            for tensor in initializers:
                if tensor.source == FROM_EXTERNAL:
                    self.external.setdefault(tensor.name, []).append(tensor)  # as the walk records them

    def _changes(self, tensor: Tensor) -> bool:
        """Whether the copy changes this initializer of the main graph (the
        only graph the untagged walk looks into): an external one whose values
        inference asked for, given inline, or a large one set aside."""
        if tensor.source == FROM_EXTERNAL:
            return tensor.offset in self.inline
        return self.strip and tensor.byte_length >= STRIP_BYTES and tensor.offset not in self.keep

    def data(self) -> bytes:
        return b"".join(self.parts)

    def _walk(self, start: int, stop: int, keys: frozenset[int], handle: _Handler) -> _Built:
        """The message at buf[start:stop], each field of `keys` replaced by
        what `handle` builds for it (None: kept as it is)."""
        parts: list[_Part] = []
        length = 0
        run = start
        cursor = FieldCursor(self.buf, start, stop)
        while cursor.next():
            if cursor.key not in keys:
                continue
            built = handle(cursor.key, cursor.at, cursor.start, cursor.stop)
            if built is None:
                continue
            if cursor.at > run:
                parts.append(self.view[run : cursor.at])
                length += cursor.at - run
            header = varint(cursor.key) + varint(built[1])
            parts.append(header)
            parts.extend(built[0])
            length += len(header) + built[1]
            run = cursor.stop
        if stop > run:
            parts.append(self.view[run:stop])
            length += stop - run
        return parts, length

    def _model(self, model: OnnxModel) -> _Built:
        graph = model.proto.graph
        functions = model.functions
        counts = {_MODEL_GRAPH: 0, _MODEL_FUNCTION: 0}

        def handle(key: int, at: int, start: int, stop: int) -> _Built | None:
            index = counts[key]
            counts[key] += 1
            if key == _MODEL_GRAPH:
                return self._graph(start, stop, graph, "ModelProto.graph", None) if graph is not None and index == 0 else None
            if index >= len(functions) or not self.tag:
                return None
            function = functions[index]
            path = f"ModelProto.functions[{index}]"
            self.scopes[path] = _Scope(function.node, None)
            return self._nodes(start, stop, _FUNCTION_NODE, function.node, path)

        return self._walk(0, len(self.buf), frozenset(counts), handle)

    def _graph(self, start: int, stop: int, graph: Graph, path: str, parent: str | None) -> _Built:
        """A graph: its nodes tagged, its large initializers set aside. The
        hot loop of node-heavy models: a node without subgraphs becomes its
        new key and length, its bytes as they are, and its tag."""
        self.scopes[path] = _Scope(graph.node, parent)
        nodes = graph.node
        initializers = graph.initializer
        view = self.view
        places = self.places
        token = self.token.encode()
        parts: list[_Part] = []
        append = parts.append
        pending = b""  # new bytes not yet in `parts`: a tag, then the next node's key and length
        length = 0
        run = start
        node_index = initializer_index = 0
        cursor = FieldCursor(self.buf, start, stop)
        while cursor.next():
            key = cursor.key
            at = cursor.at
            if key == _GRAPH_NODE and node_index < len(nodes):
                node = nodes[node_index]
                if not self.tag:
                    node_index += 1
                    continue
                if node.attribute and any(attribute.type in _GRAPH_TYPES for attribute in node.attribute):
                    built: _Built | None = self._node(at, cursor.start, cursor.stop, node, node_index, path)
                    node_index += 1
                else:
                    tag = token + str(len(places)).encode()
                    places.append((path, node_index, node, at))
                    node_index += 1
                    tag_field = (bytes((_NODE_NAME, len(tag))) if len(tag) < 0x80 else varint(_NODE_NAME) + varint(len(tag))) + tag
                    size = cursor.stop - cursor.start
                    if at > run:
                        if pending:
                            append(pending)
                            pending = b""
                        append(view[run:at])
                        length += at - run
                    header = bytes((_GRAPH_NODE,)) + varint(size + len(tag_field))
                    append(pending + header)
                    append(view[cursor.start : cursor.stop])
                    pending = tag_field
                    length += len(header) + size + len(tag_field)
                    run = cursor.stop
                    continue
            elif key == _GRAPH_INITIALIZER and initializer_index < len(initializers):
                built = self._initializer(cursor.start, cursor.stop, initializers[initializer_index])
                initializer_index += 1
            else:
                continue
            if built is None:
                continue
            if pending:
                append(pending)
                pending = b""
            if at > run:
                append(view[run:at])
                length += at - run
            header = varint(key) + varint(built[1])
            append(header)
            parts.extend(built[0])
            length += len(header) + built[1]
            run = cursor.stop
        if pending:
            append(pending)
        if stop > run:
            append(view[run:stop])
            length += stop - run
        return parts, length

    def _nodes(self, start: int, stop: int, node_key: int, nodes: Sequence[Node], path: str) -> _Built:
        """A function's body: its nodes tagged."""
        count = [0]

        def handle(key: int, at: int, start: int, stop: int) -> _Built | None:
            index = count[0]
            count[0] += 1
            return self._node(at, start, stop, nodes[index], index, path) if index < len(nodes) else None

        return self._walk(start, stop, frozenset({node_key}), handle)

    def _node(self, at: int, start: int, stop: int, node: Node, index: int, scope: str) -> _Built:
        tag = field(_NODE_NAME, f"{self.token}{len(self.places)}".encode())
        self.places.append((scope, index, node, at))
        if not any(attribute.type in _GRAPH_TYPES for attribute in node.attribute):
            return [self.view[start:stop], tag], stop - start + len(tag)
        node_path = f"{scope}.node[{index}]"
        attributes = node.attribute
        count = [0]

        def handle(key: int, at: int, start: int, stop: int) -> _Built | None:
            position = count[0]
            count[0] += 1
            if position >= len(attributes) or attributes[position].type not in _GRAPH_TYPES:
                return None
            return self._attribute(start, stop, attributes[position], f"{node_path}.attribute[{position}]", scope)

        parts, length = self._walk(start, stop, frozenset({_NODE_ATTRIBUTE}), handle)
        parts.append(tag)
        return parts, length + len(tag)

    def _attribute(self, start: int, stop: int, attribute: Attribute, path: str, scope: str) -> _Built:
        value = attribute.value
        graphs = value if isinstance(value, list) else [value]
        count = [0]

        def handle(key: int, at: int, start: int, stop: int) -> _Built | None:
            if (key == _ATTRIBUTE_G) != (attribute.type is AttributeType.GRAPH):
                return None
            position = count[0]
            count[0] += 1
            graph = graphs[position] if position < len(graphs) else None
            if not isinstance(graph, Graph):
                return None
            segment = "g" if key == _ATTRIBUTE_G else f"graphs[{position}]"
            return self._graph(start, stop, graph, f"{path}.{segment}", scope)

        return self._walk(start, stop, frozenset({_ATTRIBUTE_G, _ATTRIBUTE_GRAPHS}), handle)

    def _initializer(self, start: int, stop: int, tensor: Tensor) -> _Built | None:
        """A large initializer without its values (marked as external data),
        an external one inference asked for with its values, else None."""
        if tensor.source == FROM_EXTERNAL:
            self.external.setdefault(tensor.name, []).append(tensor)
        if not self._changes(tensor):
            return None
        if tensor.source == FROM_EXTERNAL:
            values = self.inline[tensor.offset]
            parts, length = self._kept(start, stop)
            header = varint(_TENSOR_RAW_DATA) + varint(len(values))
            return [*parts, header, values], length + len(header) + len(values)
        self.set_aside.setdefault(tensor.name, []).append(tensor)
        parts, length = self._kept(start, stop)
        return [*parts, SET_ASIDE], length + len(SET_ASIDE)

    def _kept(self, start: int, stop: int) -> _Built:
        """A tensor's name, element type and dims, and nothing else."""
        parts: list[_Part] = []
        length = 0
        cursor = FieldCursor(self.buf, start, stop)
        while cursor.next():
            if cursor.key >> 3 in _TENSOR_KEPT_FIELDS:
                parts.append(self.view[cursor.at : cursor.stop])
                length += cursor.stop - cursor.at
        return parts, length


# --- running onnx, and reading what it says


class _Inference:
    def __init__(self, model: OnnxModel) -> None:
        self.model = model
        self.token = f"~{secrets.token_hex(8)}~"
        self.result = StageResult("shape")
        self.seen: set[tuple[str, str, str]] = set()
        self.failed: set[str] = set()  # field paths of nodes with an error (or whose inference could not run)

    def run(self) -> StageResult:
        model = self.model
        buf = model.owners[0].parse_buffer()
        keep: set[int] = set()
        inline: dict[int, memoryview] = {}
        message: str | None = None
        data = b""
        inferred: bytes | None = None
        for tag in (False, True):  # nodes are tagged only to place the errors of a model that has some
            for run in range(MAX_RUNS):
                rewrite = _Rewrite(buf, model, self.token, keep, inline, set_aside=run < MAX_RUNS - 1, tag=tag)
                if rewrite.length > PROTOBUF_LIMIT:
                    aside = " even with its large initializers set aside" if rewrite.strip else ""
                    return incomplete(
                        "shape", f"the model is {rewrite.length} bytes{aside}: over the 2 GB that onnx's protobuf parser reads"
                    )
                data = rewrite.data()
                rewrite.parts.clear()
                message, inferred = _infer(data, INFERENCE_OPTIONS)
                if message is None or not self._give_values(message, rewrite, keep, inline):
                    break
            if message is None:
                break
        self._unsupported()
        if inferred is None:  # what inference gives without its strict checks, for the types alone
            inferred = _lenient(data)
        if inferred is not None:
            self.result.inferred = inferred_types(inferred, model)
        del inferred
        if message is not None:
            heads = self._heads(message, rewrite)
            if not message.startswith(_COLLECTED) and heads and heads[0][2].scope == "ModelProto.graph":
                self._collected_before(data, heads[0][2], rewrite)
            self._report(message, heads, rewrite)
        del data
        self.result.findings.sort(key=lambda finding: finding.offset)
        return self.result.finish()

    def _collected_before(self, data: bytes, aborted_at: _Place, rewrite: _Rewrite) -> None:
        """The errors onnx collected before an error that ended inference at
        once (and dropped with it). Such an error is one of `check_type`'s
        (an input type outside the op's constraints) or a node whose input
        types contradict each other; up to that node, inference without
        `check_type` does exactly what it did, and reports what it collected.
        Only errors of nodes before that one are taken."""
        message = _inference_error(data, {**INFERENCE_OPTIONS, "check_type": False})
        if message is None:
            return
        heads = self._heads(message, rewrite)
        cut = next(
            (at for at, _, place in heads if place.scope == "ModelProto.graph" and place.index >= aborted_at.index),
            len(message),
        )
        self._report(message[:cut], [head for head in heads if head[0] < cut], rewrite)

    # --- values inference asked for

    def _give_values(self, message: str, rewrite: _Rewrite, keep: set[int], inline: dict[int, memoryview]) -> bool:
        """Keep (or give inline) the values of tensors inference could not
        read; True if there is any, for another run."""
        more = False
        for name in _needed_tensors(message):
            for tensor in rewrite.set_aside.get(name, ()):
                if tensor.offset not in keep:
                    keep.add(tensor.offset)
                    more = True
            for tensor in rewrite.external.get(name, ()):
                if tensor.offset not in inline and tensor.byte_length <= INLINE_BYTES and tensor.is_bound:
                    inline[tensor.offset] = tensor.data
                    more = True
        return more

    # --- findings

    def _add(self, severity: str, code: str, message: str, place: _Place | None) -> None:
        field_path = place.field_path if place is not None else "ModelProto"
        key = (code, field_path, message)
        if key in self.seen:
            return  # a function's body is inferred once per call
        self.seen.add(key)
        if place is None:
            self.result.add(Finding("shape", "error" if severity == "error" else "warning", code, message))
            return
        node = place.node
        self.result.add(
            Finding(
                "shape",
                "error" if severity == "error" else "warning",
                code,
                message,
                node.name,
                node.op_type,
                node.domain,
                field_path,
                place.offset,
            )
        )

    def _heads(self, message: str, rewrite: _Rewrite) -> list[tuple[int, int, _Place]]:
        """Where each tagged node's error starts and its text begins, in the message."""
        heads: list[tuple[int, int, _Place]] = []
        pattern = re.compile(", node name: " + re.escape(self.token) + r"(\d+)\): ")
        for match in pattern.finditer(message):
            index = int(match.group(1))
            if index >= len(rewrite.places):
                continue
            place = _Place(*rewrite.places[index])
            opening = f"(op_type:{place.node.op_type}"
            head = match.start() - len(opening)
            if head >= 0 and message.startswith(opening, head):
                heads.append((head, match.end(), place))
        return heads

    def _report(self, message: str, heads: list[tuple[int, int, _Place]], rewrite: _Rewrite) -> None:
        """Each error of onnx's message at the node it names. A node's text
        that only wraps the errors of its subgraphs or function body (listed
        after it, each with its own node) adds nothing; an error of a node
        that is not the model's (in a body of onnx's own functions) stays in
        the text of the model's node that calls it."""
        before = _own_text(message[: heads[0][0]] if heads else message)
        if before:
            self._add("error", SHAPE_INFERENCE_ERROR, before, None)
        failed = self.failed
        for position, (_, end, place) in enumerate(heads):
            stop = heads[position + 1][0] if position + 1 < len(heads) else len(message)
            text = _own_text(message[end:stop])
            if not text:
                continue
            if _NEEDS_DATA in text:
                self._add("warning", SHAPE_DATA_UNAVAILABLE, f"inference needs the values of a tensor it cannot be given: {text}", place)
                failed.add(place.field_path)
                continue
            code = _code(text)
            upstream = self._failed_producer(text, place, rewrite, failed) if code == SHAPE_INFERENCE_ERROR else None
            if upstream is not None:
                self._add("warning", SHAPE_INFERENCE_FOLLOW_ON, f"{text} (its producer, {upstream}, failed inference)", place)
            else:
                self._add("error", code, text if code == SHAPE_INFERENCE_ERROR else _described(text), place)
            failed.add(place.field_path)

    def _failed_producer(self, text: str, place: _Place, rewrite: _Rewrite, failed: set[str]) -> str | None:
        """For a node that reports an input without a type: the field path of
        the node producing that input, when that node failed inference."""
        match = _NULL_INPUT.search(text)
        if match is None:
            return None
        inputs = place.node.input
        positions = [int(match.group(1))] if match.group(1) is not None else list(range(len(inputs)))
        for position in positions:
            if position >= len(inputs) or not inputs[position]:
                continue
            scope_path: str | None = place.scope
            while scope_path is not None:
                scope = rewrite.scopes[scope_path]
                index = scope.producer(inputs[position])
                if index is not None:
                    path = f"{scope_path}.node[{index}]"
                    if path in failed:
                        return path
                    break
                scope_path = scope.parent
        return None

    def _unsupported(self) -> None:
        """The first node of each graph and function whose op has no schema
        (nor a model-local function): onnx infers nothing for it and reports
        no error after it in that graph. Each scope's distinct ops are looked
        up first: its nodes are walked only when one of them has none."""
        import onnx.defs

        model = self.model
        functions = {(f.domain, f.name, f.overload) for f in model.functions}
        model_opsets = {entry.domain: entry.version for entry in model.proto.opset_import}
        known: dict[tuple[str, str, str, int], bool] = {}

        def has_schema(op: tuple[str, str, str], opsets: dict[str, int]) -> bool:
            domain, op_type, overload = op
            version = opsets.get(domain)
            if version is None and domain == "":
                version = opsets.get("ai.onnx")
            if version is None:
                return True  # onnx reports the missing import itself
            lookup = (domain, op_type, overload, version)
            has = known.get(lookup)
            if has is None:
                has = known[lookup] = (not overload and onnx.defs.has(op_type, version, domain)) or op in functions
            return has

        for scope_path, nodes, owner in _scopes(model):
            opsets = {entry.domain: entry.version for entry in owner.opset_import} if owner is not None else model_opsets
            missing = {op for op in {(node.domain, node.op_type, node.overload) for node in nodes} if not has_schema(op, opsets)}
            if not missing:
                continue
            unsupported = [(index, node) for index, node in enumerate(nodes) if (node.domain, node.op_type, node.overload) in missing]
            index, node = unsupported[0]
            ops = sorted({f"{domain or 'ai.onnx'}:{op_type}" for domain, op_type, _ in missing})
            listed = ", ".join(ops[:8]) + (", ..." if len(ops) > 8 else "")
            self._add(
                "warning",
                SHAPE_NOT_INFERRED,
                f"{len(unsupported)} node(s) of this graph have an op with no schema ({listed}): onnx infers no types for their "
                "outputs, and reports no inference error for the nodes after this one in the graph",
                _Place(scope_path, index, node, node.offset),
            )


def _inference_error(data: bytes, options: dict[str, bool]) -> str | None:
    """onnx's inference of the model's bytes: the text of its error, or None."""
    return _infer(data, options)[0]


def _infer(data: bytes, options: dict[str, bool]) -> tuple[str | None, bytes | None]:
    """onnx's inference of the model's bytes: the text of its error, or None,
    and the model with the types it inferred, as the bytes onnx's C++ side
    writes (None after an error). `onnx.shape_inference.infer_shapes` would
    parse those into a ModelProto whole (for 200,000 nodes, longer than
    reading the types out of them: `inferred_types`)."""
    import onnx.checker
    import onnx.onnx_cpp2py_export.shape_inference as inference
    import onnx.shape_inference

    try:
        inferred: bytes = inference.infer_shapes(data, options["check_type"], options["strict_mode"], options["data_prop"])
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as error:
        return str(error), None
    return None, inferred


def _lenient(data: bytes) -> bytes | None:
    """The model with the types onnx infers without its strict checks; None
    if even that fails (the types are a help to a reader, never a finding)."""
    try:
        return _infer(data, LENIENT_OPTIONS)[1]
    except Exception:  # the stage's findings stand without them
        return None


def _scopes(model: OnnxModel) -> Iterator[tuple[str, Sequence[Node], Function | None]]:
    """Every graph and function body of the model: its field path, its
    nodes, and the function whose body holds it (None in the graphs)."""
    pending: list[tuple[str, Sequence[Node], Function | None]] = []
    if model.proto.graph is not None:
        pending.append(("ModelProto.graph", model.proto.graph.node, None))
    pending.extend((f"ModelProto.functions[{index}]", function.node, function) for index, function in enumerate(model.functions))
    while pending:
        path, nodes, owner = pending.pop()
        yield path, nodes, owner
        for index, node in enumerate(nodes):
            if not node.attribute:
                continue
            for position, attribute in enumerate(node.attribute):
                if attribute.type not in _GRAPH_TYPES:
                    continue
                value = attribute.value
                graphs = value if isinstance(value, list) else [value]
                for number, graph in enumerate(graphs):
                    if isinstance(graph, Graph):
                        segment = "g" if attribute.type is AttributeType.GRAPH else f"graphs[{number}]"
                        pending.append((f"{path}.node[{index}].attribute[{position}].{segment}", graph.node, owner))


def _own_text(text: str) -> str:
    """An error's text without the wrappers onnx puts around it."""
    text = text.strip()
    changed = True
    while changed:
        changed = False
        for prefix in _PREFIXES:
            if text.startswith(prefix):
                text = text[len(prefix) :].strip()
                changed = True
    return text


def _described(text: str) -> str:
    """onnx's text, its element type numbers named, and which side is which."""
    match = _ELEM_TYPES.search(text)
    if match is not None:
        inferred, declared = (_type_name(int(group)) for group in match.groups())
        text = f"{text[: match.start()]}elem type: ({inferred}) vs ({declared}){text[match.end() :]}"
    return f"{text} (inferred vs declared)"


def _type_name(code: int) -> str:
    try:
        return DataType(code).name
    except ValueError:
        return str(code)


def _code(text: str) -> str:
    if any(marker in text for marker in _TYPE_CONFLICTS):
        return DECLARED_TYPE_CONFLICT
    if any(marker in text for marker in _SHAPE_CONFLICTS):
        return DECLARED_SHAPE_CONFLICT
    return SHAPE_INFERENCE_ERROR


def _needed_tensors(message: str) -> set[str]:
    names = set()
    start = message.find(_NEEDS_DATA)
    while start >= 0:
        end = message.find("\n", start)
        names.add(message[start + len(_NEEDS_DATA) : end if end >= 0 else len(message)])
        start = message.find(_NEEDS_DATA, start + 1)
    return names
