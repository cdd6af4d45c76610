"""Readers for TensorProto and SparseTensorProto (docs/import-rules.md §3).

Owns the checks of a tensor's header (element type, dims, element count and
byte length, decided before any data is touched), the order of value sources
(external, raw_data, typed field) and their conversion to the raw layout.
raw_data stays a view into the input; external data is only recorded here and
bound by `importer.external_data`.
"""

from __future__ import annotations

from typing import Final

from importer.element_types import (
    FLOAT_DATA,
    MAX_DATA_TYPE,
    STRING_DATA,
    TYPED_FIELD,
    TYPED_FIELD_NAMES,
    DataType,
    bits_per_element,
    typed_entry_count,
)
from importer.errors import ReadFailure, invalid, unsupported
from importer.limits import MAX_ELEMENT_COUNT, MAX_TENSOR_BYTES
from importer.read_context import ReadContext, check_nesting
from importer.tensor import FROM_EXTERNAL, FROM_NOTHING, FROM_RAW_DATA, SparseTensor, Tensor
from importer.typed_fields import FIXED_WIDTH, check_fixed_width, convert_varint_field, fixed_width_bytes
from importer.wire import Buffer, FieldCursor, as_int32, as_int64, check_varints, count_varints, read_string, varints_to_list

_DATA_TYPES: Final = {int(t): t for t in DataType}  # faster than DataType(code)
_NONE_TYPED: Final[dict[int, list[tuple[int, int, int]]]] = {}  # shared, never written
DATA_LOCATION_DEFAULT: Final = 0
DATA_LOCATION_EXTERNAL: Final = 1

# TensorProto keys (field << 3 | wire type).
_DIMS, _DIMS_PACKED = 0x08, 0x0A
_DATA_TYPE: Final = 0x10
_SEGMENT: Final = 0x1A
_STRING_DATA: Final = 0x32
_NAME: Final = 0x42
_RAW_DATA: Final = 0x4A
_DOC_STRING: Final = 0x62
_EXTERNAL_DATA: Final = 0x6A
_DATA_LOCATION: Final = 0x70
# Typed fields: key -> (field number, packed?)
_TYPED_KEYS: Final = {
    0x22: FLOAT_DATA, 0x25: FLOAT_DATA,
    0x2A: 5, 0x28: 5,
    0x3A: 7, 0x38: 7,
    0x52: 10, 0x51: 10,
    0x5A: 11, 0x58: 11,
}  # fmt: skip


def read_int64s(ctx: ReadContext, key: int, start: int, stop: int, value: int, into: list[int]) -> None:
    """Append one occurrence of a repeated int64 field, packed or not."""
    if key & 7 == 0:
        into.append(as_int64(value))
    else:
        into.extend(as_int64(v) for v in varints_to_list(ctx.buf, start, stop))


def element_count(dims: list[int], dim_offsets: list[int]) -> int:
    """Product of the dims; each must be non-negative and the product at most 2^60."""
    for index, dim in enumerate(dims):
        if dim < 0:
            raise invalid(f"dimension {dim} is negative", dim_offsets[index], f"dims[{index}]")
    if 0 in dims:
        return 0
    count = 1
    for dim in dims:
        count *= dim
        if count > MAX_ELEMENT_COUNT:
            raise invalid(f"element count exceeds 2^60 (dims {_clip_dims(dims)})", dim_offsets[0], "dims")
    return count


def _clip_dims(dims: list[int]) -> str:
    shown = ", ".join(str(d) for d in dims[:8])
    return f"[{shown}{', ...' if len(dims) > 8 else ''}]"


def check_data_type(code: int, offset: int | None) -> DataType:
    if code == 0 and offset is None:
        raise invalid("tensor has no data_type", None)
    if code == 0:
        raise invalid("data_type is 0 (UNDEFINED)", offset, "data_type")
    if not 1 <= code <= MAX_DATA_TYPE:
        raise unsupported(f"unknown data_type {code}", offset, "data_type")
    return _DATA_TYPES[code]


def _check_large_tensor(ctx: ReadContext, byte_length: int, external: bool, dims_offset: int) -> None:
    """A tensor past the specification's 2^31-1 bytes is Unsupported, unless
    its values are in external data and `Limits.max_tensor_bytes` allows it
    (docs/import-rules.md §3); decided from the header, before any value."""
    limit = ctx.limits.max_tensor_bytes
    if not external:
        held = " (held in the model file; max_tensor_bytes applies to external data only)" if limit > MAX_TENSOR_BYTES else ""
        raise unsupported(f"tensor needs {byte_length} bytes, more than 2^31-1{held}", dims_offset, "dims")
    if byte_length > limit:
        raise unsupported(f"tensor needs {byte_length} bytes, more than max_tensor_bytes={limit}", dims_offset, "dims")


def read_tensor(ctx: ReadContext, start: int, stop: int, depth: int) -> Tensor:
    """Read one TensorProto occupying buf[start:stop]."""
    check_nesting(ctx, depth)
    buf = ctx.buf
    dims: list[int] = []
    dim_offsets: list[int] = []
    code = 0
    code_offset: int | None = None
    name = doc_string = ""
    raw: tuple[int, int, int] | None = None
    typed: dict[int, list[tuple[int, int, int]]] | None = None  # (most tensors have none of these three)
    strings: list[bytes] | None = None
    strings_offset: int | None = None
    location = DATA_LOCATION_DEFAULT
    location_offset: int | None = None
    external: list[tuple[str, str, int]] | None = None
    segment_offset: int | None = None
    fields = FieldCursor(buf, start, stop)
    while fields.next():
        key, at, a, b, value = fields.key, fields.at, fields.start, fields.stop, fields.value
        if key == _DIMS or key == _DIMS_PACKED:
            before = len(dims)
            read_int64s(ctx, key, a, b, value, dims)
            dim_offsets.extend([at] * (len(dims) - before))
        elif key == _DATA_TYPE:
            code, code_offset = as_int32(value), at
        elif key == _RAW_DATA:
            raw = (at, a, b)
        elif key in _TYPED_KEYS:
            if typed is None:
                typed = {}
            typed.setdefault(_TYPED_KEYS[key], []).append((at, a, b))
        elif key == _STRING_DATA:
            if strings is None:
                strings = []
                strings_offset = at
            strings.append(bytes(buf[a:b]))
        elif key == _NAME:
            name = read_string(buf, a, b, at, "name")
        elif key == _DOC_STRING:
            doc_string = read_string(buf, a, b, at, "doc_string")
        elif key == _EXTERNAL_DATA:
            if external is None:
                external = []
            try:
                entry_key, entry_value = read_string_pair(ctx, a, b, depth + 1)
            except ReadFailure as failure:
                raise failure.within(f"external_data[{len(external)}]", at) from None
            external.append((entry_key, entry_value, at))
        elif key == _DATA_LOCATION:
            location, location_offset = as_int32(value), at
        elif key == _SEGMENT:
            segment_offset = at
    data_type = check_data_type(code, code_offset)
    if segment_offset is not None:
        raise unsupported("tensor segments are not supported", segment_offset, "segment")
    count = element_count(dims, dim_offsets)
    bits = bits_per_element(data_type)
    byte_length = (count * bits + 7) // 8
    if byte_length > MAX_TENSOR_BYTES:
        _check_large_tensor(ctx, byte_length, location == DATA_LOCATION_EXTERNAL, dim_offsets[0])
    typed_present = {field: ranges for field, ranges in typed.items() if any(a < b for _, a, b in ranges)} if typed else _NONE_TYPED
    if strings:
        typed_present = {**typed_present, STRING_DATA: [(strings_offset or 0, 0, 0)]}
    tensor = Tensor(
        name=name,
        data_type=data_type,
        dims=tuple(dims),
        element_count=count,
        byte_length=byte_length,
        source=FROM_NOTHING,
        doc_string=doc_string,
    )
    if location == DATA_LOCATION_EXTERNAL:
        _refuse_mixing(raw, typed_present, "external data")
        tensor.source = FROM_EXTERNAL
        tensor.external_data = _external_entries(external or [])
        ctx.external_tensors.append(tensor)
        return tensor
    if location != DATA_LOCATION_DEFAULT:
        raise invalid(f"unknown data_location {location}", location_offset, "data_location")
    if raw is not None:
        _refuse_mixing(None, typed_present, "raw_data")
        raw_at, raw_start, raw_stop = raw
        if data_type == DataType.STRING:
            raise invalid("STRING tensors cannot use raw_data", raw_at, "raw_data")
        if raw_stop - raw_start != byte_length:
            raise invalid(f"raw_data has {raw_stop - raw_start} bytes, expected {byte_length}", raw_at, "raw_data")
        tensor.source = FROM_RAW_DATA
        tensor.bind_view(ctx.owner, raw_start)
        return tensor
    expected_field = TYPED_FIELD[data_type]
    for field in typed_present:
        if field != expected_field:
            offset = typed_present[field][0][0]
            field_name = TYPED_FIELD_NAMES[field]
            raise invalid(f"{field_name} cannot hold {data_type.name} values", offset, field_name)
    if data_type == DataType.STRING:
        strings = strings or []
        if len(strings) != count:
            raise invalid(f"string_data has {len(strings)} entries, expected {count}", strings_offset, "string_data")
        tensor.source = TYPED_FIELD_NAMES[STRING_DATA]
        tensor.bind_strings(strings)
        return tensor
    if expected_field not in typed_present:
        if count:
            raise invalid(f"tensor has {count} elements and no values", None)
        tensor.bind_converted(b"")
        return tensor
    ranges = typed_present[expected_field]
    field_name = TYPED_FIELD_NAMES[expected_field]
    expected_entries = typed_entry_count(data_type, count)
    entries = _entry_count(buf, expected_field, ranges, expected_entries)
    if entries != expected_entries:  # checked before converting: memory stays bounded by the tensor's size
        raise invalid(f"{field_name} has {entries} entries, expected {expected_entries}", ranges[0][0], field_name)
    data: bytes | bytearray
    if expected_field in FIXED_WIDTH:
        data = fixed_width_bytes(buf, ranges, FIXED_WIDTH[expected_field], field_name)
    else:
        data = convert_varint_field(buf, ranges, expected_field, data_type)
    if len(data) != byte_length:
        raise invalid(f"{field_name} gives {len(data)} bytes, expected {byte_length}", ranges[0][0], field_name)
    tensor.source = field_name
    tensor.bind_converted(data)
    return tensor


def _entry_count(buf: Buffer, field: int, ranges: list[tuple[int, int, int]], expected: int) -> int:
    """Entries of a typed field, counted without decoding them. When the count
    is wrong, the field's bytes are checked first: bytes that are not valid
    protobuf are Malformed before they are the wrong amount."""
    if field in FIXED_WIDTH:
        check_fixed_width(ranges, FIXED_WIDTH[field], TYPED_FIELD_NAMES[field])
        return sum(b - a for _, a, b in ranges) // FIXED_WIDTH[field]
    entries = sum(count_varints(buf, a, b) for _, a, b in ranges)
    if entries != expected:
        for _, a, b in ranges:
            check_varints(buf, a, b)
    return entries


def _refuse_mixing(raw: tuple[int, int, int] | None, typed: dict[int, list[tuple[int, int, int]]], chosen: str) -> None:
    if raw is not None:
        raise invalid(f"tensor has both {chosen} and raw_data", raw[0], "raw_data")
    for field, ranges in typed.items():
        name = TYPED_FIELD_NAMES[field]
        raise invalid(f"tensor has both {chosen} and {name}", ranges[0][0], name)


def _external_entries(entries: list[tuple[str, str, int]]) -> dict[str, str]:
    """external_data as a dict; a key given twice is refused."""
    seen: dict[str, str] = {}
    for index, (key, value, at) in enumerate(entries):
        if key in seen:
            raise invalid(f"external_data names {key!r} twice", at, f"external_data[{index}]")
        seen[key] = value
    return seen


def read_string_pair(ctx: ReadContext, start: int, stop: int, depth: int) -> tuple[str, str]:
    """Read a StringStringEntryProto: (key, value)."""
    check_nesting(ctx, depth)
    key_text = value_text = ""
    fields = FieldCursor(ctx.buf, start, stop)
    while fields.next():
        key, at, a, b = fields.key, fields.at, fields.start, fields.stop
        if key == 0x0A:
            key_text = read_string(ctx.buf, a, b, at, "key")
        elif key == 0x12:
            value_text = read_string(ctx.buf, a, b, at, "value")
    return key_text, value_text


def _read_part(ctx: ReadContext, start: int, stop: int, depth: int, offset: int, label: str) -> Tensor:
    """The values or indices tensor of a sparse tensor."""
    try:
        tensor = read_tensor(ctx, start, stop, depth)
    except ReadFailure as failure:
        raise failure.within(label, offset) from None
    tensor.offset = offset
    return tensor


def read_sparse_tensor(ctx: ReadContext, start: int, stop: int, depth: int) -> SparseTensor:
    """Read one SparseTensorProto; values and indices are required."""
    check_nesting(ctx, depth)
    values: Tensor | None = None
    indices: Tensor | None = None
    dims: list[int] = []
    dim_offsets: list[int] = []
    fields = FieldCursor(ctx.buf, start, stop)
    while fields.next():
        key, at, a, b, value = fields.key, fields.at, fields.start, fields.stop, fields.value
        if key == 0x0A:
            values = _read_part(ctx, a, b, depth + 1, at, "values")
        elif key == 0x12:
            indices = _read_part(ctx, a, b, depth + 1, at, "indices")
        elif key == 0x18 or key == 0x1A:
            before = len(dims)
            read_int64s(ctx, key, a, b, value, dims)
            dim_offsets.extend([at] * (len(dims) - before))
    if values is None:
        raise invalid("sparse tensor has no values", None, None)
    if indices is None:
        raise invalid("sparse tensor has no indices", None, None)
    for index, dim in enumerate(dims):
        if dim < 0:
            raise invalid(f"dimension {dim} is negative", dim_offsets[index], f"dims[{index}]")
    return SparseTensor(values, indices, tuple(dims))
