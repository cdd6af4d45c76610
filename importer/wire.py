"""Protobuf wire format: keys, varints, lengths, strings and packed scalars.

Owns every rule of docs/import-rules.md §1 that is about bytes: keys of at most 32 bits,
field 0 and wire types 3, 4, 6, 7 refused; varints of at most 10 bytes whose
tenth byte is 0 or 1; lengths compared with the bytes that remain before any
slice is taken; UTF-8 checked for string fields only.

All positions are absolute offsets into one buffer (the whole input: bytes,
a bytearray or a read-only mmap, whose slices decode to text twice as fast as
a memoryview's), so an error's offset is always from the start of the file. Nothing here
allocates from a length read off the input. No I/O.
"""

from __future__ import annotations

import mmap
from collections.abc import Iterator
from typing import Final, TypeAlias

import numpy as np
import numpy.typing as npt

from importer.errors import ReadFailure, malformed

Buffer: TypeAlias = bytes | bytearray | mmap.mmap

WIRE_VARINT: Final = 0
WIRE_FIXED64: Final = 1
WIRE_LEN: Final = 2
WIRE_FIXED32: Final = 5

MAX_VARINT_BYTES: Final = 10
_TWO_64: Final = 1 << 64
_TWO_32: Final = 1 << 32


def read_varint(buf: Buffer, pos: int, end: int) -> tuple[int, int]:
    """Read one varint starting at `pos`; return (value, position after it)."""
    start = pos
    value = 0
    shift = 0
    while True:
        if pos >= end:
            raise malformed("varint cut off by the end of the data", start)
        byte = buf[pos]
        pos += 1
        if shift == 63 and byte > 1:
            raise malformed("varint overflows 64 bits", start)
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise malformed("varint longer than 10 bytes", start)


def as_int64(value: int) -> int:
    """Two's-complement reading of a 64-bit varint."""
    return value - _TWO_64 if value >> 63 else value


def as_int32(value: int) -> int:
    """int32 and enum fields keep the low 32 bits, as protobuf does."""
    value &= 0xFFFFFFFF
    return value - _TWO_32 if value >> 31 else value


def read_key(buf: Buffer, key_offset: int, end: int) -> tuple[int, int]:
    """Slow path of a key (2 bytes or more): at most 32 bits."""
    key, pos = read_varint(buf, key_offset, end)
    if key > 0xFFFFFFFF:
        raise malformed("field key longer than 32 bits", key_offset)
    return key, pos


def read_length(buf: Buffer, pos: int, end: int, key_offset: int) -> tuple[int, int]:
    """Slow path of a length prefix: return the payload's (start, stop), checked."""
    length, pos = read_varint(buf, pos, end)
    if length > end - pos:
        raise overrun(length, end - pos, key_offset)
    return pos, pos + length


def overrun(length: int, remaining: int, key_offset: int) -> ReadFailure:
    return malformed(f"length {length} exceeds the {remaining} bytes remaining", key_offset)


def field_zero(key_offset: int) -> ReadFailure:
    return malformed("field number 0", key_offset)


def skip_scalar(buf: Buffer, pos: int, end: int, key: int, key_offset: int) -> int:
    """Skip the value of a key whose wire type is not LEN; refuse the wire
    types that are not allowed and field 0. Return the position after it."""
    wire = key & 7
    if key < 8:
        raise field_zero(key_offset)
    if wire == WIRE_VARINT:
        return read_varint(buf, pos, end)[1]
    if wire == WIRE_FIXED32 or wire == WIRE_FIXED64:
        width = 4 if wire == WIRE_FIXED32 else 8
        if width > end - pos:
            raise malformed(f"{width}-byte value cut off by the end of the data", key_offset)
        return pos + width
    kind = "group" if wire in (3, 4) else "unknown"
    raise malformed(f"wire type {wire} ({kind}) is not allowed", key_offset)


class FieldCursor:
    """Walks the fields of one message occupying buf[pos:end], one `next()`
    at a time, leaving the field in its attributes: `key`, `at` (the key's
    offset), `start` and `stop` (for a varint its bytes, else the payload)
    and `value` (a varint's 64-bit value, else 0). Every key, varint and
    length is checked here; unknown fields are visited too, for the caller
    to ignore. (In the compiled build its integers stay unboxed and no tuple
    is made per field.)"""

    __slots__ = ("buf", "pos", "end", "key", "at", "start", "stop", "value")

    def __init__(self, buf: Buffer, pos: int, end: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = end
        self.key = self.at = self.start = self.stop = self.value = 0

    def next(self) -> bool:
        """Move to the next field; False at the end of the message."""
        buf = self.buf
        pos = self.pos
        end = self.end
        if pos >= end:
            return False
        at = pos
        key = buf[pos]
        pos += 1
        if key >= 0x80:
            key, pos = read_key(buf, at, end)
        wire = key & 7
        value = 0
        if wire == WIRE_LEN and key > 7:
            size = buf[pos] if pos < end else 0x80
            if size < 0x80:
                pos += 1
                if size > end - pos:
                    raise overrun(size, end - pos, at)
                start, stop = pos, pos + size
            else:
                start, stop = read_length(buf, pos, end, at)
            pos = stop
        elif wire == WIRE_VARINT and key > 7:
            start = pos
            value = buf[pos] if pos < end else 0x80
            if value < 0x80:
                pos += 1
            else:
                value, pos = read_varint(buf, pos, end)
            stop = pos
        else:
            start = pos
            pos = stop = skip_scalar(buf, pos, end, key, at)
        self.pos = pos
        self.key = key
        self.at = at
        self.start = start
        self.stop = stop
        self.value = value
        return True


def iter_fields(buf: Buffer, pos: int, end: int) -> Iterator[tuple[int, int, int, int, int]]:
    """The fields of one message as (key, at, start, stop, value) tuples: a
    `FieldCursor` as a generator, for tests and cold paths."""
    fields = FieldCursor(buf, pos, end)
    while fields.next():
        yield fields.key, fields.at, fields.start, fields.stop, fields.value


def field_spans(buf: Buffer, pos: int, end: int, keys: frozenset[int]) -> list[tuple[int, int]]:
    """The (start, stop) of each field of the message at buf[pos:end] whose
    key is one of `keys`, in order: for a caller that wants a few fields out
    of many (a graph's value_info past its 200,000 nodes), in one call (in
    the compiled build the walk runs in C)."""
    spans: list[tuple[int, int]] = []
    fields = FieldCursor(buf, pos, end)
    while fields.next():
        if fields.key in keys:
            spans.append((fields.start, fields.stop))
    return spans


def read_string(buf: Buffer, start: int, stop: int, key_offset: int, label: str, index: int = -1) -> str:
    """Decode a string field, which must be valid UTF-8.

    `label` (and `index`, for a repeated field) name the field in the error.
    """
    if start == stop:
        return ""
    try:
        return buf[start:stop].decode()
    except UnicodeDecodeError as error:
        raise invalid_utf8(error, key_offset, label if index < 0 else f"{label}[{index}]") from None


def invalid_utf8(error: UnicodeDecodeError, key_offset: int, segment: str) -> ReadFailure:
    return malformed(f"string is not valid UTF-8 (byte {error.start} of it)", key_offset, segment)


def varints_to_list(buf: Buffer, start: int, stop: int) -> list[int]:
    """Decode a packed run of varints into unsigned 64-bit values."""
    values = []
    pos = start
    while pos < stop:
        byte = buf[pos]
        if byte < 0x80:
            values.append(byte)
            pos += 1
        else:
            value, pos = read_varint(buf, pos, stop)
            values.append(value)
    return values


_BULK_THRESHOLD: Final = 64


_WINDOW_BYTES: Final = 1 << 18  # the bulk decoder works on 256 KiB at a time: about 10 MB of temporaries


def count_varints(buf: Buffer, start: int, stop: int) -> int:
    """How many varints a packed run holds (its bytes below 0x80), without decoding."""
    count = 0
    if stop - start < _BULK_THRESHOLD:  # a shape or a scalar: a loop costs less than a numpy call
        for pos in range(start, stop):
            if buf[pos] < 0x80:
                count += 1
        return count
    for window in range(start, stop, _WINDOW_BYTES):
        chunk = np.frombuffer(buf, dtype=np.uint8, count=min(_WINDOW_BYTES, stop - window), offset=window)
        count += int(np.count_nonzero(chunk < 0x80))
    return count


def check_varints(buf: Buffer, start: int, stop: int) -> None:
    """Refuse a packed run holding a bad varint (the first one), keeping nothing."""
    for _ in iter_varint_windows(buf, start, stop):
        pass


def varints_to_array(buf: Buffer, start: int, stop: int) -> npt.NDArray[np.uint64]:
    """Decode a packed run of varints (unsigned 64-bit) into one array."""
    parts = list(iter_varint_windows(buf, start, stop))
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)


def iter_varint_windows(buf: Buffer, start: int, stop: int) -> Iterator[npt.NDArray[np.uint64]]:
    """Decode a packed run of varints a window of bytes at a time (each ending
    with a whole varint), in bulk with numpy, so that temporaries stay bounded
    whatever the run's size. The first bad varint is refused by `read_varint`
    itself, so bulk and scalar decoding refuse alike."""
    if stop - start < _BULK_THRESHOLD:
        yield np.array(varints_to_list(buf, start, stop), dtype=np.uint64)
        return
    pos = start
    while pos < stop:
        data = np.frombuffer(buf, dtype=np.uint8, count=min(_WINDOW_BYTES, stop - pos), offset=pos)
        last = np.flatnonzero(data < 0x80)
        if last.size == 0:  # no varint ends in this window: cut off, or longer than 10 bytes
            read_varint(buf, pos, stop)
            raise AssertionError("read_varint accepted a varint the bulk decoder refused")
        first = np.empty_like(last)
        first[0] = 0
        first[1:] = last[:-1] + 1
        lengths = last - first + 1
        bad = (lengths > MAX_VARINT_BYTES) | ((lengths == MAX_VARINT_BYTES) & (data[last] > 1))
        if bad.any():
            read_varint(buf, pos + int(first[int(bad.argmax())]), stop)
            raise AssertionError("read_varint accepted a varint the bulk decoder refused")
        end = int(last[-1]) + 1
        place = np.arange(end, dtype=np.int64) - np.repeat(first, lengths)
        shifted = (data[:end] & 0x7F).astype(np.uint64) << (place * 7).astype(np.uint64)
        yield np.bitwise_or.reduceat(shifted, first)
        pos += end


def find_field(buf: Buffer, holder_offset: int, key: int, index: int = 0) -> int | None:
    """Offset of the `index`-th occurrence of `key` inside the message whose
    own key is at `holder_offset`, or None. Used only to place errors found
    after reading (graph resolution), so the reader keeps no per-field offsets.
    """
    _, pos = read_varint(buf, holder_offset, len(buf))
    length, pos = read_varint(buf, pos, len(buf))
    seen = 0
    fields = FieldCursor(buf, pos, pos + length)
    while fields.next():
        if fields.key == key:
            if seen == index:
                return fields.at
            seen += 1
    return None
