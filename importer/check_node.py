"""The rules one node must follow under its operator's schema.

Owns `NodeRules`: an `OpSchema` compiled for the per-node hot loop of
`importer.check`, and its verdict on one node: input and output counts
(within [min, max], within the allowed set when the schema restricts it),
no empty name where a formal parameter is Single, every attribute declared
(unless the schema accepts undeclared ones, or the name starts with `__`,
which the checker also ignores) and of the declared type, required
attributes present, names not repeated, Constant given exactly one value,
and the element types of inputs whose type is known within the formal
parameter's allowed types, one type per homogeneous type parameter. Also
`type_string` (a type as the checker spells it) and `Finding`, a verdict
before it is placed in the file.

The verdict is None when the node passes: most nodes, at no allocation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from importer.diagnostics import Code
from importer.errors import quote
from importer.graph import ResolvedGraph
from importer.messages import Attribute, MapType, Node, OpaqueType, OptionalType, SequenceType, TensorType, TypeProto
from importer.op_schemas import SINGLE, VARIADIC, FormalParameter, OpSchema

# Where a finding is, within its node: the whole node, or one of its fields.
AT_NODE: Final = ""
AT_OP_TYPE: Final = "op_type"
AT_DOMAIN: Final = "domain"
AT_INPUT: Final = "input"
AT_OUTPUT: Final = "output"
AT_ATTRIBUTE: Final = "attribute"

INTERNAL_PREFIX: Final = "__"  # attributes the checker treats as implementation details
_HOT_VARIADIC_INPUTS: Final = 64  # inputs of a variadic op the hot path types; more go to the slow path
_CONSTANT: Final = ("", "Constant")


class Finding(NamedTuple):
    """A verdict on a node: `field` is one of the AT_* names, `position` the
    entry of a repeated field (-1 for a singular field or the node)."""

    code: Code
    message: str
    field: str = AT_NODE
    position: int = -1


def type_string(value_type: TypeProto, names: dict[int, str]) -> str | None:
    """The type as onnx spells it ("tensor(float)", "seq(tensor(int64))",
    "map(string,tensor(float))"), or None when it is incomplete or its
    element type is not a defined one."""
    if isinstance(value_type, TensorType):
        name = names.get(value_type.elem_type)
        if name is None:
            return None
        return f"sparse_tensor({name})" if value_type.sparse else f"tensor({name})"
    if isinstance(value_type, SequenceType | OptionalType):
        if value_type.elem_type is None:
            return None
        inner = type_string(value_type.elem_type, names)
        if inner is None:
            return None
        return f"seq({inner})" if isinstance(value_type, SequenceType) else f"optional({inner})"
    if isinstance(value_type, MapType):
        key = names.get(value_type.key_type)
        if key is None or value_type.value_type is None:
            return None
        inner = type_string(value_type.value_type, names)
        return None if inner is None else f"map({key},{inner})"
    assert isinstance(value_type, OpaqueType)
    domain = f"{value_type.domain}," if value_type.domain else ""
    return f"opaque({domain}{value_type.name})"


class _Param:
    """A formal input compiled for the type check."""

    __slots__ = ("name", "type_str", "types", "tensor_codes", "homogeneous")

    def __init__(self, param: FormalParameter, tensor_codes: dict[str, int]) -> None:
        self.name = param.name
        self.type_str = param.type_str
        self.types = param.types
        codes = _CODES_OF_TYPES.get(param.types)  # the table shares one set per distinct list of types
        if codes is None:
            codes = _CODES_OF_TYPES[param.types] = frozenset(code for text in param.types if (code := tensor_codes.get(text)) is not None)
        self.tensor_codes = codes
        self.homogeneous = param.is_homogeneous


# A formal parameter's types -> the element types of the plain tensors among them.
_CODES_OF_TYPES: Final[dict[frozenset[str], frozenset[int]]] = {}
_TENSOR_CODES: Final[dict[int, tuple[dict[int, str], dict[str, int]]]] = {}  # id(names) -> names, "tensor(float)" -> 1


def _tensor_codes(names: dict[int, str]) -> dict[str, int]:
    entry = _TENSOR_CODES.get(id(names))
    if entry is None or entry[0] is not names:
        entry = _TENSOR_CODES[id(names)] = (names, {f"tensor({name})": code for code, name in names.items()})
    return entry[1]


class NodeRules:
    """One schema, compiled. `check(node, graph)`: the findings, or None.

    `check` is the hot path: a conservative test that the node passes every
    rule, at no allocation for most nodes; anything it cannot clear at once
    (a count, an empty name, an unexpected attribute, a type that is not a
    plain allowed tensor, ...) goes to `findings`, which decides.
    """

    __slots__ = (
        "schema",
        "input_ok",
        "output_ok",
        "single_inputs",
        "single_outputs",
        "may_be_empty",
        "attributes",
        "unchecked_attributes",
        "required",
        "params",
        "variadic_last",
        "binds_types",
        "position_codes",
        "position_slots",
        "slot_count",
        "names",
        "one_value",
    )

    def __init__(self, schema: OpSchema, names: dict[int, str]) -> None:
        self.schema = schema
        self.input_ok = schema.input_counts if schema.input_counts is not None else range(schema.min_input, schema.max_input + 1)
        self.output_ok = schema.output_counts if schema.output_counts is not None else range(schema.min_output, schema.max_output + 1)
        self.single_inputs = any(p.option == SINGLE for p in schema.inputs)
        self.single_outputs = any(p.option == SINGLE for p in schema.outputs)
        self.may_be_empty = 0 in self.input_ok and 0 in self.output_ok
        self.attributes = {name: spec.type for name, spec in schema.attributes.items()}
        self.unchecked_attributes = schema.unchecked_attributes
        self.required = tuple(name for name, spec in sorted(schema.attributes.items()) if spec.required)
        tensor_codes = _tensor_codes(names)
        self.params = tuple(_Param(p, tensor_codes) for p in schema.inputs)
        self.variadic_last = bool(schema.inputs) and schema.inputs[-1].option == VARIADIC
        # a homogeneous type parameter that more than one input may bind
        type_strs = [p.type_str for p in schema.inputs if p.is_homogeneous]
        self.binds_types = len(set(type_strs)) < len(type_strs) or any(p.is_homogeneous and p.option == VARIADIC for p in schema.inputs)
        # per input position, for the hot path: the allowed tensor element
        # types, and the slot of the type parameter it binds (-1: none)
        positions = list(self.params)
        if self.variadic_last:
            positions += [positions[-1]] * (_HOT_VARIADIC_INPUTS - len(positions))
        slots: dict[str, int] = {}
        if self.binds_types:
            for param in self.params:
                if param.homogeneous:
                    slots.setdefault(param.type_str, len(slots))
        self.position_codes = tuple(param.tensor_codes for param in positions)
        self.position_slots = tuple(slots.get(param.type_str, -1) if param.homogeneous else -1 for param in positions)
        self.slot_count = len(slots)
        self.names = names
        self.one_value = (schema.domain, schema.name) == _CONSTANT

    def check(self, node: Node, graph: ResolvedGraph | None) -> list[Finding] | None:
        """`graph`: where the node's input names are looked up for their
        types (None: types unknown, as in function bodies)."""
        inputs = node.input
        outputs = node.output
        if (
            len(inputs) not in self.input_ok
            or len(outputs) not in self.output_ok
            or (self.single_inputs and "" in inputs)
            or (self.single_outputs and "" in outputs)
            or (self.may_be_empty and not inputs and not outputs)
        ):
            return self.findings(node, graph)
        attributes = node.attribute
        if attributes:
            declared = self.attributes
            for attribute in attributes:
                if declared.get(attribute.name) is not attribute.type:
                    return self.findings(node, graph)
            if len(attributes) > 1 or self.required:
                names = {attribute.name for attribute in attributes}
                if len(names) != len(attributes) or not names.issuperset(self.required):
                    return self.findings(node, graph)
        elif self.required:
            return self.findings(node, graph)
        if self.one_value and len(attributes) != 1:
            return self.findings(node, graph)
        if graph is None or not inputs:
            return None
        if len(inputs) > len(self.position_codes):
            return self.findings(node, graph)
        values = graph.values
        if self.slot_count:
            return self._bound_types(node, graph)
        for name, allowed in zip(inputs, self.position_codes, strict=False):  # inputs <= positions
            value = values.get(name)
            if value is None:
                if not name:
                    continue
                value = graph.lookup(name)  # an outer value (in a subgraph)
                if value is None:
                    continue
            value_type = value.type
            if value_type is not None and (type(value_type) is not TensorType or value_type.sparse or value_type.elem_type not in allowed):
                return self.findings(node, graph)
        return None

    def _bound_types(self, node: Node, graph: ResolvedGraph) -> list[Finding] | None:
        """The hot path's type test for a schema with a homogeneous type parameter
        that several inputs bind (Add, Concat, ...): one element type each."""
        values = graph.values
        bound = [0] * self.slot_count
        for name, allowed, slot in zip(node.input, self.position_codes, self.position_slots, strict=False):
            value = values.get(name)
            if value is None:
                if not name:
                    continue
                value = graph.lookup(name)
                if value is None:
                    continue
            value_type = value.type
            if value_type is None:
                continue
            if type(value_type) is not TensorType or value_type.sparse or value_type.elem_type not in allowed:
                return self.findings(node, graph)
            if slot >= 0:
                if not bound[slot]:
                    bound[slot] = value_type.elem_type
                elif bound[slot] != value_type.elem_type:
                    return self.findings(node, graph)
        return None

    def findings(self, node: Node, graph: ResolvedGraph | None) -> list[Finding] | None:
        """Every finding on the node, or None (the slow path, which decides)."""
        found: list[Finding] | None = None
        inputs = node.input
        count = len(inputs)
        if count not in self.input_ok:
            found = [self._count_finding(count, AT_INPUT)]
        elif self.single_inputs and "" in inputs:
            found = self._empty(inputs, self.schema.inputs, Code.REQUIRED_INPUT_EMPTY, AT_INPUT)
        outputs = node.output
        if len(outputs) not in self.output_ok:
            found = _add(found, [self._count_finding(len(outputs), AT_OUTPUT)])
        elif self.single_outputs and "" in outputs:
            found = _add(found, self._empty(outputs, self.schema.outputs, Code.REQUIRED_OUTPUT_EMPTY, AT_OUTPUT))
        if not inputs and not outputs:
            found = _add(found, [Finding(Code.NO_INPUTS_OR_OUTPUTS, "the node has no inputs and no outputs")])
        attributes = node.attribute
        if attributes:
            declared = self.attributes
            for index, attribute in enumerate(attributes):
                expected = declared.get(attribute.name)
                if expected is None:
                    if not self.unchecked_attributes and not attribute.name.startswith(INTERNAL_PREFIX):
                        found = _add(found, [self._unknown_attribute(attribute, index)])
                elif attribute.type is not expected:
                    found = _add(found, [_attribute_type(attribute, index, expected.name)])
            found = _add(found, duplicate_attributes(attributes))
            names = {attribute.name for attribute in attributes}
            found = _add(found, [_missing_attribute(name) for name in self.required if name not in names])
        elif self.required:
            found = _add(found, [_missing_attribute(name) for name in self.required])
        if self.one_value and len(attributes) != 1 and found is None:
            found = [Finding(Code.CONSTANT_VALUE, f"Constant needs exactly one value attribute, it has {len(attributes)}")]
        if graph is not None and count:
            found = _add(found, self.types(inputs, graph))
        return found

    def _count_finding(self, count: int, field: str) -> Finding:
        """Why `count` inputs (field AT_INPUT) or outputs (AT_OUTPUT) are not allowed."""
        schema = self.schema
        if field == AT_INPUT:
            low, high, counts = schema.min_input, schema.max_input, schema.input_counts
            verb, too_many, too_few, not_allowed = "takes", Code.TOO_MANY_INPUTS, Code.TOO_FEW_INPUTS, Code.INPUT_COUNT_NOT_ALLOWED
        else:
            low, high, counts = schema.min_output, schema.max_output, schema.output_counts
            verb, too_many, too_few, not_allowed = "has", Code.TOO_MANY_OUTPUTS, Code.TOO_FEW_OUTPUTS, Code.OUTPUT_COUNT_NOT_ALLOWED
        name = _schema_name(schema)
        if count > high:
            return Finding(too_many, f"{name} {verb} at most {_count(high, field)}, the node has {count}", field, high)
        if count < low:
            return Finding(too_few, f"{name} {verb} at least {_count(low, field)}, the node has {count}")
        allowed = ", ".join(str(n) for n in sorted(counts or ()))
        return Finding(not_allowed, f"{name} {verb} {allowed} {field}s, the node has {count}")

    def _empty(self, names: list[str], params: tuple[FormalParameter, ...], code: Code, field: str) -> list[Finding] | None:
        found: list[Finding] = []
        for index, name in enumerate(names):
            if not name and index < len(params) and params[index].option == SINGLE:
                kind = "input" if field == AT_INPUT else "output"
                found.append(Finding(code, f"{kind} {index} ({quote(params[index].name)}) is required but the name is empty", field, index))
        return found or None

    def _unknown_attribute(self, attribute: Attribute, index: int) -> Finding:
        return Finding(Code.UNKNOWN_ATTRIBUTE, f"{_schema_name(self.schema)} has no attribute {quote(attribute.name)}", AT_ATTRIBUTE, index)

    def types(self, inputs: list[str], graph: ResolvedGraph) -> list[Finding] | None:
        """The type findings on a node's inputs (those within the formal
        parameters; the count rules speak for any others), names looked up in `graph`."""
        found: list[Finding] | None = None
        params = self.params
        last = len(params) - 1
        values = graph.values
        bound: dict[str, tuple[str, int]] | None = {} if self.binds_types else None
        for index, name in enumerate(inputs):
            if not name:
                continue
            if index > last and not self.variadic_last:
                break
            value = values.get(name) or graph.lookup(name)
            value_type = value.type if value is not None else None
            if value_type is None:
                continue
            param = params[index] if index <= last else params[last]
            known_tensor = type(value_type) is TensorType and not value_type.sparse and value_type.elem_type in param.tensor_codes
            if known_tensor and (bound is None or not param.homogeneous):
                continue  # the common case: an allowed tensor type, nothing to bind
            text = type_string(value_type, self.names)
            if text is None:
                continue  # an undefined element type or an incomplete type: not known
            if text not in param.types:
                found = _add(found, [self._outside(param, index, text)])
                continue
            if bound is not None and param.homogeneous:
                first = bound.setdefault(param.type_str, (text, index))
                if first[0] != text:
                    message = (
                        f"input {index} ({quote(param.name)}) is {text}, but input {first[1]} binds {quote(param.type_str)} to {first[0]}"
                    )
                    found = _add(found, [Finding(Code.INPUT_TYPES_DIFFER, message, AT_INPUT, index)])
        return found

    def type_finding(self, position: int, value_type: TypeProto) -> Finding | None:
        """The finding on one input of a known type, for a schema whose inputs
        bind no type parameter together (`slot_count` 0), or None."""
        params = self.params
        if position >= len(params) and not self.variadic_last:
            return None
        param = params[min(position, len(params) - 1)]
        if type(value_type) is TensorType and not value_type.sparse and value_type.elem_type in param.tensor_codes:
            return None
        text = type_string(value_type, self.names)
        if text is None or text in param.types:
            return None
        return self._outside(param, position, text)

    def _outside(self, param: _Param, index: int, text: str) -> Finding:
        allowed = sorted(param.types)
        listed = ", ".join(allowed[:8]) + (f", ... ({len(allowed)} types)" if len(allowed) > 8 else "")
        return Finding(
            Code.INPUT_TYPE,
            f"input {index} ({quote(param.name)}) is {text}, not one of {quote(param.type_str)}: {listed}",
            AT_INPUT,
            index,
        )


def duplicate_attributes(attributes: Sequence[Attribute]) -> list[Finding] | None:
    """The second and later attributes of a name already given (the checker
    refuses them on every node, whatever its domain)."""
    if len(attributes) < 2:
        return None
    seen: set[str] = set()
    found: list[Finding] = []
    for index, attribute in enumerate(attributes):
        if attribute.name in seen:
            found.append(
                Finding(Code.DUPLICATE_ATTRIBUTE, f"attribute {quote(attribute.name)} appears more than once", AT_ATTRIBUTE, index)
            )
        seen.add(attribute.name)
    return found or None


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _schema_name(schema: OpSchema) -> str:
    domain = f"{schema.domain}::" if schema.domain else ""
    return f"{domain}{schema.name}-{schema.since_version}"


def _attribute_type(attribute: Attribute, index: int, expected: str) -> Finding:
    return Finding(
        Code.ATTRIBUTE_TYPE,
        f"attribute {quote(attribute.name)} is {attribute.type.name}, the schema declares {expected}",
        AT_ATTRIBUTE,
        index,
    )


def _missing_attribute(name: str) -> Finding:
    return Finding(Code.MISSING_ATTRIBUTE, f"required attribute {quote(name)} is missing")


def _add(found: list[Finding] | None, more: list[Finding] | None) -> list[Finding] | None:
    if not more:
        return found
    if found is None:
        return more
    found.extend(more)
    return found
