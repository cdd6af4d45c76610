"""Writing protobuf fields, for the copies of a model's bytes the check stages give onnx and onnxruntime.

Owns `varint`, `field` (a length-delimited field: key, length, payload) and
`SET_ASIDE`, the fields that mark a tensor whose values were set aside as
external data (`data_location = EXTERNAL`, one `external_data` entry,
location "set-aside"): the `shape` stage's copy for onnx's inference and the
`runtime` stage's for onnxruntime (`weights_aside`) write it after a
tensor's name, element type and dims.
"""

from __future__ import annotations

from typing import Final


def varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(key: int, payload: bytes) -> bytes:
    return varint(key) + varint(len(payload)) + payload


# data_location = EXTERNAL, external_data = [{key: "location", value: "set-aside"}]
SET_ASIDE: Final = bytes([14 << 3, 1]) + field(13 << 3 | 2, field(1 << 3 | 2, b"location") + field(2 << 3 | 2, b"set-aside"))
