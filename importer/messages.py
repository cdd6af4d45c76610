"""The parsed model: one slotted class per protobuf message, as written.

Owns the in-memory form of ModelProto, GraphProto, NodeProto, AttributeProto,
ValueInfoProto, TypeProto (every member), OperatorSetIdProto,
StringStringEntryProto and FunctionProto. Tensors live in `importer.tensor`.
These objects keep file order and the fields exactly as read; graph
resolution (`importer.resolve`) builds the resolved graph on top of them.
Each object that can be named in an error keeps `offset`: the byte offset of
the key of the field that holds it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeAlias

from importer.attribute_types import AttributeType as AttributeType  # noqa: PLC0414 (re-exported: the type of Attribute.type)
from importer.tensor import SparseTensor, Tensor

Dim: TypeAlias = int | str | None  # dim_value, dim_param, or unknown
Shape: TypeAlias = tuple[Dim, ...] | None  # None: unknown rank


@dataclass(slots=True, frozen=True)
class TensorType:
    """TypeProto.tensor_type, or sparse_tensor_type when `sparse`."""

    elem_type: int
    shape: Shape
    sparse: bool = False


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


@dataclass(slots=True, eq=False)
class StringStringEntry:
    key: str
    value: str


@dataclass(slots=True, eq=False)
class OperatorSetId:
    domain: str
    version: int
    offset: int = 0


@dataclass(slots=True, eq=False)
class ValueInfo:
    name: str
    type: TypeProto | None
    doc_string: str
    offset: int


AttributeValue: TypeAlias = object


@dataclass(slots=True, eq=False)
class Attribute:
    """An AttributeProto, its type inferred when absent (docs/import-rules.md §2).

    `value`: one item of the type's `ValueKind` (`importer.attribute_types`;
    FLOAT is kept as its 32-bit pattern, see `float_value`), or a list of
    them for a plural type. None when `ref_attr_name` is set.
    """

    name: str
    type: AttributeType
    value: AttributeValue
    ref_attr_name: str
    doc_string: str

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


@dataclass(slots=True, eq=False)
class Node:
    """A NodeProto. `attribute` is a shared empty tuple when there are none
    (most nodes: one list fewer per node of a 200,000-node model)."""

    input: list[str]
    output: list[str]
    name: str
    op_type: str
    domain: str
    overload: str
    attribute: Sequence[Attribute]
    doc_string: str
    offset: int


@dataclass(slots=True, eq=False)
class Graph:
    name: str
    doc_string: str
    node: list[Node]
    initializer: list[Tensor]
    sparse_initializer: list[SparseTensor]
    input: list[ValueInfo]
    output: list[ValueInfo]
    value_info: list[ValueInfo]
    offset: int


@dataclass(slots=True, eq=False)
class Function:
    name: str
    domain: str
    overload: str
    doc_string: str
    input: list[str]
    output: list[str]
    attribute: list[str]
    attribute_proto: list[Attribute]
    node: list[Node]
    opset_import: list[OperatorSetId]
    offset: int


@dataclass(slots=True, eq=False)
class Model:
    """A ModelProto as read; `ir_version` is None when the field is absent."""

    ir_version: int | None
    model_version: int
    producer_name: str
    producer_version: str
    domain: str
    doc_string: str
    opset_import: list[OperatorSetId]
    metadata_props: list[StringStringEntry]
    graph: Graph | None
    functions: list[Function] = field(default_factory=list)
