"""Typed-field tensor values converted to the raw layout (docs/import-rules.md §3).

Owns the conversion of float_data, double_data, int64_data, uint64_data and
int32_data entries into little-endian raw bytes for each element type, in bulk
with numpy. The caller has already checked which field belongs to the type.
"""

from __future__ import annotations

import struct
from typing import Final

import numpy as np
import numpy.typing as npt

from importer.element_types import (
    DOUBLE_DATA,
    FLOAT_DATA,
    FOUR_BIT_TYPES,
    INT32_DATA,
    INT64_DATA,
    SIX_BIT_TYPES,
    TWO_BIT_TYPES,
    UINT64_DATA,
    DataType,
    bits_per_element,
)
from importer.errors import malformed
from importer.wire import Buffer, iter_varint_windows, varints_to_list

FIXED_WIDTH: Final = {FLOAT_DATA: 4, DOUBLE_DATA: 8}


def check_fixed_width(ranges: list[tuple[int, int, int]], width: int, field_name: str) -> None:
    """Every occurrence must hold whole entries. `ranges` holds (key_offset,
    start, stop) per occurrence of the field."""
    for key_offset, start, stop in ranges:
        if (stop - start) % width:
            raise malformed(f"packed field of {stop - start} bytes is not a multiple of {width}", key_offset, field_name)


def fixed_width_bytes(buf: Buffer, ranges: list[tuple[int, int, int]], width: int, field_name: str) -> bytes:
    """Concatenate packed and unpacked fixed-width entries (already little-endian)."""
    check_fixed_width(ranges, width, field_name)
    return b"".join(buf[start:stop] for _, start, stop in ranges)


def convert_varint_field(buf: Buffer, ranges: list[tuple[int, int, int]], field: int, data_type: DataType) -> bytearray:
    """Raw-layout bytes of the varint typed field `field` for `data_type`,
    decoded and converted a window at a time: memory stays close to the
    result's own size (`ranges`: (key_offset, start, stop) per occurrence)."""
    small = _small_int_run(buf, ranges, field, data_type)
    if small is not None:
        return small
    out = bytearray()
    six_bit = data_type in SIX_BIT_TYPES
    for _, start, stop in ranges:
        for values in iter_varint_windows(buf, start, stop):
            out += convert_varints(values, field, data_type)
    return bytearray(pack_six_bit(np.frombuffer(out, dtype=np.uint8))) if six_bit else out


_SMALL_RUN_BYTES: Final = 64
_WHOLE_WORDS: Final = {(INT64_DATA, DataType.INT64): "<{}Q", (UINT64_DATA, DataType.UINT64): "<{}Q", (INT32_DATA, DataType.INT32): "<{}I"}


def _small_int_run(buf: Buffer, ranges: list[tuple[int, int, int]], field: int, data_type: DataType) -> bytearray | None:
    """The common small case (a shape in int64_data, an int32 scalar) packed
    with struct, where numpy's per-call cost would dominate; None otherwise.
    Same bytes as the bulk path: int64 and uint64 entries as 64-bit words,
    int32 entries as their low 32 bits."""
    layout = _WHOLE_WORDS.get((field, data_type))
    if layout is None or sum(stop - start for _, start, stop in ranges) >= _SMALL_RUN_BYTES:
        return None
    values = [value for _, start, stop in ranges for value in varints_to_list(buf, start, stop)]
    if field == INT32_DATA:
        values = [value & 0xFFFFFFFF for value in values]
    return bytearray(struct.pack(layout.format(len(values)), *values))


def convert_varints(values: npt.NDArray[np.uint64], field: int, data_type: DataType) -> bytes:
    """Raw-layout bytes of some entries of `field` for `data_type` (for the
    6-bit types: one element per byte, packed afterwards by `pack_six_bit`)."""
    if field in (INT64_DATA, UINT64_DATA):
        if data_type == DataType.UINT32:
            return (values & np.uint64(0xFFFFFFFF)).astype("<u4").tobytes()
        return values.astype("<u8").tobytes()
    assert field == INT32_DATA
    low32 = values & np.uint64(0xFFFFFFFF)
    bits = bits_per_element(data_type)
    if data_type == DataType.BOOL:
        nonzero: npt.NDArray[np.bool_] = low32 != 0
        return nonzero.astype(np.uint8).tobytes()
    if data_type in FOUR_BIT_TYPES or data_type in TWO_BIT_TYPES:
        return (low32 & np.uint64(0xFF)).astype(np.uint8).tobytes()
    if data_type in SIX_BIT_TYPES:
        return (low32 & np.uint64(0x3F)).astype(np.uint8).tobytes()
    if bits == 32:
        return low32.astype("<u4").tobytes()
    if bits == 16:
        return (low32 & np.uint64(0xFFFF)).astype("<u2").tobytes()
    return (low32 & np.uint64(0xFF)).astype(np.uint8).tobytes()


def pack_six_bit(elements: npt.NDArray[np.uint8]) -> bytes:
    """Pack 6-bit elements into a bit stream from the lowest bit, padded:
    every 4 elements are 24 bits, written as 3 little-endian bytes."""
    count = elements.size
    padded = np.zeros((count + 3) // 4 * 4, dtype=np.uint32)
    padded[:count] = elements
    groups = padded.reshape(-1, 4)
    word = groups[:, 0] | groups[:, 1] << 6 | groups[:, 2] << 12 | groups[:, 3] << 18
    packed = np.stack([word & 0xFF, word >> 8 & 0xFF, word >> 16], axis=1).astype(np.uint8).reshape(-1)
    result: bytes = packed[: (count * 6 + 7) // 8].tobytes()
    return result
