"""What the static size estimate knows of a value, and the small constants it folds.

Owns `Info` (a value's element type, shape and, for small numeric tensors,
its values), `Out` (a size rule's result for one output), `Folder` (the
values read from initializers and folded so far, under one budget for the
whole model: `MAX_READ_ELEMENTS` read per tensor, `MAX_FOLDED_ELEMENTS` kept
per value, `MAX_FOLDED_TOTAL` in all), and the shape and array arithmetic
the rules of `service.checks.stages.size_rules` share: broadcasting,
`Cast` of small values, integer folding as the runtime's int64 wraps, and
the node attribute readers. Nothing the model asks for is ever allocated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from importer.attribute_types import AttributeType
from importer.element_types import DataType, has_native_numpy_dtype, numpy_dtype_for
from importer.errors import ModelImportError
from importer.messages import Attribute, Node, TensorType, TypeProto
from importer.tensor import Tensor

MAX_READ_ELEMENTS: Final = 1 << 12  # a tensor's values are read only when it has at most this many
MAX_FOLDED_ELEMENTS: Final = 1 << 12  # a computed value is kept only when it has at most this many
MAX_FOLDED_TOTAL: Final = 1 << 20  # elements read or kept across the whole model (8 MB of int64 at most)

Array = npt.NDArray[Any]
Dims = tuple[int | None, ...]  # None: an unknown dimension

FLOAT: Final = int(DataType.FLOAT)
INT64: Final = int(DataType.INT64)
BOOL: Final = int(DataType.BOOL)


class Info:
    """What is known of one value: element type, shape (None: unknown rank),
    and its values: an initializer's tensor (read on demand) or a small array.
    Never changed once made (one may stand for several values)."""

    __slots__ = ("elem", "shape", "tensor", "array")

    def __init__(self, elem: int | None, shape: Dims | None, tensor: Tensor | None = None, array: Array | None = None) -> None:
        self.elem = elem
        self.shape = shape
        self.tensor = tensor
        self.array = array


class Out:
    """A rule's result for one output. `at_least`: the shape is a lower
    bound (some input shape was unknown); `flag`: whether this output is
    made at run time (False for a Constant's stored dense tensor)."""

    __slots__ = ("elem", "shape", "array", "at_least", "flag", "what")

    def __init__(
        self, elem: int | None, shape: Dims | None, array: Array | None = None, *, at_least: bool = False, flag: bool = True, what: str = ""
    ) -> None:
        self.elem = elem
        self.shape = shape
        self.array = array
        self.at_least = at_least
        self.flag = flag
        self.what = what


class Folder:
    """The values read and kept so far, under the model's one budget, and the
    default-domain opset of the walk under way (the model's or a function's)."""

    def __init__(self, opset: int) -> None:
        self.opset = opset
        self.budget = MAX_FOLDED_TOTAL
        self.read: dict[int, tuple[Tensor, Array]] = {}  # id(tensor) -> its values, each initializer read once

    def values(self, info: Info | None) -> Array | None:
        """The values of a small numeric value, or None."""
        if info is None:
            return None
        if info.array is not None:
            return info.array
        tensor = info.tensor
        if tensor is None:
            return None
        cached = self.read.get(id(tensor))
        if cached is not None:
            return cached[1]
        count = tensor.element_count
        if count > MAX_READ_ELEMENTS or count > self.budget or not has_native_numpy_dtype(tensor.data_type):
            return None
        try:
            values = tensor.to_numpy()
        except (ModelImportError, ValueError, TypeError):
            return None
        self.budget -= count
        self.read[id(tensor)] = (tensor, values)  # the tensor kept with it: its id stays its own
        return values

    def keep(self, array: Array | None, static: tuple[int, ...]) -> Array | None:
        """`array` as the kept values of a value of shape `static`, charged to the budget; None when it does not fit."""
        if array is None or array.shape != static or array.size > MAX_FOLDED_ELEMENTS or array.size > self.budget:
            return None
        self.budget -= array.size
        return array

    def ints(self, info: Info | None) -> list[int] | None:
        values = self.values(info)
        if values is None or values.dtype.kind not in "iub":
            return None
        return [int(value) for value in values.reshape(-1)]

    def floats(self, info: Info | None) -> list[float] | None:
        values = self.values(info)
        if values is None or values.dtype.kind not in "f":
            return None
        return [float(value) for value in values.reshape(-1)]

    def scalar(self, info: Info | None) -> float | int | None:
        values = self.values(info)
        if values is None or values.size != 1 or values.dtype.kind not in "iubf":
            return None
        item = values.reshape(-1)[0]
        return int(item) if values.dtype.kind in "iub" else float(item)


# --- shapes


def static_shape(shape: Dims | None) -> tuple[int, ...] | None:
    """`shape` when every dimension is known, else None."""
    if shape is None or None in shape:
        return None
    return cast(tuple[int, ...], shape)


def largest_input(inputs: list[Info | None]) -> int:
    """The element count of the largest input whose shape is static (0: none is)."""
    return max((math.prod(known) for info in inputs if info is not None and (known := static_shape(info.shape)) is not None), default=0)


def declared_info(type_proto: TypeProto | None) -> Info | None:
    """What a declared type says of a value (None: not a dense tensor)."""
    if type(type_proto) is not TensorType or type_proto.sparse:
        return None
    shape = None if type_proto.shape is None else tuple(d if isinstance(d, int) and d >= 0 else None for d in type_proto.shape)
    return Info(type_proto.elem_type or None, shape)


def broadcast(shapes: Sequence[Dims | None], *, lower_bound: bool = False) -> Dims | None:
    """The multidirectional broadcast of `shapes`: None when a rank is unknown
    (unless `lower_bound`, where it counts as no dimensions), a dimension None
    when it cannot be told."""
    if not lower_bound and any(shape is None for shape in shapes):
        return None
    known = [shape for shape in shapes if shape is not None]
    rank = max((len(shape) for shape in known), default=0)
    result: list[int | None] = []
    for position in range(rank):
        dims = [shape[len(shape) - rank + position] for shape in known if len(shape) - rank + position >= 0]
        fixed = {dim for dim in dims if dim is not None and dim != 1}
        if len(fixed) > 1:
            return None  # a conflict: the run fails before it allocates
        if fixed:
            result.append(fixed.pop())
        elif all(dim == 1 for dim in dims) and (not lower_bound or len(dims) == len(shapes)):
            result.append(1)
        else:
            result.append(None)
    return tuple(result)


def expand_out(elem: int | None, shape: Dims | None, data_shape: Dims | None) -> Out:
    """An Expand's output: exact when the data's shape is static, else with
    unknown dimensions taken as 1."""
    if shape is None:
        return Out(elem, None)
    exact = data_shape is not None and static_shape(data_shape) is not None
    return Out(elem, tuple(dim if dim is not None else 1 for dim in shape), at_least=not exact)


# --- small arrays


_FOLDABLE: Final = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum, "Min": np.minimum}
FOLDABLE_OPS: Final = frozenset({*_FOLDABLE, "Div"})


def cast_values(values: Array | None, to: int | None) -> Array | None:
    """Small numeric values cast as Cast does (floats to integers truncated), or None."""
    if values is None or to is None or values.dtype.kind not in "iubf":
        return None
    try:
        target = DataType(to)
    except ValueError:
        return None
    if not has_native_numpy_dtype(target) or target in (DataType.COMPLEX64, DataType.COMPLEX128):
        return None
    dtype = numpy_dtype_for(target)
    with np.errstate(all="ignore"):
        if values.dtype.kind == "f" and dtype.kind in "iu":
            if not np.isfinite(values).all() or (np.abs(values) >= 2.0**63).any():
                return None
            values = np.trunc(values)
        return values.astype(dtype)


def reshaped(values: Array | None, shape: tuple[int, ...] | None) -> Array | None:
    if values is None or shape is None or values.size != math.prod(shape):
        return None
    return values.reshape(shape)


def fits(shape: tuple[int, ...], axis: int, first: tuple[int, ...]) -> bool:
    """Whether `shape` may be concatenated along `axis` to one like `first`."""
    return all(dim == other for position, (dim, other) in enumerate(zip(shape, first, strict=True)) if position != axis)


def within(positions: Array, extent: int) -> bool:
    return positions.size == 0 or (int(positions.min()) >= -extent and int(positions.max()) < extent)


def fold_int(op: str, left: Array, right: Array) -> Array | None:
    """`op` (one of FOLDABLE_OPS) over two small integer arrays, wrapping as the runtime's int64 does (None: not foldable)."""
    try:
        with np.errstate(all="ignore"):
            if op == "Div":
                if (right == 0).any():
                    return None
                quotient = np.abs(left) // np.abs(right)
                return np.where((left < 0) ^ (right < 0), -quotient, quotient).astype(left.dtype)
            result: Array = _FOLDABLE[op](left, right)
            return result
    except ValueError:  # shapes that do not broadcast
        return None


# --- attributes


def find_attribute(node: Node, name: str) -> Attribute | None:
    for item in node.attribute:
        if item.name == name and not item.ref_attr_name:
            return item
    return None


def int_attr(node: Node, name: str, default: int) -> int:
    found = find_attribute(node, name)
    return found.value if found is not None and found.type is AttributeType.INT and isinstance(found.value, int) else default


def ints_attr(node: Node, name: str) -> list[int] | None:
    found = find_attribute(node, name)
    if found is None or found.type is not AttributeType.INTS or not isinstance(found.value, list):
        return None
    return [int(item) for item in found.value]


def floats_attr(node: Node, name: str) -> list[float] | None:
    found = find_attribute(node, name)
    if found is None or found.type is not AttributeType.FLOATS:
        return None
    return found.float_values


def string_attr(node: Node, name: str, default: str) -> str:
    found = find_attribute(node, name)
    if found is None or found.type is not AttributeType.STRING or not isinstance(found.value, bytes):
        return default
    return found.value.decode("utf-8", "replace")
