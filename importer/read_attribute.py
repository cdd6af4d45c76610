"""Reader for AttributeProto: type inference and the absent-value rules.

Owns docs/import-rules.md §2 for attributes: when `type` is absent (or 0) it
is inferred from the first value field present, in the order of
`importer.attribute_types.ATTRIBUTE_TYPES`; an attribute with neither type,
value nor ref_attr_name is refused; a scalar whose field is absent reads as 0
or empty; a tensor, graph, sparse tensor or type whose field is absent is
refused; ref_attr_name means no value. Which field holds which type, its key
and whether it is repeated all come from that table; this module owns how one
item of each `ValueKind` is decoded.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, assert_never

from importer.attribute_types import ATTRIBUTE_TYPES, TYPE_INFO, AttributeType, ValueKind
from importer.errors import ReadFailure, invalid, malformed, quote, unsupported
from importer.messages import Attribute
from importer.read_context import ReadContext, check_nesting
from importer.read_tensor import read_sparse_tensor, read_tensor
from importer.read_types import read_type
from importer.wire import FieldCursor, as_int32, as_int64, read_string, varints_to_list

if TYPE_CHECKING:
    from importer.messages import Graph

# Keys (field << 3 | wire type) of the AttributeProto fields that are not values.
_NAME, _DOC_STRING, _TYPE, _REF_ATTR_NAME = 0x0A, 0x6A, 0xA0, 0xAA

_INT, _FLOAT, _BYTES = ValueKind.INT, ValueKind.FLOAT, ValueKind.BYTES

# Key of each value field -> (its type, the kind of one item, plural, packed).
_VALUE_FIELDS: Final[dict[int, tuple[AttributeType, ValueKind, bool, bool]]] = {}
for _info in ATTRIBUTE_TYPES:
    _VALUE_FIELDS[_info.key] = (_info.type, _info.kind, _info.plural, False)
    if _info.packed_key is not None:
        _VALUE_FIELDS[_info.packed_key] = (_info.type, _info.kind, _info.plural, True)
del _info

_ATTRIBUTE_TYPES: Final = {int(t): t for t in AttributeType}  # faster than AttributeType(code)

GraphReader = Callable[[ReadContext, int, int, int, int], "Graph"]


_CACHED_ATTRIBUTE_BYTES: Final = 64


def read_attribute(ctx: ReadContext, start: int, stop: int, depth: int, read_graph: GraphReader) -> Attribute:
    """Read one AttributeProto at buf[start:stop].

    Small attributes that hold no message (no tensor, graph or type, which
    are bound to their place in the file) are memoized by their bytes: the
    same `alpha=0.5` on 60,000 nodes is read once and shared (read-only).
    """
    if stop - start > _CACHED_ATTRIBUTE_BYTES:
        return _read_attribute(ctx, start, stop, depth, read_graph)[0]
    cache_key = (bytes(ctx.buf[start:stop]), depth)
    cached = ctx.attribute_cache.get(cache_key)
    if cached is not None:
        return cached  # type: ignore[return-value]
    attribute, holds_messages = _read_attribute(ctx, start, stop, depth, read_graph)
    if not holds_messages:
        ctx.attribute_cache[cache_key] = attribute
    return attribute


def _read_attribute(ctx: ReadContext, start: int, stop: int, depth: int, read_graph: GraphReader) -> tuple[Attribute, bool]:
    """Read one AttributeProto; also say whether any message field was read."""
    check_nesting(ctx, depth)
    buf = ctx.buf
    value_fields = _VALUE_FIELDS
    name = doc_string = ref_attr_name = ""
    type_code = 0
    type_offset = 0
    holds_messages = False
    singular: dict[AttributeType, object] = {}  # singular type -> its item
    plural: dict[AttributeType, list[object]] = {}  # plural type -> its items
    fields = FieldCursor(buf, start, stop)
    while fields.next():
        key, at, a, b, value = fields.key, fields.at, fields.start, fields.stop, fields.value
        if key == _NAME:
            name = read_string(buf, a, b, at, "name")
        elif key == _TYPE:
            type_code, type_offset = as_int32(value), at
        elif key == _REF_ATTR_NAME:
            ref_attr_name = read_string(buf, a, b, at, "ref_attr_name")
        elif key == _DOC_STRING:
            doc_string = read_string(buf, a, b, at, "doc_string")
        else:
            found = value_fields.get(key)
            if found is None:
                continue  # unknown field, or a known one with the wrong wire type
            attr_type, kind, is_plural, packed = found
            item: object
            if kind is _INT:
                if packed:
                    plural.setdefault(attr_type, []).extend(as_int64(v) for v in varints_to_list(buf, a, b))
                    continue
                item = as_int64(value)
            elif kind is _FLOAT:
                if is_plural:  # packed, or one unpacked fixed32: read alike
                    if (b - a) % 4:
                        raise malformed(f"packed floats of {b - a} bytes is not a multiple of 4", at, TYPE_INFO[attr_type].field)
                    plural.setdefault(attr_type, []).extend(v for (v,) in struct.iter_unpack("<I", buf[a:b]))
                    continue
                item = struct.unpack_from("<I", buf, a)[0]
            elif kind is _BYTES:
                item = bytes(buf[a:b])
            else:
                label = TYPE_INFO[attr_type].field
                if is_plural:
                    label = f"{label}[{len(plural.setdefault(attr_type, []))}]"
                try:
                    item = _read_message(ctx, kind, at, a, b, depth + 1, read_graph)
                except ReadFailure as failure:
                    raise failure.within(label, at) from None
                holds_messages = True
            if is_plural:
                plural.setdefault(attr_type, []).append(item)
            else:
                singular[attr_type] = item
    return _typed_attribute(name, type_code, type_offset, ref_attr_name, doc_string, singular, plural), holds_messages


def _read_message(ctx: ReadContext, kind: ValueKind, at: int, a: int, b: int, depth: int, read_graph: GraphReader) -> object:
    """Read one tensor, graph, sparse tensor or type item."""
    match kind:
        case ValueKind.TENSOR:
            tensor = read_tensor(ctx, a, b, depth)
            tensor.offset = at
            return tensor
        case ValueKind.GRAPH:
            return read_graph(ctx, a, b, depth, at)
        case ValueKind.SPARSE_TENSOR:
            sparse = read_sparse_tensor(ctx, a, b, depth)
            sparse.offset = at
            return sparse
        case ValueKind.TYPE_PROTO:
            return read_type(ctx, a, b, depth)
        case ValueKind.FLOAT | ValueKind.INT | ValueKind.BYTES:  # decoded in _read_attribute's loop
            raise AssertionError(f"{kind} is not a message")
        case _:
            assert_never(kind)


def _absent_scalar(kind: ValueKind) -> object:
    """The value of a scalar whose field is absent."""
    match kind:
        case ValueKind.FLOAT | ValueKind.INT:
            return 0
        case ValueKind.BYTES:
            return b""
        case ValueKind.TENSOR | ValueKind.GRAPH | ValueKind.SPARSE_TENSOR | ValueKind.TYPE_PROTO:
            raise AssertionError(f"{kind} is not a scalar")
        case _:
            assert_never(kind)


def _typed_attribute(
    name: str,
    type_code: int,
    type_offset: int,
    ref_attr_name: str,
    doc_string: str,
    singular: dict[AttributeType, object],
    plural: dict[AttributeType, list[object]],
) -> Attribute:
    if type_code:
        found = _ATTRIBUTE_TYPES.get(type_code)
        if found is None:
            raise unsupported(f"attribute type {type_code} is not defined", type_offset, "type")
        attr_type = found
    elif ref_attr_name:
        attr_type = AttributeType.UNDEFINED
    else:
        attr_type = _infer_type(singular, plural, name)
    if ref_attr_name:
        return Attribute(name, attr_type, None, ref_attr_name, doc_string)
    info = TYPE_INFO[attr_type]
    value: object
    if info.plural:
        value = plural.get(attr_type, [])
    elif attr_type in singular:
        value = singular[attr_type]
    elif info.is_message:
        raise invalid(f"attribute {quote(name)} of type {attr_type.name} has no {info.field} field", None)
    else:
        value = _absent_scalar(info.kind)
    return Attribute(name, attr_type, value, ref_attr_name, doc_string)


def _infer_type(singular: dict[AttributeType, object], plural: dict[AttributeType, list[object]], name: str) -> AttributeType:
    for info in ATTRIBUTE_TYPES:  # the singular fields, then the repeated ones with at least one entry
        if info.type in singular or plural.get(info.type):
            return info.type
    raise invalid(f"attribute {quote(name)} has neither a type nor a value", None)
