"""Reader for AttributeProto: type inference and the absent-value rules.

Owns seed section 2 for attributes: when `type` is absent (or 0) it is
inferred from the first field set, in the order f, i, s, t, g, sparse_tensor,
tp, then floats, ints, strings, tensors, graphs, sparse_tensors, type_protos;
an attribute with neither type, value nor ref_attr_name is refused; a scalar
whose field is absent reads as 0 or empty; a tensor, graph, sparse tensor or
type whose field is absent is refused; ref_attr_name means no value.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING

from importer.errors import ReadFailure, invalid, malformed, quote, unsupported
from importer.messages import Attribute, AttributeType
from importer.read_context import ReadContext, check_nesting
from importer.read_tensor import read_sparse_tensor, read_tensor
from importer.read_types import read_type
from importer.wire import as_int32, as_int64, iter_fields, read_string, varints_to_list

if TYPE_CHECKING:
    from importer.messages import Graph

T = AttributeType

# Keys (field << 3 | wire type) of the value fields, and the type each implies.
_F, _I, _S, _T, _G, _SPARSE, _TP = 0x15, 0x18, 0x22, 0x2A, 0x32, 0xB2, 0x72
_FLOATS, _FLOATS_PACKED = 0x3D, 0x3A
_INTS, _INTS_PACKED = 0x40, 0x42
_STRINGS, _TENSORS, _GRAPHS, _SPARSES, _TPS = 0x4A, 0x52, 0x5A, 0xBA, 0x7A
_NAME, _DOC_STRING, _TYPE, _REF_ATTR_NAME = 0x0A, 0x6A, 0xA0, 0xAA

_SINGULAR_ORDER = ((_F, T.FLOAT), (_I, T.INT), (_S, T.STRING), (_T, T.TENSOR), (_G, T.GRAPH),
                   (_SPARSE, T.SPARSE_TENSOR), (_TP, T.TYPE_PROTO))  # fmt: skip
_PLURAL_ORDER = (T.FLOATS, T.INTS, T.STRINGS, T.TENSORS, T.GRAPHS, T.SPARSE_TENSORS, T.TYPE_PROTOS)
_REQUIRED_SINGULAR = {T.TENSOR: _T, T.GRAPH: _G, T.SPARSE_TENSOR: _SPARSE, T.TYPE_PROTO: _TP}
_FIELD_NAMES = {T.FLOAT: "f", T.INT: "i", T.STRING: "s", T.TENSOR: "t", T.GRAPH: "g",
                T.SPARSE_TENSOR: "sparse_tensor", T.TYPE_PROTO: "tp"}  # fmt: skip

_ATTRIBUTE_TYPES = {int(t): t for t in AttributeType}  # faster than AttributeType(code)
_MESSAGE_KEYS = frozenset({_T, _G, _SPARSE, _TP})
_MESSAGE_LISTS = frozenset({T.TENSORS, T.GRAPHS, T.SPARSE_TENSORS, T.TYPE_PROTOS})

GraphReader = Callable[[ReadContext, int, int, int, int], "Graph"]


_CACHED_ATTRIBUTE_BYTES = 64


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
    name = doc_string = ref_attr_name = ""
    type_code = 0
    type_offset = 0
    singular: dict[int, object] = {}
    plural: dict[AttributeType, list[object]] = {}
    for key, at, a, b, value in iter_fields(buf, start, stop):
        if key == _NAME:
            name = read_string(buf, a, b, at, "name")
        elif key == _I:
            singular[_I] = as_int64(value)
        elif key == _F:
            singular[_F] = struct.unpack_from("<I", buf, a)[0]
        elif key == _S:
            singular[_S] = bytes(buf[a:b])
        elif key == _TYPE:
            type_code, type_offset = as_int32(value), at
        elif key == _REF_ATTR_NAME:
            ref_attr_name = read_string(buf, a, b, at, "ref_attr_name")
        elif key == _DOC_STRING:
            doc_string = read_string(buf, a, b, at, "doc_string")
        elif key == _INTS or key == _INTS_PACKED:
            ints = plural.setdefault(T.INTS, [])
            if key == _INTS:
                ints.append(as_int64(value))
            else:
                ints.extend(as_int64(v) for v in varints_to_list(buf, a, b))
        elif key == _FLOATS or key == _FLOATS_PACKED:
            if (b - a) % 4:
                raise malformed(f"packed floats of {b - a} bytes is not a multiple of 4", at, "floats")
            plural.setdefault(T.FLOATS, []).extend(v for (v,) in struct.iter_unpack("<I", buf[a:b]))
        elif key == _STRINGS:
            plural.setdefault(T.STRINGS, []).append(bytes(buf[a:b]))
        else:
            _read_message_field(ctx, key, at, a, b, depth + 1, singular, plural, read_graph)
    holds_messages = any(key in _MESSAGE_KEYS for key in singular) or any(kind in _MESSAGE_LISTS for kind in plural)
    return _typed_attribute(name, type_code, type_offset, ref_attr_name, doc_string, singular, plural), holds_messages


def _read_message_field(
    ctx: ReadContext,
    key: int,
    at: int,
    a: int,
    b: int,
    depth: int,
    singular: dict[int, object],
    plural: dict[AttributeType, list[object]],
    read_graph: GraphReader,
) -> None:
    """Read a tensor, graph, sparse tensor or type field (singular or repeated)."""
    if key == _T:
        label, reader_key, target = "t", _T, None
    elif key == _G:
        label, reader_key, target = "g", _G, None
    elif key == _SPARSE:
        label, reader_key, target = "sparse_tensor", _SPARSE, None
    elif key == _TP:
        label, reader_key, target = "tp", _TP, None
    elif key == _TENSORS:
        target = plural.setdefault(T.TENSORS, [])
        label, reader_key = f"tensors[{len(target)}]", _T
    elif key == _GRAPHS:
        target = plural.setdefault(T.GRAPHS, [])
        label, reader_key = f"graphs[{len(target)}]", _G
    elif key == _SPARSES:
        target = plural.setdefault(T.SPARSE_TENSORS, [])
        label, reader_key = f"sparse_tensors[{len(target)}]", _SPARSE
    elif key == _TPS:
        target = plural.setdefault(T.TYPE_PROTOS, [])
        label, reader_key = f"type_protos[{len(target)}]", _TP
    else:
        return  # unknown field, or a known one with the wrong wire type
    try:
        item: object
        if reader_key == _T:
            item = read_tensor(ctx, a, b, depth)
            item.offset = at
        elif reader_key == _G:
            item = read_graph(ctx, a, b, depth, at)
        elif reader_key == _SPARSE:
            item = read_sparse_tensor(ctx, a, b, depth)
            item.offset = at
        else:
            item = read_type(ctx, a, b, depth)
    except ReadFailure as failure:
        raise failure.within(label, at) from None
    if target is None:
        singular[reader_key] = item
    else:
        target.append(item)


def _typed_attribute(
    name: str,
    type_code: int,
    type_offset: int,
    ref_attr_name: str,
    doc_string: str,
    singular: dict[int, object],
    plural: dict[AttributeType, list[object]],
) -> Attribute:
    if type_code:
        found = _ATTRIBUTE_TYPES.get(type_code)
        if found is None:
            raise unsupported(f"attribute type {type_code} is not defined", type_offset, "type")
        attr_type = found
    elif ref_attr_name:
        attr_type = T.UNDEFINED
    else:
        attr_type = _infer_type(singular, plural, name)
    if ref_attr_name:
        return Attribute(name, attr_type, None, ref_attr_name, doc_string)
    value: object
    if attr_type in _REQUIRED_SINGULAR:
        field_key = _REQUIRED_SINGULAR[attr_type]
        if field_key not in singular:
            raise invalid(f"attribute {quote(name)} of type {attr_type.name} has no {_FIELD_NAMES[attr_type]} field", None)
        value = singular[field_key]
    elif attr_type == T.FLOAT:
        value = singular.get(_F, 0)
    elif attr_type == T.INT:
        value = singular.get(_I, 0)
    elif attr_type == T.STRING:
        value = singular.get(_S, b"")
    else:
        value = plural.get(attr_type, [])
    return Attribute(name, attr_type, value, ref_attr_name, doc_string)


def _infer_type(singular: dict[int, object], plural: dict[AttributeType, list[object]], name: str) -> AttributeType:
    for key, attr_type in _SINGULAR_ORDER:
        if key in singular:
            return attr_type
    for attr_type in _PLURAL_ORDER:
        if plural.get(attr_type):
            return attr_type
    raise invalid(f"attribute {quote(name)} has neither a type nor a value", None)
