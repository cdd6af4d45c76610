"""The types onnx's inference gives the values a model does not declare (run in the check worker).

Owns `inferred_types(inferred, model)`: from the model onnx's
`infer_shapes` returns (an `onnx.ModelProto`), the type of each value of the
main graph that the model itself gives none (no graph input, output or
value_info declares it), as the JSON text of a list of `{"name": ..., "type":
...}`, each type in the form `importer.summary.describe_type` gives declared
ones (`{"kind": "tensor", "elem_type": "FLOAT", "shape": [1, "N", null]}`:
symbolic dimensions by name, unknown ones null). At most MAX_INFERRED of
them, in the graph's value order, and at most MAX_INFERRED_BYTES of text (the
report that carries them is one bounded frame). Text, not objects: the front
end keeps it and serves it as it is, so that 100,000 types cost no
validation of 100,000 objects on the way (`service.store.catalog_shapes`);
each distinct type is described once. The explorer draws them on the edges
whose tensors are not declared.
"""

from __future__ import annotations

import json
from typing import Any, Final

from importer.graph import OnnxModel
from importer.summary import element_type_name
from service.sandbox.protocol import MAX_INFERRED, MAX_INFERRED_BYTES

Json = Any
NONE: Final = ""  # no type inferred: nothing to keep


def inferred_types(inferred: Any, model: OnnxModel) -> str:
    """The JSON list of {name, type} of the main graph's undeclared values that onnx inferred ("" if none)."""
    undeclared = {name for name, value in model.graph.values.items() if value.type is None and value.initializer is None}
    if not undeclared:
        return NONE
    texts: dict[bytes, str | None] = {}  # a type's bytes -> its JSON text (None: onnx left it empty)
    seen: set[str] = set()
    entries: list[str] = []
    size = 2
    for info in (*inferred.graph.value_info, *inferred.graph.output):
        name = info.name
        if name not in undeclared or name in seen:
            continue
        key = info.type.SerializeToString()
        text = texts.get(key, "")
        if text == "":
            described = _described(info.type)
            text = texts[key] = None if described is None else json.dumps(described, separators=(",", ":"))
        if text is None:
            continue
        entry = f'{{"name":{json.dumps(name)},"type":{text}}}'
        size += len(entry) + 1
        if size > MAX_INFERRED_BYTES:
            break
        seen.add(name)
        entries.append(entry)
        if len(entries) >= MAX_INFERRED:
            break
    return "[" + ",".join(entries) + "]" if entries else NONE


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
