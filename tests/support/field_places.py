"""Where a finding points, read on the bytes independently of our reader: a
field path walked through the model as `onnx` parsed it (`resolve_path`), the
length-delimited field whose key is at an offset (`field_at`), and
`assert_field_at`, that the bytes at an offset are exactly the field a path
names. Shared by the operator check's tests and the check stages' tests."""

from __future__ import annotations

import re
from typing import Any

import onnx

SEGMENT = re.compile(r"^([a-z_]+)(?:\[(\d+)\])?$")
LENGTH_DELIMITED = 2


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def field_at(data: bytes, offset: int) -> tuple[int, bytes]:
    """The key and the payload of the length-delimited field whose key is at `offset`."""
    key, pos = _varint(data, offset)
    length, pos = _varint(data, pos)
    return key, data[pos : pos + length]


def resolve_path(model: onnx.ModelProto, field_path: str) -> tuple[Any, str, Any]:
    """(parent message, field name, value) that `field_path` names in `model`."""
    segments = field_path.split(".")
    assert segments[0] == "ModelProto", field_path
    parent: Any = None
    name = ""
    current: Any = model
    for segment in segments[1:]:
        match = SEGMENT.match(segment)
        assert match, (field_path, segment)
        parent, name = current, match.group(1)
        current = getattr(current, name)
        if match.group(2) is not None:
            current = current[int(match.group(2))]
    return parent, name, current


def assert_field_at(data: bytes, model: onnx.ModelProto, field_path: str, offset: int, label: object) -> None:
    """The bytes at `offset` are the field `field_path` names: that field's
    key, then exactly its message or string (`label` names the finding)."""
    parent, name, value = resolve_path(model, field_path)
    assert parent is not None, label
    number = parent.DESCRIPTOR.fields_by_name[name].number
    key, payload = field_at(data, offset)
    assert key == number << 3 | LENGTH_DELIMITED, (label, key)
    if isinstance(value, str):
        assert payload.decode() == value, label
    else:
        assert type(value).FromString(payload) == value, label
