"""The `security` stage: findings a registry acts on, each placed in the file.

Owns the stage's codes (below, with their severities), `SecurityBounds`,
`security_stage(model, bounds)`, `static_findings(model, bounds)` (what the
check worker refuses to load or run) and `expansion_findings(model, max_nodes)`
(what no check worker stage is given). Pure Python over the importer's opened
model: it reads no file and runs nothing. What each code means, and what a
registry should do about it, is in docs/security-findings.md.

- outputs whose size constants fix past `max_static_output`
  (`static-output-too-large`, the estimate of
  `service.checks.stages.static_size`), and declared inputs a smoke
  run would have to make that large (`static-input-too-large`);
- `Loop`s whose trip count, a constant the same estimate resolves (or none
  at all), is past `max_loop_trips` (`loop-trip-count`): an error when
  nothing ends the loop sooner (its condition is absent or a constant true
  that its body passes on unchanged), a warning when its body computes its
  condition (a while-loop, as torch exports them with M = INT64_MAX);
- calls of model-local functions that would expand, once inlined, to more
  than `max_inlined_nodes` nodes (`function-expansion-too-large`, counted
  without inlining by `service.checks.stages.function_expansion`);
- external-data locations naming onnxruntime's in-memory address marker
  (`external-data-memory-address`); every other unsafe location is refused
  by the importer itself before any stage runs;
- operators of custom domains (`custom-operator-domain`, one per domain)
  and ops named or shaped like Python callbacks (`python-callback-op`);
- names, doc strings and metadata holding bidirectional-override
  characters (`bidi-override-character`) or control characters
  (`control-character`);
- declared dimensions past `max_declared_dim` (`declared-dim-too-large`).

Every graph is looked at: the main graph and its subgraphs, function bodies,
and the graphs (and binding names) of `training_info`.

Big graphs are looked at in bulk: the strings of all nodes (and of all value
declarations) are checked in one pass each, distinct op types, domains and
declared types once each, and a node is looked at on its own only when
something about it may be flagged.

The stage never raises for anything a model holds: a failure of its own
makes it `incomplete` with the reason (fail closed), never `pass`.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import attrgetter
from typing import Final

from importer.attribute_types import AttributeType
from importer.element_types import DataType
from importer.errors import quote
from importer.graph import GRAPH_INPUT, OnnxModel
from importer.messages import (
    Attribute,
    Function,
    Graph,
    MapType,
    Node,
    OperatorSetId,
    OptionalType,
    SequenceType,
    StringStringEntry,
    TensorType,
    TrainingInfo,
    TypeProto,
    ValueInfo,
)
from importer.resolve import normalize_domain
from importer.tensor_places import tensor_places
from importer.wire import Buffer, FieldCursor, find_field
from service.checks.outcome import Finding, Severity, StageResult, incomplete
from service.checks.stages.function_expansion import UNBOUNDED, function_expansion
from service.checks.stages.static_size import LoopTrips, Oversized, byte_size, estimate_statics

# The stage's codes: stable tokens a registry acts on (docs/security-findings.md).
STATIC_OUTPUT_TOO_LARGE: Final = "static-output-too-large"
STATIC_INPUT_TOO_LARGE: Final = "static-input-too-large"
FUNCTION_EXPANSION_TOO_LARGE: Final = "function-expansion-too-large"
EXTERNAL_DATA_MEMORY_ADDRESS: Final = "external-data-memory-address"
PYTHON_CALLBACK_OP: Final = "python-callback-op"
CUSTOM_OPERATOR_DOMAIN: Final = "custom-operator-domain"
BIDI_OVERRIDE_CHARACTER: Final = "bidi-override-character"
CONTROL_CHARACTER: Final = "control-character"
DECLARED_DIM_TOO_LARGE: Final = "declared-dim-too-large"
LOOP_TRIP_COUNT: Final = "loop-trip-count"

SEVERITY: Final[dict[str, Severity]] = {
    STATIC_OUTPUT_TOO_LARGE: "error",
    FUNCTION_EXPANSION_TOO_LARGE: "error",
    EXTERNAL_DATA_MEMORY_ADDRESS: "error",
    PYTHON_CALLBACK_OP: "error",
    BIDI_OVERRIDE_CHARACTER: "error",
    LOOP_TRIP_COUNT: "error",  # a warning for a while-loop, whose body computes its condition
    STATIC_INPUT_TOO_LARGE: "warning",
    CUSTOM_OPERATOR_DOMAIN: "warning",
    CONTROL_CHARACTER: "warning",
    DECLARED_DIM_TOO_LARGE: "warning",
}

ONNX_DOMAINS: Final = frozenset({"", "ai.onnx.ml", "ai.onnx.preview.training"})  # "ai.onnx" is "" (normalized)
MEMORY_ADDRESS_MARKER: Final = "*/_ORT_MEM_ADDR_/*"  # onnxruntime: the offset is an address in its own memory
_MARKER_CORE: Final = "_ORT_MEM_ADDR_"
# Op names of Python callbacks, lower-cased without "_": onnxruntime's PyOp, TensorFlow's
# PyFunc and their kin. Any op whose name holds "python" counts too.
PYTHON_OP_NAMES: Final = frozenset({
    "pyop", "pythonop", "pyfunc", "pyfunction", "pythonfunction", "pycall", "pythoncall", "pycustomop",
    "pythoncustomop", "pyoperator", "pythonoperator", "pyfuncstateless", "eagerpyfunc", "pyscript", "pythonscript",
})  # fmt: skip
# onnxruntime's PyOp names the Python module and class (or function) it calls in these attributes.
_PYTHON_CALLBACK_ATTRIBUTES: Final = ("module", frozenset({"class_name", "compute", "function", "func"}))

_BIDI: Final = re.compile("[\u202a-\u202e\u2066-\u2069]")  # embeddings, overrides, isolates (Trojan Source)
_CONTROL_IN_NAME: Final = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_IN_TEXT: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # tab, newline and carriage return allowed

# Field keys (number << 3 | 2) of the strings a finding names, per message.
_MODEL_KEYS: Final = {"producer_name": 0x12, "producer_version": 0x1A, "domain": 0x22, "doc_string": 0x32, "metadata_props": 0x72}
_GRAPH_KEYS: Final = {"name": 0x12, "doc_string": 0x52}
_NODE_KEYS: Final = {"output": 0x12, "name": 0x1A, "op_type": 0x22, "attribute": 0x2A, "doc_string": 0x32, "domain": 0x3A}
_VALUE_INFO_KEYS: Final = {"name": 0x0A, "doc_string": 0x1A}
_TENSOR_KEYS: Final = {"name": 0x42, "doc_string": 0x62, "external_data": 0x6A}
_FUNCTION_KEYS: Final = {"name": 0x0A, "input": 0x22, "output": 0x2A, "attribute": 0x32, "doc_string": 0x42, "domain": 0x52}
_OPSET_KEYS: Final = {"domain": 0x0A}
_TRAINING_KEYS: Final = {"initialization_binding": 0x1A, "update_binding": 0x22}
_MAX_LISTED_OPS: Final = 8
# Attribute types that hold no tensor and no graph.
_PLAIN_ATTRIBUTES: Final = frozenset({
    AttributeType.FLOAT, AttributeType.INT, AttributeType.STRING, AttributeType.FLOATS, AttributeType.INTS, AttributeType.STRINGS,
})  # fmt: skip
_GRAPH_ATTRIBUTES: Final = frozenset({AttributeType.GRAPH, AttributeType.GRAPHS})
_NAME: Final = attrgetter("name")
_OP_TYPE: Final = attrgetter("op_type")
_DOMAIN: Final = attrgetter("domain")
_OUTPUT: Final = attrgetter("output")
_DOC: Final = attrgetter("doc_string")
_ATTRIBUTE: Final = attrgetter("attribute")
_REF: Final = attrgetter("ref_attr_name")
_TYPE: Final = attrgetter("type")


@dataclass(frozen=True)
class SecurityBounds:
    """The stage's bounds. `max_static_output`: bytes one output (or sparse
    tensor, densified) may take when constants fix its size
    (`--max-static-output`, 1 GiB). `max_declared_dim`: the largest declared
    dimension, 2**31 - 1 by default: past it a dimension cannot be indexed by
    the 32-bit integers many kernels and accelerators use, and a single row
    of float32 already takes 8 GiB. `max_inlined_nodes`: the nodes the
    model's calls of its own functions may expand to once inlined
    (`--max-inlined-nodes`, 1,000,000). `max_loop_trips`: the iterations a
    Loop's constant trip count may ask for (`--max-loop-trips`, 1,000,000)."""

    max_static_output: int = 1 << 30
    max_declared_dim: int = 2**31 - 1
    max_inlined_nodes: int = 1_000_000
    max_loop_trips: int = 1_000_000

    def __post_init__(self) -> None:
        if min(self.max_static_output, self.max_declared_dim, self.max_inlined_nodes, self.max_loop_trips) < 1:
            raise ValueError("the security bounds must be positive")


def security_stage(model: OnnxModel, bounds: SecurityBounds) -> StageResult:
    """The `security` stage over an imported (open) model: its findings in
    file order; `incomplete`, with the reason, if the stage itself fails."""
    started = time.perf_counter()
    try:
        findings = _Scan(model, bounds).run()
    except Exception as error:  # fail closed: a bug of ours is never a pass
        result = incomplete("security", f"the security check did not finish: {type(error).__name__}: {str(error)[:200]}")
    else:
        result = StageResult("security")
        for finding in findings:
            result.add(finding)
        result.finish()
    result.seconds = time.perf_counter() - started
    return result


def static_findings(model: OnnxModel, bounds: SecurityBounds) -> list[Finding]:
    """What the statics of `model` alone say a run would take, from one walk
    of the size estimate: outputs whose size constants fix past
    `max_static_output` (`static-output-too-large`), declared inputs a smoke
    run would have to make past it, symbolic dimensions taken as 1
    (`static-input-too-large`), and Loops whose constant (or absent) trip
    count is past `max_loop_trips` (`loop-trip-count`). The check worker
    refuses to load or run what this flags (`run._refusals`). In file order."""
    max_bytes = bounds.max_static_output
    statics = estimate_statics(model, max_bytes)
    found = [_static_output(item, max_bytes) for item in statics.outputs]
    found.extend(_static_inputs(model, max_bytes))
    found.extend(_loop_trip_count(loop, bounds.max_loop_trips) for loop in statics.loops if _past(loop, bounds.max_loop_trips))
    found.sort(key=lambda finding: finding.offset)
    return found


def expansion_findings(model: OnnxModel, max_nodes: int) -> list[Finding]:
    """A `function-expansion-too-large` error at the outermost call where the
    nodes the model's calls of its own functions expand to, once inlined,
    first pass `max_nodes` (or where one never ends), else nothing. No check
    worker stage is given such a model: onnx's inference and onnxruntime
    would each inline every call."""
    expansion = function_expansion(model, max_nodes)
    if expansion.node is None or expansion.callee is None:
        return []
    domain, name, overload = expansion.callee
    called = f"function {quote(name)}" + (f" (overload {quote(overload)})" if overload else "") + f" of {_domain_name(domain)}"
    bound = f"more than the {max_nodes:,} nodes --max-inlined-nodes allows"
    if expansion.callee_nodes == UNBOUNDED:
        message = f"this call of {called} never ends once inlined: the function calls itself, directly or through other functions"
    elif expansion.callee_nodes > max_nodes:
        message = f"this call of {called} expands to {expansion.callee_nodes:,} nodes once its functions are inlined, {bound}"
    else:
        in_all = "without end" if expansion.nodes == UNBOUNDED else f"to {expansion.nodes:,} nodes in all"
        message = (
            f"with this call of {called} ({expansion.callee_nodes:,} nodes once inlined), the model's calls of its functions "
            f"pass the {max_nodes:,} nodes --max-inlined-nodes allows: they expand {in_all}"
        )
    return [_finding(FUNCTION_EXPANSION_TOO_LARGE, message, expansion.field_path, expansion.node.offset, expansion.node)]


# --- sizes


def _human(size: int) -> str:
    for unit, scale in (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _bound(size: int) -> str:
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}"
    return f"{size} bytes"


def _type_name(elem: int | None) -> str:
    try:
        return DataType(elem).name.lower() if elem else "element-type-unknown"
    except ValueError:
        return f"type-{elem}"


def _finding(code: str, message: str, field_path: str, offset: int, node: Node | None, severity: Severity | None = None) -> Finding:
    """A security finding of `code` (its severity from SEVERITY unless given), placed at the field and, if any, its node."""
    name, op_type, domain = (node.name, node.op_type, node.domain) if node is not None else (None, None, None)
    return Finding("security", severity or SEVERITY[code], code, message, name, op_type, domain, field_path, offset)


def _static_output(item: Oversized, max_bytes: int) -> Finding:
    node = item.node
    how = f" {item.what}" if item.what else ""
    at_least = "at least " if item.at_least else ""
    if node is None:
        message = (
            f"sparse initializer {quote(item.output)} densifies to {item.elements} {_type_name(item.elem)} elements "
            f"({_human(item.bytes)}), more than the {_bound(max_bytes)} allowed"
        )
    else:
        message = (
            f"{item.op} would produce {at_least}{item.elements} {_type_name(item.elem)} elements ({at_least}{_human(item.bytes)}){how}"
            f" in output {quote(item.output)}, more than the {_bound(max_bytes)} allowed"
        )
    return _finding(STATIC_OUTPUT_TOO_LARGE, message, item.field_path, item.offset, node)


def _static_inputs(model: OnnxModel, max_bytes: int) -> Iterator[Finding]:
    """Declared inputs (without a default) whose static size, symbolic dimensions as 1, exceeds `max_bytes`."""
    graph = model.graph
    for index, info in enumerate(graph.proto.input):
        value = graph.values.get(info.name)
        if value is None or value.kind != GRAPH_INPUT or value.initializer is not None:
            continue
        declared = info.type
        if type(declared) is not TensorType or declared.shape is None:
            continue
        elements = 1
        for dim in declared.shape:
            elements *= dim if isinstance(dim, int) and dim >= 0 else 1
        size = byte_size(elements, declared.elem_type)
        if size > max_bytes:
            message = (
                f"input {quote(info.name)} is declared with {elements} {_type_name(declared.elem_type)} elements ({_human(size)}), "
                f"more than the {_bound(max_bytes)} a run may be given"
            )
            yield Finding(
                "security",
                SEVERITY[STATIC_INPUT_TOO_LARGE],
                STATIC_INPUT_TOO_LARGE,
                message,
                field_path=f"{graph.path}.input[{index}]",
                offset=info.offset,
            )


# --- loops


def _past(loop: LoopTrips, max_trips: int) -> bool:
    """Whether the loop may run more than `max_trips` iterations (without a trip count, it may run forever)."""
    return loop.trips is None or loop.trips > max_trips


def _loop_trip_count(loop: LoopTrips, max_trips: int) -> Finding:
    """A `loop-trip-count` finding at the Loop: an error when nothing ends it sooner, else a warning."""
    allowed = f"the {max_trips:,} iterations --max-loop-trips allows"
    if loop.runs_every_trip:
        keeps_on = "its condition starts true (absent, or a constant) and its body keeps it true"
        if loop.trips is None:
            message = f"this Loop has no trip count and nothing ends it: {keeps_on}, so it never ends"
        else:
            message = f"this Loop runs {loop.trips:,} iterations, more than {allowed}, and nothing ends it sooner: {keeps_on}"
        return _finding(LOOP_TRIP_COUNT, message, loop.field_path, loop.offset, loop.node)
    asks = "has no trip count" if loop.trips is None else f"may run {loop.trips:,} iterations, more than {allowed}"
    message = (
        f"this Loop {asks}; its body computes its condition, which may end it sooner (a while-loop): "
        "a smoke run of it is bounded by --smoke-cpu-seconds"
    )
    return _finding(LOOP_TRIP_COUNT, message, loop.field_path, loop.offset, loop.node, "warning")


# --- the scan


class _Scan:
    def __init__(self, model: OnnxModel, bounds: SecurityBounds) -> None:
        self.model = model
        self.bounds = bounds
        self.found: list[Finding] = []
        owner = model.owners[0]
        if owner.closed:
            raise ValueError("the model was closed; it can no longer be checked")
        self.buf: Buffer = owner.parse_buffer()
        self.functions = {(normalize_domain(f.domain), f.name, f.overload) for f in model.functions}
        self.domains: dict[str, tuple[Node, str, dict[str, int]]] = {}  # custom domain -> first node, its path, op counts
        self.largest_dims: dict[int, int] = {}  # id(declared type) -> its largest dimension (types are shared)
        self.attributes: dict[int, tuple[Sequence[Node], list[Attribute]]] = {}  # id(node list) -> it, all its nodes' attributes

    def run(self) -> list[Finding]:
        model = self.model
        self.found.extend(static_findings(model, self.bounds))
        self.found.extend(expansion_findings(model, self.bounds.max_inlined_nodes))
        self._model_fields()
        for index, entry in enumerate(model.proto.opset_import):
            self._opset(entry, f"ModelProto.opset_import[{index}]")
        if self._may_hold_tensors():
            self._tensors()
        self._graph(model.graph.proto, model.graph.path)
        for index, training in enumerate(model.proto.training_info):
            self._training_info(training, f"ModelProto.training_info[{index}]")
        for index, function in enumerate(model.functions):
            self._function(function, f"ModelProto.functions[{index}]")
        self._custom_domains()
        self.found.sort(key=lambda finding: finding.offset)
        return self.found

    # --- placing

    def _add(self, code: str, message: str, field_path: str, offset: int, node: Node | None = None) -> None:
        self.found.append(_finding(code, message, field_path, offset, node))

    def _field(self, at: _At) -> tuple[str, int]:
        """The path and offset of a field (the holding message's when it is not found)."""
        assert at.holder_offset is not None
        found = find_field(self.buf, at.holder_offset, at.key, max(at.index, 0))
        if found is None:
            return at.holder_path, at.holder_offset
        return f"{at.holder_path}.{at.name}" + (f"[{at.index}]" if at.index >= 0 else ""), found

    def _top_field(self, at: _At) -> tuple[str, int]:
        """A field of the ModelProto itself (the whole file)."""
        fields = FieldCursor(self.buf, 0, len(self.buf))
        seen = 0
        while fields.next():
            if fields.key == at.key:
                if seen == max(at.index, 0):
                    return f"ModelProto.{at.name}" + (f"[{at.index}]" if at.index >= 0 else ""), fields.at
                seen += 1
        return "ModelProto", 0

    # --- text

    def _text(self, text: str, what: str, at: _At, node: Node | None = None, *, prose: bool = False) -> None:
        """Flag bidirectional controls and control characters in a name (`prose`: a doc string or a metadata value,
        where tab, newline and carriage return are allowed). `at` is where the string's field is."""
        if not text or (text.isascii() and text.isprintable()):
            return
        bidi = _BIDI.search(text)
        control = (_CONTROL_IN_TEXT if prose else _CONTROL_IN_NAME).search(text)
        if bidi is None and control is None:
            return
        path, offset = self._top_field(at) if at.holder_offset is None else self._field(at)
        if bidi is not None:
            char = bidi.group()
            name = unicodedata.name(char, "")
            message = f"{what} {quote(text)} holds the bidirectional control U+{ord(char):04X} {name}: what is shown is not what it is"
            self._add(BIDI_OVERRIDE_CHARACTER, message, path, offset, node)
        if control is not None:
            message = f"{what} {quote(text)} holds the control character U+{ord(control.group()):04X}"
            self._add(CONTROL_CHARACTER, message, path, offset, node)

    def _model_fields(self) -> None:
        proto = self.model.proto
        for name in ("producer_name", "producer_version", "domain", "doc_string"):
            self._text(
                getattr(proto, name), f"the model's {name}", _At(None, "ModelProto", _MODEL_KEYS[name], name), prose=name == "doc_string"
            )
        for index, entry in enumerate(proto.metadata_props):
            at = _At(None, "ModelProto", _MODEL_KEYS["metadata_props"], "metadata_props", index)
            self._text(entry.key, "metadata key", at)
            self._text(entry.value, f"metadata value of {quote(entry.key)}", at, prose=True)

    def _opset(self, entry: OperatorSetId, path: str) -> None:
        self._text(entry.domain, "imported domain", _At(entry.offset, path, _OPSET_KEYS["domain"], "domain"))

    def _tensors(self) -> None:
        """Every tensor (initializers, sparse parts, attribute tensors, in all graphs and functions): names, doc
        strings and external-data entries; the memory-address marker in a location."""
        for place in tensor_places(self.model.proto):
            tensor = place.tensor
            path = place.field_path
            self._text(tensor.name, "tensor name", _At(tensor.offset, path, _TENSOR_KEYS["name"], "name"))
            self._text(
                tensor.doc_string, "tensor doc string", _At(tensor.offset, path, _TENSOR_KEYS["doc_string"], "doc_string"), prose=True
            )
            if not tensor.external_data:
                continue
            for index, (key, value) in enumerate(tensor.external_data.items()):
                at = _At(tensor.offset, path, _TENSOR_KEYS["external_data"], "external_data", index)
                self._text(key, "external-data key", at)
                self._text(value, f"external-data {quote(key)}", at)
            location = tensor.external_data.get("location", "")
            if _MARKER_CORE in location:
                index = list(tensor.external_data).index("location")
                where = self._field(_At(tensor.offset, path, _TENSOR_KEYS["external_data"], "external_data", index))
                exact = "is" if location == MEMORY_ADDRESS_MARKER else "holds"
                message = (
                    f"tensor {quote(tensor.name)}'s external-data location {quote(location)} {exact} onnxruntime's memory-address "
                    f"marker {quote(MEMORY_ADDRESS_MARKER)}: onnxruntime would read the tensor from its own memory at the given offset"
                )
                self._add(EXTERNAL_DATA_MEMORY_ADDRESS, message, *where)

    # --- graphs and nodes

    def _graph(self, graph: Graph, path: str) -> None:
        self._text(graph.name, "graph name", _At(graph.offset, path, _GRAPH_KEYS["name"], "name"))
        self._text(graph.doc_string, "graph doc string", _At(graph.offset, path, _GRAPH_KEYS["doc_string"], "doc_string"), prose=True)
        for field in ("input", "output", "value_info"):
            self._value_infos(getattr(graph, field), f"{path}.{field}")
        self._nodes(graph.node, path)

    def _value_infos(self, infos: list[ValueInfo], path: str) -> None:
        """Names and doc strings of value declarations; their dimensions past the bound."""
        quiet = _quiet(map(_NAME, infos)) and _quiet(map(_DOC, infos), prose=True)
        bound = self.bounds.max_declared_dim
        largest_dims = self.largest_dims
        types = list(map(_TYPE, infos))
        distinct = dict(zip(map(id, types), types, strict=True))  # declared types are shared: each looked at once
        for key, declared in distinct.items():
            if key not in largest_dims:
                largest_dims[key] = max(_declared_dims(declared), default=0)
        if quiet and all(largest_dims[key] <= bound for key in distinct):
            return
        for index, info in enumerate(infos):
            info_path = f"{path}[{index}]"
            if not quiet:
                self._text(info.name, "value name", _At(info.offset, info_path, _VALUE_INFO_KEYS["name"], "name"))
                self._text(
                    info.doc_string,
                    "value doc string",
                    _At(info.offset, info_path, _VALUE_INFO_KEYS["doc_string"], "doc_string"),
                    prose=True,
                )
            largest = largest_dims[id(info.type)]
            if largest > bound:
                message = f"value {quote(info.name)} is declared with a dimension of {largest}, more than the {bound} allowed"
                self._add(DECLARED_DIM_TOO_LARGE, message, info_path, info.offset)

    def _attributes(self, nodes: Sequence[Node]) -> list[Attribute]:
        """The attributes of all `nodes`, in order (made once per node list)."""
        known = self.attributes.get(id(nodes))
        if known is None:
            known = self.attributes[id(nodes)] = (nodes, list(chain.from_iterable(filter(None, map(_ATTRIBUTE, nodes)))))
        return known[1]

    def _may_hold_tensors(self) -> bool:
        """False only when the model has no tensor at all: no initializer, no function, no attribute that may hold one."""
        proto = self.model.proto
        if proto.functions or proto.training_info:
            return True
        if proto.graph is None:
            return False
        if proto.graph.initializer or proto.graph.sparse_initializer:
            return True
        return not _PLAIN_ATTRIBUTES.issuperset(map(_TYPE, self._attributes(proto.graph.node)))

    def _nodes(self, nodes: Sequence[Node], path: str) -> None:
        attributes = self._attributes(nodes)
        module, _ = _PYTHON_CALLBACK_ATTRIBUTES
        attributes_quiet = (
            _quiet(chain(map(_NAME, attributes), map(_REF, attributes)))
            and _quiet(map(_DOC, attributes), prose=True)
            and module not in set(map(_NAME, attributes))  # no Python callback named in attributes
            and _GRAPH_ATTRIBUTES.isdisjoint(map(_TYPE, attributes))  # no subgraph
        )
        ops, domains = set(map(_OP_TYPE, nodes)), set(map(_DOMAIN, nodes))
        texts_quiet = _quiet(chain(map(_NAME, nodes), map("".join, map(_OUTPUT, nodes)), ops, domains)) and _quiet(
            map(_DOC, nodes), prose=True
        )
        odd_ops = {op for op in ops if _python_named(op)}
        odd_domains = {domain for domain in domains if normalize_domain(domain) not in ONNX_DOMAINS}
        if texts_quiet and attributes_quiet and not odd_ops and not odd_domains:
            return  # nothing here to flag, and no subgraph
        for index, node in enumerate(nodes):
            if texts_quiet and (attributes_quiet or not node.attribute) and node.op_type not in odd_ops and node.domain not in odd_domains:
                continue
            node_path = f"{path}.node[{index}]"
            self._node(node, node_path)
            for a_index, attribute in enumerate(node.attribute):
                if attribute.type is AttributeType.GRAPH and isinstance(attribute.value, Graph):
                    self._graph(attribute.value, f"{node_path}.attribute[{a_index}].g")
                elif attribute.type is AttributeType.GRAPHS and isinstance(attribute.value, list):
                    for g_index, item in enumerate(attribute.value):
                        if isinstance(item, Graph):
                            self._graph(item, f"{node_path}.attribute[{a_index}].graphs[{g_index}]")

    def _node(self, node: Node, path: str) -> None:
        domain = normalize_domain(node.domain)
        if (domain, node.op_type, node.overload) not in self.functions:  # a call of a local function runs its body
            self._python_callback(node, path)
            if domain not in ONNX_DOMAINS:
                first = self.domains.get(domain)
                if first is None:
                    first = self.domains[domain] = (node, path, {})
                first[2][node.op_type] = first[2].get(node.op_type, 0) + 1
        plain = "".join((node.name, node.op_type, node.domain, *node.output))
        if not (plain.isascii() and plain.isprintable()):
            self._text(node.name, "node name", _At(node.offset, path, _NODE_KEYS["name"], "name"), node)
            self._text(node.op_type, "op type", _At(node.offset, path, _NODE_KEYS["op_type"], "op_type"), node)
            self._text(node.domain, "node domain", _At(node.offset, path, _NODE_KEYS["domain"], "domain"), node)
            for index, output in enumerate(node.output):
                self._text(output, "value name", _At(node.offset, path, _NODE_KEYS["output"], "output", index), node)
        if node.doc_string:
            self._text(node.doc_string, "node doc string", _At(node.offset, path, _NODE_KEYS["doc_string"], "doc_string"), node, prose=True)
        for index, attribute in enumerate(node.attribute):
            plain = attribute.name + attribute.ref_attr_name + attribute.doc_string
            if plain.isascii() and plain.isprintable():
                continue
            at = _At(node.offset, path, _NODE_KEYS["attribute"], "attribute", index)
            self._text(attribute.name, "attribute name", at, node)
            self._text(attribute.ref_attr_name, "attribute reference", at, node)
            self._text(attribute.doc_string, "attribute doc string", at, node, prose=True)

    def _python_callback(self, node: Node, path: str) -> None:
        attributes = {attribute.name for attribute in node.attribute} if node.attribute else set()
        module, callables = _PYTHON_CALLBACK_ATTRIBUTES
        why = ""
        if _python_named(node.op_type):
            why = "is named like a Python callback"
        elif module in attributes and attributes & callables:
            why = f"names a Python module and callable in its attributes ({', '.join(sorted(attributes & {module, *callables}))})"
        if why:
            message = f"op {quote(node.op_type)} of {_domain_name(node.domain)} {why}: where it runs, it runs Python code the model names"
            self._add(PYTHON_CALLBACK_OP, message, *self._field(_At(node.offset, path, _NODE_KEYS["op_type"], "op_type")), node)

    def _function(self, function: Function, path: str) -> None:
        self._text(function.name, "function name", _At(function.offset, path, _FUNCTION_KEYS["name"], "name"))
        self._text(function.domain, "function domain", _At(function.offset, path, _FUNCTION_KEYS["domain"], "domain"))
        self._text(
            function.doc_string, "function doc string", _At(function.offset, path, _FUNCTION_KEYS["doc_string"], "doc_string"), prose=True
        )
        for field in ("input", "output", "attribute"):
            names: list[str] = getattr(function, field)
            for index, text in enumerate(names):
                self._text(text, f"function {field} name", _At(function.offset, path, _FUNCTION_KEYS[field], field, index))
        for index, entry in enumerate(function.opset_import):
            self._opset(entry, f"{path}.opset_import[{index}]")
        self._nodes(function.node, path)

    def _training_info(self, training: TrainingInfo, path: str) -> None:
        """Its two graphs, like the main graph, and the names its bindings pair."""
        for field in ("initialization", "algorithm"):
            graph: Graph | None = getattr(training, field)
            if graph is not None:
                self._graph(graph, f"{path}.{field}")
        for field, key in _TRAINING_KEYS.items():
            entries: list[StringStringEntry] = getattr(training, field)
            for index, entry in enumerate(entries):
                at = _At(training.offset, path, key, field, index)
                self._text(entry.key, "training binding key", at)
                self._text(entry.value, "training binding value", at)

    def _custom_domains(self) -> None:
        for domain, (node, path, ops) in self.domains.items():
            count = sum(ops.values())
            names = sorted(ops)
            listed = ", ".join(quote(op) for op in names[:_MAX_LISTED_OPS]) + (
                f", ... ({len(names)} ops)" if len(names) > _MAX_LISTED_OPS else ""
            )
            note = " (onnxruntime's contrib ops, built into onnxruntime only)" if domain == "com.microsoft" else ""
            message = (
                f"{count} node(s) of custom domain {quote(domain)}{note}, the first here: they run only where a custom-op library "
                f"for it is registered: {listed}"
            )
            self._add(CUSTOM_OPERATOR_DOMAIN, message, *self._field(_At(node.offset, path, _NODE_KEYS["domain"], "domain")), node)


@dataclass(frozen=True, slots=True)
class _At:
    """Where a string field is: in the message whose key is at `holder_offset`
    (None: the ModelProto, the whole file) and whose path is `holder_path`, the
    `index`-th field of key `key`, named `name` (-1: a singular field)."""

    holder_offset: int | None
    holder_path: str
    key: int
    name: str
    index: int = -1


def _declared_dims(declared: TypeProto | None) -> Iterator[int]:
    """Every dim_value of a type, through sequences, optionals and maps."""
    depth = 0
    while declared is not None and depth < 1000:
        depth += 1
        if type(declared) is TensorType:
            if declared.shape is not None:
                yield from (dim for dim in declared.shape if isinstance(dim, int))
            return
        if isinstance(declared, (SequenceType, OptionalType)):
            declared = declared.elem_type
        elif isinstance(declared, MapType):
            declared = declared.value_type
        else:
            return


def _quiet(texts: Iterable[str], *, prose: bool = False) -> bool:
    """Whether none of `texts` holds what `_Scan._text` flags, in one pass over all of them (the patterns match one
    character each, so the joined text matches exactly when one of the texts does)."""
    joined = "".join(texts)
    if joined.isascii() and joined.isprintable():
        return True
    return _BIDI.search(joined) is None and (_CONTROL_IN_TEXT if prose else _CONTROL_IN_NAME).search(joined) is None


def _python_named(op_type: str) -> bool:
    name = op_type.lower().replace("_", "")
    return name in PYTHON_OP_NAMES or "python" in name


def _domain_name(domain: str) -> str:
    return "the default domain" if normalize_domain(domain) == "" else f"domain {quote(domain)}"
