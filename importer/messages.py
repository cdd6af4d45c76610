"""The parsed model: one slotted class per protobuf message, as written.

Owns the in-memory form of ModelProto, GraphProto, NodeProto, AttributeProto,
ValueInfoProto, TypeProto (every member), OperatorSetIdProto,
StringStringEntryProto, FunctionProto and TrainingInfoProto. Tensors live in
`importer.tensor`.
These objects keep file order and the fields exactly as read; graph
resolution (`importer.resolve`) builds the resolved graph on top of them.
Each object that can be named in an error keeps `offset`: the byte offset of
the key of the field that holds it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeAlias

from importer.attribute_types import AttributeType as AttributeType  # noqa: PLC0414 (re-exported: the type of Attribute.type)
from importer.tensor import SparseTensor, Tensor

Dim: TypeAlias = int | str | None  # dim_value, dim_param, or unknown
Shape: TypeAlias = tuple[Dim, ...] | None  # None: unknown rank


class TensorType:
    """TypeProto.tensor_type, or sparse_tensor_type when `sparse`. An
    immutable value (shared; compared and hashed by its fields, like the
    frozen dataclasses below), written as a plain class so that making one
    (one per initializer without a declared type) runs no interpreted code
    in the compiled build."""

    __slots__ = ("elem_type", "shape", "sparse")

    def __init__(self, elem_type: int, shape: Shape, sparse: bool = False) -> None:
        self.elem_type = elem_type
        self.shape = shape
        self.sparse = sparse

    def __eq__(self, other: object) -> bool:
        if type(other) is not TensorType:
            return NotImplemented
        return self.elem_type == other.elem_type and self.shape == other.shape and self.sparse == other.sparse

    def __hash__(self) -> int:
        return hash((self.elem_type, self.shape, self.sparse))

    def __repr__(self) -> str:
        return f"TensorType(elem_type={self.elem_type!r}, shape={self.shape!r}, sparse={self.sparse!r})"


@dataclass(slots=True, frozen=True)
class SequenceType:
    elem_type: TypeProto | None


@dataclass(slots=True, frozen=True)
class OptionalType:
    elem_type: TypeProto | None


@dataclass(slots=True, frozen=True)
class MapType:
    key_type: int
    value_type: TypeProto | None


@dataclass(slots=True, frozen=True)
class OpaqueType:
    domain: str
    name: str


# A TypeProto is its set oneof member; "no type" is None. Types are immutable
# values, shared by every ValueInfo whose type has the same bytes.
TypeProto: TypeAlias = TensorType | SequenceType | OptionalType | MapType | OpaqueType


class _Message:
    """The messages below are plain classes with their own `__init__` (in the
    compiled build, native classes built without any interpreted code; a
    dataclass's generated `__init__` would run as bytecode), compared by
    identity, with a dataclass-like `repr`."""

    __slots__ = ()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _slot_names(type(self)))
        return f"{type(self).__name__}({fields})"


def _slot_names(cls: type) -> list[str]:
    return [name for klass in reversed(cls.__mro__) for name in getattr(klass, "__slots__", ())]


class StringStringEntry(_Message):
    __slots__ = ("key", "value")

    def __init__(self, key: str, value: str) -> None:
        self.key = key
        self.value = value


class OperatorSetId(_Message):
    __slots__ = ("domain", "version", "offset")

    def __init__(self, domain: str, version: int, offset: int = 0) -> None:
        self.domain = domain
        self.version = version
        self.offset = offset


class ValueInfo(_Message):
    __slots__ = ("name", "type", "doc_string", "offset")

    def __init__(self, name: str, type: TypeProto | None, doc_string: str, offset: int) -> None:
        self.name = name
        self.type = type
        self.doc_string = doc_string
        self.offset = offset


AttributeValue: TypeAlias = object


class Attribute(_Message):
    """An AttributeProto, its type inferred when absent (docs/import-rules.md §2).

    `value`: one item of the type's `ValueKind` (`importer.attribute_types`;
    FLOAT is kept as its 32-bit pattern, see `float_value`), or a list of
    them for a plural type. None when `ref_attr_name` is set.
    """

    __slots__ = ("name", "type", "value", "ref_attr_name", "doc_string")

    def __init__(self, name: str, type: AttributeType, value: AttributeValue, ref_attr_name: str, doc_string: str) -> None:
        self.name = name
        self.type = type
        self.value = value
        self.ref_attr_name = ref_attr_name
        self.doc_string = doc_string

    @property
    def float_value(self) -> float:
        return float_from_bits(self.value)

    @property
    def float_values(self) -> list[float]:
        assert isinstance(self.value, list)
        return [float_from_bits(bits) for bits in self.value]


def float_from_bits(bits: object) -> float:
    """A FLOAT attribute value (kept as its 32-bit pattern) as a Python float."""
    assert isinstance(bits, int)
    value: float = struct.unpack("<f", bits.to_bytes(4, "little"))[0]
    return value


class Node(_Message):
    """A NodeProto. `attribute` is a shared empty tuple when there are none
    (most nodes: one list fewer per node of a 200,000-node model)."""

    __slots__ = ("input", "output", "name", "op_type", "domain", "overload", "attribute", "doc_string", "offset")

    def __init__(
        self,
        input: list[str],
        output: list[str],
        name: str,
        op_type: str,
        domain: str,
        overload: str,
        attribute: Sequence[Attribute],
        doc_string: str,
        offset: int,
    ) -> None:
        self.input = input
        self.output = output
        self.name = name
        self.op_type = op_type
        self.domain = domain
        self.overload = overload
        self.attribute = attribute
        self.doc_string = doc_string
        self.offset = offset


class Graph(_Message):
    __slots__ = ("name", "doc_string", "node", "initializer", "sparse_initializer", "input", "output", "value_info", "offset")

    def __init__(
        self,
        name: str,
        doc_string: str,
        node: list[Node],
        initializer: list[Tensor],
        sparse_initializer: list[SparseTensor],
        input: list[ValueInfo],
        output: list[ValueInfo],
        value_info: list[ValueInfo],
        offset: int,
    ) -> None:
        self.name = name
        self.doc_string = doc_string
        self.node = node
        self.initializer = initializer
        self.sparse_initializer = sparse_initializer
        self.input = input
        self.output = output
        self.value_info = value_info
        self.offset = offset


class Function(_Message):
    __slots__ = (
        "name", "domain", "overload", "doc_string", "input", "output", "attribute", "attribute_proto", "node", "opset_import", "offset",
    )  # fmt: skip

    def __init__(
        self,
        name: str,
        domain: str,
        overload: str,
        doc_string: str,
        input: list[str],
        output: list[str],
        attribute: list[str],
        attribute_proto: list[Attribute],
        node: list[Node],
        opset_import: list[OperatorSetId],
        offset: int,
    ) -> None:
        self.name = name
        self.domain = domain
        self.overload = overload
        self.doc_string = doc_string
        self.input = input
        self.output = output
        self.attribute = attribute
        self.attribute_proto = attribute_proto
        self.node = node
        self.opset_import = opset_import
        self.offset = offset


class TrainingInfo(_Message):
    """A TrainingInfoProto, as written: its `initialization` and `algorithm`
    graphs (None when absent) and its two bindings. Not resolved: the
    algorithm graph reads the main graph's initializers by name."""

    __slots__ = ("initialization", "algorithm", "initialization_binding", "update_binding", "offset")

    def __init__(
        self,
        initialization: Graph | None,
        algorithm: Graph | None,
        initialization_binding: list[StringStringEntry],
        update_binding: list[StringStringEntry],
        offset: int,
    ) -> None:
        self.initialization = initialization
        self.algorithm = algorithm
        self.initialization_binding = initialization_binding
        self.update_binding = update_binding
        self.offset = offset


class Model(_Message):
    """A ModelProto as read; `ir_version` is None when the field is absent."""

    __slots__ = (
        "ir_version", "model_version", "producer_name", "producer_version", "domain", "doc_string",
        "opset_import", "metadata_props", "graph", "functions", "training_info",
    )  # fmt: skip

    def __init__(
        self,
        *,
        ir_version: int | None,
        model_version: int,
        producer_name: str,
        producer_version: str,
        domain: str,
        doc_string: str,
        opset_import: list[OperatorSetId],
        metadata_props: list[StringStringEntry],
        graph: Graph | None,
        functions: list[Function] | None = None,
        training_info: list[TrainingInfo] | None = None,
    ) -> None:
        self.ir_version = ir_version
        self.model_version = model_version
        self.producer_name = producer_name
        self.producer_version = producer_version
        self.domain = domain
        self.doc_string = doc_string
        self.opset_import = opset_import
        self.metadata_props = metadata_props
        self.graph = graph
        self.functions = functions if functions is not None else []
        self.training_info = training_info if training_info is not None else []
