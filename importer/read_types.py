"""Readers for ValueInfoProto, TypeProto (every member) and TensorShapeProto.

Owns the rules of docs/import-rules.md §2 for types: a TypeProto with no member set is
"no type" (None); the oneof member that comes last in the bytes is the one
set; a tensor type without a shape field has unknown rank (None); a dimension
with neither dim_value nor dim_param is unknown (None). Negative dim_value is
kept as written (exporters write -1).
"""

from __future__ import annotations

from typing import Final

from importer.errors import ReadFailure
from importer.messages import (
    Dim,
    MapType,
    OpaqueType,
    OptionalType,
    SequenceType,
    Shape,
    TensorType,
    TypeProto,
    ValueInfo,
)
from importer.read_context import ReadContext, check_nesting, too_deep
from importer.wire import FieldCursor, as_int32, as_int64, invalid_utf8, overrun, read_key, read_length, read_string, skip_scalar

_VALUE_INFO_LABELS: Final = {0x0A: "name", 0x1A: "doc_string"}
_CACHED_TYPE_BYTES: Final = 256
_NO_TYPE: Final = object()


def read_value_info(ctx: ReadContext, start: int, stop: int, depth: int, offset: int) -> ValueInfo:
    """Read a ValueInfoProto (a hot path: inlined, its type memoized)."""
    if depth > ctx.max_nesting:
        raise too_deep(ctx)
    buf = ctx.buf
    name = doc_string = ""
    value_type: TypeProto | None = None
    pos = start
    key = at = 0
    try:
        while pos < stop:
            at = pos
            key = buf[pos]
            pos += 1
            if key >= 0x80:
                key, pos = read_key(buf, at, stop)
            if key & 7 != 2 or key < 8:
                pos = skip_scalar(buf, pos, stop, key, at)
                continue
            size = buf[pos] if pos < stop else 0x80
            if size < 0x80:
                pos += 1
                end = pos + size
                if end > stop:
                    raise overrun(size, stop - pos, at)
            else:
                pos, end = read_length(buf, pos, stop, at)
            if key == 0x0A:
                name = buf[pos:end].decode()
            elif key == 0x12:
                try:
                    value_type = read_type_memoized(ctx, pos, end, depth + 1)
                except ReadFailure as failure:
                    raise failure.within("type", at) from None
            elif key == 0x1A:
                doc_string = buf[pos:end].decode()
            pos = end
    except UnicodeDecodeError as error:
        raise invalid_utf8(error, at, _VALUE_INFO_LABELS[key]) from None
    return ValueInfo(name, value_type, doc_string, offset)


def read_type_memoized(ctx: ReadContext, start: int, stop: int, depth: int) -> TypeProto | None:
    """`read_type`, reusing the result for the same bytes at the same depth."""
    if stop - start > _CACHED_TYPE_BYTES:
        return read_type(ctx, start, stop, depth)
    cache_key = (bytes(ctx.buf[start:stop]), depth)
    cached = ctx.type_cache.get(cache_key)
    if cached is None:
        parsed = read_type(ctx, start, stop, depth)
        ctx.type_cache[cache_key] = _NO_TYPE if parsed is None else parsed
        return parsed
    return None if cached is _NO_TYPE else cached  # type: ignore[return-value]


_MEMBER_NAMES: Final = {
    0x0A: "tensor_type",
    0x22: "sequence_type",
    0x2A: "map_type",
    0x3A: "opaque_type",
    0x42: "sparse_tensor_type",
    0x4A: "optional_type",
}


def read_type(ctx: ReadContext, start: int, stop: int, depth: int) -> TypeProto | None:
    """Read a TypeProto; None when no member of its oneof is set."""
    check_nesting(ctx, depth)
    member: TypeProto | None = None
    fields = FieldCursor(ctx.buf, start, stop)
    while fields.next():
        key, at, a, b = fields.key, fields.at, fields.start, fields.stop
        if key not in _MEMBER_NAMES:
            continue  # denotation (not kept) or unknown
        try:
            member = _read_member(ctx, key, a, b, depth + 1)
        except ReadFailure as failure:
            raise failure.within(_MEMBER_NAMES[key], at) from None
    return member


def _read_member(ctx: ReadContext, key: int, start: int, stop: int, depth: int) -> TypeProto:
    check_nesting(ctx, depth)
    buf = ctx.buf
    if key in (0x0A, 0x42):  # Tensor, SparseTensor
        elem_type = 0
        shape: Shape = None
        inner = FieldCursor(buf, start, stop)
        while inner.next():
            k, at, a, b, value = inner.key, inner.at, inner.start, inner.stop, inner.value
            if k == 0x08:
                elem_type = as_int32(value)
            elif k == 0x12:
                try:
                    shape = read_shape(ctx, a, b, depth + 1)
                except ReadFailure as failure:
                    raise failure.within("shape", at) from None
        return TensorType(elem_type, shape, sparse=key == 0x42)
    if key in (0x22, 0x4A):  # Sequence, Optional: elem_type = 1
        elem: TypeProto | None = None
        inner = FieldCursor(buf, start, stop)
        while inner.next():
            k, at, a, b = inner.key, inner.at, inner.start, inner.stop
            if k == 0x0A:
                try:
                    elem = read_type(ctx, a, b, depth + 1)
                except ReadFailure as failure:
                    raise failure.within("elem_type", at) from None
        return SequenceType(elem) if key == 0x22 else OptionalType(elem)
    if key == 0x2A:  # Map
        key_type = 0
        value_type: TypeProto | None = None
        inner = FieldCursor(buf, start, stop)
        while inner.next():
            k, at, a, b, value = inner.key, inner.at, inner.start, inner.stop, inner.value
            if k == 0x08:
                key_type = as_int32(value)
            elif k == 0x12:
                try:
                    value_type = read_type(ctx, a, b, depth + 1)
                except ReadFailure as failure:
                    raise failure.within("value_type", at) from None
        return MapType(key_type, value_type)
    domain = name = ""  # Opaque
    fields = FieldCursor(buf, start, stop)
    while fields.next():
        k, at, a, b = fields.key, fields.at, fields.start, fields.stop
        if k == 0x0A:
            domain = read_string(buf, a, b, at, "domain")
        elif k == 0x12:
            name = read_string(buf, a, b, at, "name")
    return OpaqueType(domain, name)


def read_shape(ctx: ReadContext, start: int, stop: int, depth: int) -> tuple[Dim, ...]:
    """Read a TensorShapeProto: one entry per dimension."""
    check_nesting(ctx, depth)
    buf = ctx.buf
    dims: list[Dim] = []
    fields = FieldCursor(buf, start, stop)
    while fields.next():
        key, at, a, b = fields.key, fields.at, fields.start, fields.stop
        if key != 0x0A:
            continue
        try:
            check_nesting(ctx, depth + 1)
            dim: Dim = None
            inner = FieldCursor(buf, a, b)
            while inner.next():
                k, dim_at, da, db, value = inner.key, inner.at, inner.start, inner.stop, inner.value
                if k == 0x08:
                    dim = as_int64(value)
                elif k == 0x12:
                    dim = read_string(buf, da, db, dim_at, "dim_param")
        except ReadFailure as failure:
            raise failure.within(f"dim[{len(dims)}]", at) from None
        dims.append(dim)
    return tuple(dims)


__all__ = ["read_shape", "read_type", "read_value_info"]
