"""AttributeProto's attribute types, each described once.

Owns `AttributeType` (the type codes of onnx.proto) and `ATTRIBUTE_TYPES`,
one `AttributeTypeInfo` per defined type: the AttributeProto field that holds
its value (name, number and wire type, hence its key), whether that field is
repeated and the singular type of its items, and what one item is (a scalar,
or which message). The order of the table is the order in which an absent
`type` is inferred from the value fields present (docs/import-rules.md §2).

Every place that treats attributes by type reads this table instead of
listing the types again: the reader (`importer.read_attribute`), the dump
(`importer.dump`), the tensor walk (`importer.tensor_places`), subgraph
resolution (`importer.resolve`) and the service's graph JSON
(`service/tasks/graph_document.py`).

To add an attribute type: add its code to `AttributeType` and its row to
`ATTRIBUTE_TYPES`. That is all, unless its items are of a new kind; then add
the kind to `ValueKind` too, and mypy names each place that must handle it
(every `match` over a `ValueKind` ends in `assert_never`): the reader, the
dump and the graph JSON.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum, IntEnum
from typing import Final, assert_never

from importer.wire import WIRE_FIXED32, WIRE_LEN, WIRE_VARINT


class AttributeType(IntEnum):
    """AttributeProto.AttributeType, numbered and named as in onnx.proto."""

    UNDEFINED = 0
    FLOAT = 1
    INT = 2
    STRING = 3
    TENSOR = 4
    GRAPH = 5
    FLOATS = 6
    INTS = 7
    STRINGS = 8
    TENSORS = 9
    GRAPHS = 10
    SPARSE_TENSOR = 11
    SPARSE_TENSORS = 12
    TYPE_PROTO = 13
    TYPE_PROTOS = 14


class ValueKind(Enum):
    """What one item of an attribute's value is; the value is the onnx.proto
    type of the field. In `Attribute.value`: FLOAT the 32-bit pattern as an
    int, INT an int, BYTES bytes, TENSOR a Tensor, GRAPH a Graph,
    SPARSE_TENSOR a SparseTensor, TYPE_PROTO a TypeProto or None."""

    FLOAT = "float"
    INT = "int64"
    BYTES = "bytes"
    TENSOR = "TensorProto"
    GRAPH = "GraphProto"
    SPARSE_TENSOR = "SparseTensorProto"
    TYPE_PROTO = "TypeProto"

    @property
    def is_message(self) -> bool:
        """Read by a message reader (it is bound to its place in the file)."""
        kind: ValueKind = self
        match kind:
            case ValueKind.FLOAT | ValueKind.INT | ValueKind.BYTES:
                return False
            case ValueKind.TENSOR | ValueKind.GRAPH | ValueKind.SPARSE_TENSOR | ValueKind.TYPE_PROTO:
                return True
            case _:
                assert_never(kind)


@dataclass(frozen=True, slots=True)
class AttributeTypeInfo:
    """One attribute type and the AttributeProto field that carries it.

    `wire_type` is that of one unpacked item. `plural` (a repeated field, its
    value a list of items of type `singular`), `key`, `packed_key` (a
    repeated scalar may also come packed in one LEN field; otherwise None) and
    `is_message` follow from the other fields.
    """

    type: AttributeType
    field: str  # the AttributeProto field name: "f", "floats", "sparse_tensor", ...
    number: int  # its field number in onnx.proto
    wire_type: int
    singular: AttributeType  # the type of one item: the type itself when not plural
    kind: ValueKind  # what one item is
    plural: bool = dataclasses.field(init=False)
    key: int = dataclasses.field(init=False)
    packed_key: int | None = dataclasses.field(init=False)
    is_message: bool = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        plural = self.singular is not self.type
        packable = plural and self.wire_type != WIRE_LEN
        object.__setattr__(self, "plural", plural)
        object.__setattr__(self, "key", self.number << 3 | self.wire_type)
        object.__setattr__(self, "packed_key", self.number << 3 | WIRE_LEN if packable else None)
        object.__setattr__(self, "is_message", self.kind.is_message)


T = AttributeType
K = ValueKind
_ = AttributeTypeInfo

# In inference order (docs/import-rules.md §2): the singular fields, then the repeated ones.
ATTRIBUTE_TYPES: Final[tuple[AttributeTypeInfo, ...]] = (
    #  type              field             number  wire type     singular          kind of one item
    _(T.FLOAT,          "f",                  2,   WIRE_FIXED32, T.FLOAT,          K.FLOAT),
    _(T.INT,            "i",                  3,   WIRE_VARINT,  T.INT,            K.INT),
    _(T.STRING,         "s",                  4,   WIRE_LEN,     T.STRING,         K.BYTES),
    _(T.TENSOR,         "t",                  5,   WIRE_LEN,     T.TENSOR,         K.TENSOR),
    _(T.GRAPH,          "g",                  6,   WIRE_LEN,     T.GRAPH,          K.GRAPH),
    _(T.SPARSE_TENSOR,  "sparse_tensor",     22,   WIRE_LEN,     T.SPARSE_TENSOR,  K.SPARSE_TENSOR),
    _(T.TYPE_PROTO,     "tp",                14,   WIRE_LEN,     T.TYPE_PROTO,     K.TYPE_PROTO),
    _(T.FLOATS,         "floats",             7,   WIRE_FIXED32, T.FLOAT,          K.FLOAT),
    _(T.INTS,           "ints",               8,   WIRE_VARINT,  T.INT,            K.INT),
    _(T.STRINGS,        "strings",            9,   WIRE_LEN,     T.STRING,         K.BYTES),
    _(T.TENSORS,        "tensors",           10,   WIRE_LEN,     T.TENSOR,         K.TENSOR),
    _(T.GRAPHS,         "graphs",            11,   WIRE_LEN,     T.GRAPH,          K.GRAPH),
    _(T.SPARSE_TENSORS, "sparse_tensors",    23,   WIRE_LEN,     T.SPARSE_TENSOR,  K.SPARSE_TENSOR),
    _(T.TYPE_PROTOS,    "type_protos",       15,   WIRE_LEN,     T.TYPE_PROTO,     K.TYPE_PROTO),
)  # fmt: skip
del T, K, _

# Every defined type (all but UNDEFINED) -> its row.
TYPE_INFO: Final[dict[AttributeType, AttributeTypeInfo]] = {info.type: info for info in ATTRIBUTE_TYPES}


def value_items(attr_type: AttributeType, value: object) -> list[tuple[str, object]]:
    """The items of an attribute's value, each with its field path segment:
    [("t", tensor)] for a singular type, [("tensors[0]", ...), ...] for a
    plural one; [] for UNDEFINED or a plural type without a list (a
    `ref_attr_name`)."""
    info = TYPE_INFO.get(attr_type)
    if info is None:
        return []
    if not info.plural:
        return [(info.field, value)]
    if not isinstance(value, list):
        return []
    name = info.field
    return [(f"{name}[{index}]", item) for index, item in enumerate(value)]
