"""The operator check: every node against its operator's schema, each finding placed in the file.

Owns `check_model(model) -> list[Diagnostic]`: the verdict `onnx.checker`
gives on operators, with the field path and byte offset of each finding, in
file order. Refusals stay refusals: only a model the importer accepted
reaches the check. The model must be open (the offsets of fields the reader
keeps none for are found again in its bytes, and only for findings).

Per node, under the schema its domain and imported opset version select
(`importer.op_schemas`; the rules are `importer.check_node`):

- the op exists at that version (`unknown-op`, `op-not-yet-defined`) and is
  not deprecated (`op-deprecated`); a default-domain op the checker skips as
  experimental is a warning (`experimental-op`);
- `no-inputs-or-outputs`; input and output counts (`too-few-inputs`,
  `too-many-inputs`, `input-count-not-allowed`, and the same for outputs);
  a Single formal parameter given an empty name (`required-input-empty`,
  `required-output-empty`);
- attributes: declared (`unknown-attribute`), of the declared type
  (`attribute-type`), required ones present (`missing-attribute`), names not
  repeated (`duplicate-attribute`, on every node, as the checker does), a
  Constant with exactly one value (`constant-value`);
- input types, where known (declared inputs and outputs, value_info,
  initializers): within the formal parameter's types (`input-type`), one type
  per homogeneous type parameter (`input-types-differ`).

Per model: an opset import newer than the table is a warning
(`opset-newer-than-table`), and so is every finding of a node in such a
domain (the newer opset may allow it); nodes of custom domains, which have no
schema, are listed as not checked, one warning per domain and scope at its
opset import (`domain-not-checked`). Model-local functions: their bodies are
checked against their own opset imports (input types are not known there),
a body node's domain must be imported by its function (`domain-not-imported`)
and select the same schema as the model's import of it
(`function-opset-incompatible`); a node that calls a local function (domain,
name and overload) is resolved to it and checked against its declaration
(`too-many-inputs`, `too-many-outputs`, `unknown-attribute`).

Deliberate differences from onnx.checker.check_model (1.23):

- input types are checked as `check_model(full_check=True)` checks them (its
  strict type inference); the plain checker does not check them, nor
  Constant's one-value rule (its inference does);
- the domain `ai.onnx` is the default domain (ONNX's own rule and the
  importer's); the checker finds no schema for a node that spells it out;
- a node calling a model-local function is resolved to it; the checker looks
  for a schema and, in the default domain, refuses the node;
- function bodies are checked whatever the IR version; the checker checks
  them only from IR version 8;
- an attribute whose type was inferred (no `type` field, docs/import-rules.md
  §2) is checked with the inferred type; the checker refuses the missing
  field before it looks at the schema;
- an opset newer than the table downgrades that domain's findings to
  warnings; the checker applies its newest schemas as if they were current.

Not this check's: what onnx.checker verifies beyond operators (tensors and
sparse tensors, value_info, names, IR version limits; references and node
order are the importer's own rules, docs/import-rules.md §4), the types of
outputs, and what only the shape inference of `full_check` finds beyond the
input types above.

In the main graph, input types are checked from the values' side (each value
of a known type against its consumers), which looks up only the values that
have a type; in subgraphs, node by node.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from importer.attribute_types import AttributeType
from importer.check_node import (
    AT_ATTRIBUTE,
    AT_DOMAIN,
    AT_INPUT,
    AT_NODE,
    AT_OP_TYPE,
    AT_OUTPUT,
    Finding,
    NodeRules,
    duplicate_attributes,
)
from importer.diagnostics import SEVERITY, Code, Diagnostic, Severity, bounded
from importer.errors import ErrorKind, ModelImportError, quote
from importer.graph import OnnxModel, ResolvedGraph
from importer.messages import Function, Graph, Node, OperatorSetId, TensorType
from importer.op_schemas import OpSchema, SchemaTable, schema_table
from importer.resolve import normalize_domain
from importer.wire import Buffer, find_field

# NodeProto keys (field << 3 | wire type) of the fields a finding may name.
_FIELD_KEYS: Final = {AT_INPUT: 0x0A, AT_OUTPUT: 0x12, AT_OP_TYPE: 0x22, AT_ATTRIBUTE: 0x2A, AT_DOMAIN: 0x3A}
_GRAPH_TYPES: Final = (AttributeType.GRAPH, AttributeType.GRAPHS)
_MAX_LISTED_OPS: Final = 8


class _Unchecked:
    """The verdict for an op of a custom domain: no schema, not checked."""


class _Fixed:
    """A verdict that is the same for every node of one op: unknown, deprecated, ..."""

    __slots__ = ("finding",)

    def __init__(self, finding: Finding) -> None:
        self.finding = finding


class _Call:
    """A node that calls a model-local function."""

    __slots__ = ("function", "attributes")

    def __init__(self, function: Function) -> None:
        self.function = function
        self.attributes = frozenset(function.attribute) | {attribute.name for attribute in function.attribute_proto}


_UNCHECKED: Final = _Unchecked()
_Verdict = NodeRules | _Fixed | _Call | _Unchecked


class _Scope:
    """The opset imports nodes are checked under: the model's, or one
    function's (`entries`, their field path `path`)."""

    def __init__(self, versions: dict[str, int], entries: list[OperatorSetId], path: str, table: SchemaTable) -> None:
        self.versions = dict(versions)
        if "" in versions:
            self.versions["ai.onnx"] = versions[""]
        self.entries = entries
        self.path = path
        self.newer = {domain for domain, version in versions.items() if version > table.domain_max_versions.get(domain, version)}
        self.verdicts: dict[str, dict[str, _Verdict]] = {}  # domain as written -> op_type -> verdict
        self.unchecked: dict[str, dict[str, int]] = {}  # normalized domain -> op_type -> nodes


class _Checker:
    def __init__(self, model: OnnxModel, table: SchemaTable) -> None:
        self.model = model
        self.table = table
        self.diagnostics: list[Diagnostic] = []
        functions = model.functions
        self.functions = {(normalize_domain(f.domain), f.name, f.overload): f for f in functions} if functions else {}
        self._buf: Buffer | None = None

    # --- the walk

    def run(self) -> list[Diagnostic]:
        model = self.model
        self._refuse_closed()  # whether or not there is a finding to place
        main = _Scope(model.opsets, model.proto.opset_import, "ModelProto", self.table)
        if not self.functions:  # then a verdict depends only on the opsets and the table: shared by such models
            main.verdicts = _shared_verdicts(self.table, main.versions)
        self._newer_opsets(main)
        self._graph(model.graph, main, types_by_value=True)
        for subgraph in model.graph.subgraphs():  # every level, depth first
            self._graph(subgraph, main)
        self._unchecked_domains(main)
        if model.functions:
            merged = dict(model.opsets)  # the checker's model imports, completed by the functions' (first wins)
            for function in model.functions:
                for entry in function.opset_import:
                    merged.setdefault(normalize_domain(entry.domain), entry.version)
            for index, function in enumerate(model.functions):
                self._function(function, index, merged)
        if len(self.diagnostics) > 1:
            self.diagnostics.sort(key=lambda d: d.offset)
        return self.diagnostics

    def _graph(self, graph: ResolvedGraph, scope: _Scope, types_by_value: bool = False) -> None:
        """A graph's own nodes, in file order. The hot loop: a node whose op
        has a schema already compiled takes the short way. With
        `types_by_value`, input types are checked afterwards from the values'
        side (`_value_types`), else node by node."""
        verdicts = scope.verdicts
        path = graph.path
        nodes = graph.proto.node
        rules_of: list[NodeRules | None] = [None] * len(nodes) if types_by_value else []
        lookup_graph = None if types_by_value else graph
        default = verdicts.get("")
        for index, node in enumerate(nodes):
            by_op = verdicts.get(node.domain) if node.domain else default
            verdict = by_op.get(node.op_type) if by_op is not None and not node.overload else None
            if verdict is None:
                verdict = self._cached_verdict(node, scope)
                default = verdicts.get("")
            if type(verdict) is not NodeRules:
                self._other(node, index, path, scope, verdict)
                continue
            found = verdict.check(node, lookup_graph)
            if found:
                self._place(node, index, path, found, scope)
            if types_by_value:
                rules_of[index] = verdict
        if types_by_value:
            self._value_types(graph, rules_of, scope)

    def _value_types(self, graph: ResolvedGraph, rules_of: list[NodeRules | None], scope: _Scope) -> None:
        """Input types, from the values' side: each value of a known type
        against each of its consumers' formal parameters. Cheaper than a look-up
        per input when few values have a type (weights and declared inputs,
        value_info for some). A node whose schema binds inputs together is
        checked node by node."""
        found: dict[int, list[Finding]] = {}
        together: set[int] = set()
        for value in graph.values.values():
            value_type = value.type
            if value_type is None or not value.consumers:
                continue
            name = value.name
            code = value_type.elem_type if type(value_type) is TensorType and not value_type.sparse else -1
            for consumer in value.consumers:
                index = consumer.index
                rules = rules_of[index]
                if rules is None:
                    continue
                if rules.slot_count:
                    together.add(index)
                    continue
                inputs = consumer.proto.input
                codes = rules.position_codes
                if len(inputs) == 1 and codes and code in codes[0]:
                    continue  # the common case: one input, of an allowed tensor type
                for position, input_name in enumerate(inputs):
                    if input_name != name or (position < len(codes) and code in codes[position]):
                        continue
                    finding = rules.type_finding(position, value_type)
                    if finding is not None:
                        found.setdefault(index, []).append(finding)
        for index in together:
            rules = rules_of[index]
            assert rules is not None
            more = rules.types(graph.proto.node[index].input, graph)
            if more:
                found.setdefault(index, []).extend(more)
        nodes = graph.proto.node
        for index in sorted(found):
            self._place(nodes[index], index, graph.path, sorted(found[index], key=lambda f: f.position), scope)

    def _function(self, function: Function, index: int, merged: dict[str, int]) -> None:
        path = f"ModelProto.functions[{index}]"
        versions = {normalize_domain(entry.domain): entry.version for entry in function.opset_import}
        scope = _Scope(versions, function.opset_import, path, self.table)
        self._newer_opsets(scope)
        self._body(function.node, path, scope, merged)
        self._unchecked_domains(scope)

    def _body(self, nodes: Sequence[Node], path: str, scope: _Scope, merged: dict[str, int]) -> None:
        """Nodes of a function body or of a graph inside one (not resolved: no types)."""
        for index, node in enumerate(nodes):
            domain = normalize_domain(node.domain)
            if domain not in scope.versions:
                finding = Finding(Code.DOMAIN_NOT_IMPORTED, f"domain {quote(node.domain)} is not imported by the function", AT_DOMAIN)
                self._place(node, index, path, [finding], scope)
                continue
            self._compatible(node, index, path, scope, merged)
            self._node(node, index, path, scope, None)
            for a_index, attribute in enumerate(node.attribute):
                if attribute.type in _GRAPH_TYPES:
                    graphs = attribute.value if isinstance(attribute.value, list) else [attribute.value]
                    for g_index, graph in enumerate(graphs):
                        if isinstance(graph, Graph):
                            segment = "g" if attribute.type is AttributeType.GRAPH else f"graphs[{g_index}]"
                            self._body(graph.node, f"{path}.node[{index}].attribute[{a_index}].{segment}", scope, merged)

    def _node(self, node: Node, index: int, path: str, scope: _Scope, graph: ResolvedGraph | None) -> None:
        verdict = self._cached_verdict(node, scope)
        if type(verdict) is NodeRules:
            found = verdict.check(node, graph)
            if found:
                self._place(node, index, path, found, scope)
        else:
            self._other(node, index, path, scope, verdict)

    def _cached_verdict(self, node: Node, scope: _Scope) -> _Verdict:
        """The verdict for the node's op in this scope, decided once per op."""
        by_op = scope.verdicts.get(node.domain)
        if by_op is None:
            by_op = scope.verdicts[node.domain] = {}
        key = node.op_type if not node.overload else f"{node.op_type}\x00{node.overload}"
        verdict = by_op.get(key)
        if verdict is None:
            if len(by_op) >= _MAX_CACHED_OPS:  # a domain of made-up ops (the dict may be shared): start again
                by_op.clear()
            verdict = by_op[key] = self._verdict(node, scope)
        return verdict

    def _other(self, node: Node, index: int, path: str, scope: _Scope, verdict: _Verdict) -> None:
        """A node whose op has no schema to check it against (or a fixed verdict)."""
        found: list[Finding] | None
        if type(verdict) is _Fixed:
            found = [verdict.finding]
        elif type(verdict) is _Call:
            found = _call(node, verdict)
        else:
            counts = scope.unchecked.setdefault(normalize_domain(node.domain), {})
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
            found = None
        if not node.input and not node.output:  # NodeRules checks these two itself
            found = [Finding(Code.NO_INPUTS_OR_OUTPUTS, "the node has no inputs and no outputs"), *(found or ())]
        duplicates = duplicate_attributes(node.attribute)
        if duplicates:
            found = [*(found or ()), *duplicates]
        if found:
            self._place(node, index, path, found, scope)

    def _verdict(self, node: Node, scope: _Scope) -> _Verdict:
        table = self.table
        domain = normalize_domain(node.domain)
        version = scope.versions[node.domain] if node.domain in scope.versions else scope.versions[domain]
        if not node.overload:
            by_schema = _schema_verdict(table, domain, node.op_type, version)
            if by_schema is not None:
                return by_schema
        function = self.functions.get((domain, node.op_type, node.overload))
        if function is not None:
            return _Call(function)
        if domain == "" and node.op_type in table.experimental_ops:
            return _Fixed(Finding(Code.EXPERIMENTAL_OP, f"experimental op {quote(node.op_type)} is not checked", AT_OP_TYPE))
        known = table.domains.get(domain)
        if known is None or not known.strict:
            return _UNCHECKED
        first = table.first_version(domain, node.op_type)
        if first is not None and first > version:
            return _Fixed(
                Finding(
                    Code.OP_NOT_YET_DEFINED,
                    f"{quote(node.op_type)} is defined from opset {first} of {_domain_name(domain)}; the node's opset is {version}",
                    AT_OP_TYPE,
                )
            )
        return _Fixed(Finding(Code.UNKNOWN_OP, f"no op {quote(node.op_type)} in {_domain_name(domain)} at opset {version}", AT_OP_TYPE))

    def _compatible(self, node: Node, index: int, path: str, scope: _Scope, merged: dict[str, int]) -> None:
        """The checker's rule: a body node's op must select the same schema
        under the function's import of its domain as under the model's."""
        domain = normalize_domain(node.domain)
        model_version = merged.get(domain)
        own_version = scope.versions[domain]
        if model_version is None or model_version == own_version:
            return
        ours = self.table.lookup(domain, node.op_type, own_version)
        theirs = self.table.lookup(domain, node.op_type, model_version)
        if ours is None and theirs is None:
            return
        if ours is None or theirs is None or ours.since_version != theirs.since_version:
            message = (
                f"{quote(node.op_type)} selects a different schema under the function's opset {own_version} "
                f"of {_domain_name(domain)} than under the model's {model_version}"
            )
            self._place(node, index, path, [Finding(Code.FUNCTION_OPSET_INCOMPATIBLE, message, AT_OP_TYPE)], scope)

    # --- model-level findings

    def _newer_opsets(self, scope: _Scope) -> None:
        if not scope.newer:
            return
        path = scope.path
        for index, entry in enumerate(scope.entries):
            domain = normalize_domain(entry.domain)
            top = self.table.max_version(domain)
            if top is not None and entry.version > top:
                message = (
                    f"opset {entry.version} of {_domain_name(domain)} is newer than the schema table's {top} "
                    f"(onnx {self.table.onnx_version}): its nodes are checked against opset {top}, findings as warnings"
                )
                self._add(Code.OPSET_NEWER_THAN_TABLE, message, None, f"{path}.opset_import[{index}]", entry.offset, Severity.WARNING)

    def _unchecked_domains(self, scope: _Scope) -> None:
        for domain, counts in sorted(scope.unchecked.items()):
            nodes = sum(counts.values())
            ops = sorted(counts)
            listed = ", ".join(quote(op) for op in ops[:_MAX_LISTED_OPS]) + (
                f", ... ({len(ops)} ops)" if len(ops) > _MAX_LISTED_OPS else ""
            )
            message = f"{nodes} node(s) of custom domain {quote(domain)} not checked (no schema): {listed}"
            index, entry = next((i, e) for i, e in enumerate(scope.entries) if normalize_domain(e.domain) == domain)
            self._add(Code.DOMAIN_NOT_CHECKED, message, None, f"{scope.path}.opset_import[{index}]", entry.offset, Severity.WARNING)

    # --- placing findings

    def _place(self, node: Node, index: int, path: str, found: list[Finding], scope: _Scope) -> None:
        node_path = f"{path}.node[{index}]"
        newer = normalize_domain(node.domain) in scope.newer
        for finding in found:
            field_path, offset = node_path, node.offset
            if finding.field != AT_NODE:
                at = find_field(self._buffer(), node.offset, _FIELD_KEYS[finding.field], max(finding.position, 0))
                if at is not None:
                    segment = finding.field if finding.position < 0 else f"{finding.field}[{finding.position}]"
                    field_path, offset = f"{node_path}.{segment}", at
            severity = Severity.WARNING if newer else SEVERITY[finding.code]
            self._add(finding.code, finding.message, node, field_path, offset, severity)

    def _add(self, code: Code, message: str, node: Node | None, field_path: str, offset: int, severity: Severity) -> None:
        self.diagnostics.append(
            Diagnostic(
                severity=severity,
                code=code,
                message=bounded(message),
                node_name=node.name if node is not None else None,
                op_type=node.op_type if node is not None else None,
                domain=node.domain if node is not None else None,
                field_path=field_path,
                offset=offset,
            )
        )

    def _buffer(self) -> Buffer:
        """The model's bytes, to find the offset of a field the reader kept none for."""
        self._refuse_closed()
        if self._buf is None:
            self._buf = self.model.owners[0].parse_buffer()
        return self._buf

    def _refuse_closed(self) -> None:
        owner = self.model.owners[0]
        if owner.closed:
            raise ModelImportError(ErrorKind.IO, "the model was closed; it can no longer be checked", input_name=owner.name)


# Verdicts that depend on the schema table alone, kept for the process (a
# table's schemas never change): (id of the table, domain, op_type, version)
# -> the table (kept alive, so that its id stays its own) and the compiled
# rules, the deprecation finding, or None when no schema applies. Bounded:
# op names and versions come from the input.
_SCHEMA_VERDICTS: Final[dict[tuple[int, str, str, int], tuple[SchemaTable, NodeRules | _Fixed | None]]] = {}
_COMPILED: Final[dict[int, tuple[OpSchema, NodeRules]]] = {}  # id(OpSchema) -> the schema and its rules
_MAX_CACHED_VERDICTS: Final = 20_000


def _schema_verdict(table: SchemaTable, domain: str, op_type: str, version: int) -> NodeRules | _Fixed | None:
    key = (id(table), domain, op_type, version)
    entry = _SCHEMA_VERDICTS.get(key)
    if entry is not None and entry[0] is table:
        return entry[1]
    schema = table.lookup(domain, op_type, version)
    verdict: NodeRules | _Fixed | None = None
    if schema is not None and schema.deprecated:
        verdict = _Fixed(Finding(Code.OP_DEPRECATED, f"{quote(op_type)} is deprecated since opset {schema.since_version}", AT_OP_TYPE))
    elif schema is not None:
        compiled = _COMPILED.get(id(schema))
        if compiled is None or compiled[0] is not schema:
            compiled = _COMPILED[id(schema)] = (schema, NodeRules(schema, table.elem_type_names))
        verdict = compiled[1]
    if len(_SCHEMA_VERDICTS) >= _MAX_CACHED_VERDICTS:
        _SCHEMA_VERDICTS.clear()
    _SCHEMA_VERDICTS[key] = (table, verdict)
    return verdict


def _call(node: Node, call: _Call) -> list[Finding] | None:
    function = call.function
    found: list[Finding] = []
    name = f"function {quote(function.name)}"
    if len(node.input) > len(function.input):
        message = f"{name} takes at most {len(function.input)} input(s), the node has {len(node.input)}"
        found.append(Finding(Code.TOO_MANY_INPUTS, message, AT_INPUT, len(function.input)))
    if len(node.output) > len(function.output):
        message = f"{name} has at most {len(function.output)} output(s), the node has {len(node.output)}"
        found.append(Finding(Code.TOO_MANY_OUTPUTS, message, AT_OUTPUT, len(function.output)))
    for index, attribute in enumerate(node.attribute):
        if attribute.name not in call.attributes:
            found.append(Finding(Code.UNKNOWN_ATTRIBUTE, f"{name} has no attribute {quote(attribute.name)}", AT_ATTRIBUTE, index))
    return found or None


def _domain_name(domain: str) -> str:
    return "the default domain" if domain == "" else f"domain {quote(domain)}"


_SHARED_VERDICTS: Final[dict[tuple[int, tuple[tuple[str, int], ...]], tuple[SchemaTable, dict[str, dict[str, _Verdict]]]]] = {}
_MAX_SHARED_SCOPES: Final = 64  # distinct opset imports whose verdicts are kept
_MAX_CACHED_OPS: Final = 4096  # verdicts kept per domain of one scope


def _shared_verdicts(table: SchemaTable, versions: dict[str, int]) -> dict[str, dict[str, _Verdict]]:
    """The verdicts of every model with these opset imports and no functions
    (domain as written -> op_type -> verdict), kept across models: deciding
    them again for each of thousands of small models was a tenth of the check."""
    key = (id(table), tuple(sorted(versions.items())))
    entry = _SHARED_VERDICTS.get(key)
    if entry is not None and entry[0] is table:
        return entry[1]
    if len(_SHARED_VERDICTS) >= _MAX_SHARED_SCOPES:
        _SHARED_VERDICTS.clear()
    verdicts: dict[str, dict[str, _Verdict]] = {}
    _SHARED_VERDICTS[key] = (table, verdicts)
    return verdicts


def check_model(model: OnnxModel) -> list[Diagnostic]:
    """Check every node of an imported (open) model against its operator's
    schema; the diagnostics in file order (by offset)."""
    return _Checker(model, schema_table()).run()
