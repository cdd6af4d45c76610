"""The types onnx's inference gives the values a model does not declare (run in the check worker).

Owns `inferred_types(inferred, model)`: from the model onnx's inference
returns, as the bytes its C++ side writes (`ModelProto`, never parsed into
Python objects whole: for 200,000 nodes that parse alone took longer than
this), the type of each value of the main graph that the model itself gives
none (no graph input, output or value_info declares it), as the JSON text of
a list of `{"name": ..., "type": ...}`, each type in the form
`importer.summary.describe_type` gives declared ones (`{"kind": "tensor",
"elem_type": "FLOAT", "shape": [1, "N", null]}`: symbolic dimensions by name,
unknown ones null). onnx appends a `value_info` entry to the graph for each
value it infers a type for that has none declared: those past the model's own
entries are read (`importer.wire.field_spans` finds them; no other field is
looked into), and each distinct type's bytes are described once (onnx's
`TypeProto` parses them). At most MAX_INFERRED values, in the
order onnx lists them, and at most MAX_INFERRED_BYTES of text (the report
that carries them is one bounded frame). Text, not objects: the front end
keeps it and serves it as it is (`service.store.catalog_shapes`). The
explorer draws them on the edges whose tensors are not declared.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from json.encoder import encode_basestring_ascii
from typing import Any, Final

from importer.graph import OnnxModel
from importer.summary import element_type_name
from importer.wire import FieldCursor, field_spans
from service.sandbox.protocol import MAX_INFERRED, MAX_INFERRED_BYTES

Json = Any
NONE: Final = ""  # no type inferred: nothing to keep
_MODEL_GRAPH: Final = 7 << 3 | 2
_GRAPH_VALUE_INFO: Final = 13 << 3 | 2
_VALUE_NAME: Final = 1 << 3 | 2
_VALUE_TYPE: Final = 2 << 3 | 2
_GRAPH_FIELD: Final = frozenset({_MODEL_GRAPH})
_VALUE_INFO_FIELD: Final = frozenset({_GRAPH_VALUE_INFO})


def inferred_types(inferred: bytes, model: OnnxModel) -> str:
    """The JSON list of {name, type} of the main graph's undeclared values that onnx inferred ("" if none)."""
    graph = model.proto.graph
    if graph is None:
        return NONE
    texts: dict[bytes, str | None] = {}  # a type's bytes -> its JSON text (None: onnx left it empty)
    seen: set[bytes] = set()
    entries: list[str] = []
    size = 2
    for name, type_bytes in _appended_values(inferred, len(graph.value_info)):
        if name in seen:
            continue
        text = texts.get(type_bytes, "")
        if text == "":
            text = texts[type_bytes] = _type_text(type_bytes)
        if text is None:
            continue
        try:
            entry = f'{{"name":{encode_basestring_ascii(name.decode())},"type":{text}}}'
        except UnicodeDecodeError:
            continue  # no value of the model has such a name
        size += len(entry) + 1
        if size > MAX_INFERRED_BYTES:
            break
        seen.add(name)
        entries.append(entry)
        if len(entries) >= MAX_INFERRED:
            break
    return "[" + ",".join(entries) + "]" if entries else NONE


def _appended_values(data: bytes, declared: int) -> Iterator[tuple[bytes, bytes]]:
    """(name, type bytes) of each `value_info` entry onnx appended to the
    main graph, in order: those past the model's own `declared` entries. onnx
    appends one for every node output with no declared type (filling in a
    typeless entry of the model's as well), so these are exactly the values
    the model does not declare. An entry is read as onnx writes it (its name,
    then its type, short lengths), else field by field."""
    for graph_start, graph_stop in field_spans(data, 0, len(data), _GRAPH_FIELD):
        for start, stop in field_spans(data, graph_start, graph_stop, _VALUE_INFO_FIELD)[declared:]:
            name_length = data[start + 1] if stop - start > 1 and data[start] == _VALUE_NAME else 0x80
            name_stop = start + 2 + name_length
            if name_length < 0x80 and name_stop + 1 < stop and data[name_stop] == _VALUE_TYPE:
                type_length = data[name_stop + 1]
                if type_length < 0x80 and name_stop + 2 + type_length == stop:
                    yield data[start + 2 : name_stop], data[name_stop + 2 : stop]
                    continue
            name = type_bytes = b""
            value = FieldCursor(data, start, stop)
            while value.next():
                if value.key == _VALUE_NAME:
                    name = data[value.start : value.stop]
                elif value.key == _VALUE_TYPE:
                    type_bytes = data[value.start : value.stop]
            yield name, type_bytes


def _type_text(type_bytes: bytes) -> str | None:
    """A type's bytes as `describe_type` writes it, in JSON; None when onnx left it empty."""
    import onnx

    described = _described(onnx.TypeProto.FromString(type_bytes))
    return None if described is None else json.dumps(described, separators=(",", ":"))


def _described(value_type: Any) -> Json:
    """An onnx TypeProto as `describe_type` writes one; None when onnx left it empty."""
    which = value_type.WhichOneof("value")
    if which in ("tensor_type", "sparse_tensor_type"):
        tensor = getattr(value_type, which)
        if not tensor.elem_type:
            return None
        shape = [_dim(dim) for dim in tensor.shape.dim] if tensor.HasField("shape") else None
        kind = "tensor" if which == "tensor_type" else "sparse_tensor"
        return {"kind": kind, "elem_type": element_type_name(tensor.elem_type), "shape": shape}
    if which in ("sequence_type", "optional_type"):
        elem = _described(getattr(value_type, which).elem_type)
        return None if elem is None else {"kind": which.removesuffix("_type"), "elem_type": elem}
    if which == "map_type":
        entry = _described(value_type.map_type.value_type)
        return None if entry is None else {"kind": "map", "key_type": element_type_name(value_type.map_type.key_type), "value_type": entry}
    return None


def _dim(dim: Any) -> int | str | None:
    which = dim.WhichOneof("value")
    if which == "dim_value":
        return int(dim.dim_value)
    if which == "dim_param":
        return str(dim.dim_param)
    return None
