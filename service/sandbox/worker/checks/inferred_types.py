"""The types onnx's inference gives the values a model does not declare (run in the check worker).

Owns `inferred_types(inferred, model)`: from the model onnx's
`infer_shapes` returns (an `onnx.ModelProto`), the type of each value of the
main graph that the model itself gives none (no graph input, output or
value_info declares it), in the form `importer.summary.describe_type` gives
declared ones (`{"kind": "tensor", "elem_type": "FLOAT", "shape": [1, "N",
null]}`: symbolic dimensions by name, unknown ones null). At most
MAX_INFERRED of them, in the graph's value order, and about MAX_INFERRED_BYTES
as JSON (the report that carries them is one bounded frame). The `shape` stage hands
them back with its findings; the front end keeps them in the model's
catalogue (`service.store.catalog_shapes`), and the explorer draws them on
the edges whose tensors are not declared.
"""

from __future__ import annotations

from typing import Any, Final

from importer.graph import OnnxModel
from importer.summary import element_type_name
from service.sandbox.protocol import MAX_INFERRED

MAX_INFERRED_BYTES: Final = 8 << 20  # their size as JSON, about (a StageReport frame holds up to 16 MiB)

Json = Any


def inferred_types(inferred: Any, model: OnnxModel) -> dict[str, Json]:
    """Name -> type of the main graph's undeclared values that onnx inferred."""
    undeclared = {name for name, value in model.graph.values.items() if value.type is None and value.initializer is None}
    found: dict[str, Json] = {}
    if not undeclared:
        return found
    size = 0
    for info in (*inferred.graph.value_info, *inferred.graph.output):
        if info.name not in undeclared or info.name in found:
            continue
        described = _described(info.type)
        if described is None:
            continue
        size += len(info.name) + 64 + 12 * len(described.get("shape") or ())  # a JSON entry, about
        if size > MAX_INFERRED_BYTES:
            break
        found[info.name] = described
        if len(found) >= MAX_INFERRED:
            break
    return found


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
