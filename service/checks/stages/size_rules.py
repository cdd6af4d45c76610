"""The size rules: what each operator's output is, from what is known of its inputs.

Owns `RULES`, one function per default-domain op (`(folder, node, inputs)`
-> what is known of each output, `[]` when nothing is), and `SAME_SHAPE`,
the ops whose first output has their first input's shape. The amplifiers a
bound is about (`ConstantOfShape`, `Range`, `Expand`, `Tile`, `Pad`,
`Resize`/`Upsample`, `OneHot`, `RandomNormal`/`RandomUniform`, `Reshape`,
broadcasting element-wise ops, `MatMul`/`Gemm`) and the shape arithmetic of
exporters that feeds them (`Shape`, `Gather`, `Slice`, `Concat`,
`Unsqueeze`, `Squeeze`, `Cast`, `Add`/`Sub`/`Mul`/`Div`, ...), whose small
values are folded through `service.checks.stages.size_values.Folder`.
A `Loop`'s scan outputs need its body's values: the walk
(`service.checks.stages.static_size`) owns that rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Final

import numpy as np

from importer.element_types import DataType
from importer.messages import Node
from importer.tensor import SparseTensor, Tensor
from service.checks.stages.size_values import (
    BOOL,
    FLOAT,
    FOLDABLE_OPS,
    INT64,
    MAX_FOLDED_ELEMENTS,
    Folder,
    Info,
    Out,
    broadcast,
    cast_values,
    expand_out,
    find_attribute,
    fits,
    floats_attr,
    fold_int,
    int_attr,
    ints_attr,
    reshaped,
    static_shape,
    string_attr,
    within,
)

Rule = Callable[[Folder, Node, list[Info | None]], list[Out | None]]

# Ops whose output has the broadcast shape of their inputs.
_BROADCAST: Final = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "Where", "Max", "Min", "Sum", "Mean", "BitShift", "PRelu", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
})  # fmt: skip
BOOL_RESULT: Final = frozenset({"And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "IsNaN", "IsInf"})
# Ops whose output 0 has the shape and type of input 0 (bool for BOOL_RESULT's).
SAME_SHAPE: Final = frozenset({
    "Identity", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Not", "Floor", "Ceil", "Round", "Sign",
    "Erf", "Reciprocal", "LeakyRelu", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Clip", "IsNaN", "IsInf", "Dropout",
    "HardSigmoid", "HardSwish", "Gelu", "Mish", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
    "Acosh", "Atanh", "Softmax", "LogSoftmax", "Hardmax", "BitwiseNot", "ThresholdedRelu", "Shrink", "CumSum",
    "LayerNormalization", "BatchNormalization", "InstanceNormalization", "LpNormalization", "MeanVarianceNormalization",
})  # fmt: skip


def _same_shape(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    first = inputs[0] if inputs else None
    if first is None:
        return []
    op = node.op_type
    elem = BOOL if op in BOOL_RESULT else first.elem
    array = folder.values(first) if op == "Identity" else None
    return [Out(elem, first.shape, array)]


def _densified(sparse: SparseTensor) -> Out:
    """A sparse tensor's dense form, which runtimes make."""
    return Out(int(sparse.values.data_type), tuple(sparse.dims), what="densified from a sparse tensor")


def _broadcasting(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    known = [info for info in inputs if info is not None]
    if len(known) != len(inputs) or not known:
        return [None]
    shapes = [info.shape for info in known]
    shape = broadcast(shapes)
    op = node.op_type
    elem = BOOL if op in BOOL_RESULT else known[1].elem if op == "Where" and len(known) > 1 else known[0].elem
    array = None
    if shape is not None and static_shape(shape) is not None and len(known) == 2 and op in FOLDABLE_OPS:
        left, right = folder.values(known[0]), folder.values(known[1])
        if left is not None and right is not None and left.dtype == right.dtype and left.dtype.kind in "iu":
            array = fold_int(op, left, right)
    return [Out(elem, shape, array)]


def _cast(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    first = inputs[0] if inputs else None
    to = int_attr(node, "to", 0) or None
    if first is None:
        return [Out(to, None)]
    return [Out(to, first.shape, cast_values(folder.values(first), to))]


def _cast_like(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    first = inputs[0] if inputs else None
    target = inputs[1] if len(inputs) > 1 else None
    return [Out(target.elem if target is not None else None, first.shape if first is not None else None)]


def _constant(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    for attribute in node.attribute:
        value = attribute.value
        if attribute.ref_attr_name:
            continue
        if attribute.name == "value" and isinstance(value, Tensor):
            array = folder.values(Info(int(value.data_type), tuple(value.dims), value))
            return [Out(int(value.data_type), tuple(value.dims), array, flag=False)]
        if attribute.name == "sparse_value" and isinstance(value, SparseTensor):
            return [_densified(value)]
        if attribute.name == "value_int" and isinstance(value, int):
            return [Out(INT64, (), np.array(value, dtype=np.int64), flag=False)]
        if attribute.name == "value_ints" and isinstance(value, list):
            return [Out(INT64, (len(value),), np.array(value, dtype=np.int64), flag=False)]
        if attribute.name == "value_float":
            return [Out(FLOAT, (), flag=False)]
        if attribute.name == "value_floats" and isinstance(value, list):
            return [Out(FLOAT, (len(value),), flag=False)]
        if attribute.name == "value_string":
            return [Out(int(DataType.STRING), (), flag=False)]
        if attribute.name == "value_strings" and isinstance(value, list):
            return [Out(int(DataType.STRING), (len(value),), flag=False)]
    return []


def _constant_of_shape(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    elem = FLOAT
    attribute = find_attribute(node, "value")
    if attribute is not None and isinstance(attribute.value, Tensor):
        elem = int(attribute.value.data_type)
    dims = folder.ints(inputs[0] if inputs else None)
    if dims is None or any(dim < 0 for dim in dims):
        return [Out(elem, None)]
    return [Out(elem, tuple(dims))]


def _range(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    if len(inputs) < 3:
        return []
    start, limit, delta = (folder.scalar(info) for info in inputs[:3])
    elem = inputs[0].elem if inputs[0] is not None else None
    if start is None or limit is None or delta is None:
        return [Out(elem, None)]
    if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
        if delta == 0:
            return [Out(elem, None)]
        count = max(-((start - limit) // delta), 0)  # ceil((limit - start) / delta)
        array = np.arange(start, limit, delta, dtype=np.int64) if count <= MAX_FOLDED_ELEMENTS else None
        return [Out(elem, (count,), array)]
    span = (float(limit) - float(start)) / float(delta) if float(delta) != 0.0 else math.nan
    if not math.isfinite(span):
        return [Out(elem, None)]
    return [Out(elem, (max(math.ceil(span), 0),))]


def _expand(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    target = folder.ints(inputs[1] if len(inputs) > 1 else None)
    elem = data.elem if data is not None else None
    if target is None or any(dim < 0 for dim in target):
        return [Out(elem, None)]
    data_shape = data.shape if data is not None else None
    shape = broadcast([data_shape, tuple(target)], lower_bound=True)
    return [expand_out(elem, shape, data_shape)]


def _tile(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    repeats = folder.ints(inputs[1] if len(inputs) > 1 else None)
    elem = data.elem if data is not None else None
    if repeats is None or any(count < 0 for count in repeats):
        return [Out(elem, None)]
    data_shape = data.shape if data is not None and data.shape is not None and len(data.shape) == len(repeats) else None
    dims = data_shape if data_shape is not None else (None,) * len(repeats)
    shape = tuple(count * (dim if dim is not None else 1) for dim, count in zip(dims, repeats, strict=True))
    return [Out(elem, shape, at_least=static_shape(dims) is None)]


def _pad(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    elem = data.elem if data is not None else None
    pads = (ints_attr(node, "pads") or ints_attr(node, "paddings")) if len(inputs) < 2 else folder.ints(inputs[1])
    if pads is None or len(pads) % 2:
        return [Out(elem, None)]
    half = len(pads) // 2
    data_shape = data.shape if data is not None else None
    rank = len(data_shape) if data_shape is not None else half
    if len(inputs) > 3 and inputs[3] is not None:
        axes = folder.ints(inputs[3])
        if axes is None or data_shape is None:
            return [Out(elem, None)]
    else:
        axes = list(range(half))
    if len(axes) != half or rank < half or any(not -rank <= axis < rank for axis in axes):
        return [Out(elem, None)]
    dims: list[int | None] = list(data_shape) if data_shape is not None else [None] * rank
    extra = [0] * rank
    for position, axis in enumerate(axes):
        extra[axis % rank] += pads[position] + pads[position + half]
    shape = tuple(max((dim if dim is not None else 0) + more, 0) for dim, more in zip(dims, extra, strict=True))
    return [Out(elem, shape, at_least=any(dim is None for dim in dims))]


def _resize(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    elem = data.elem if data is not None else None
    scales: list[float] | None = None
    sizes: list[int] | None = None
    if node.op_type == "Upsample" and folder.opset < 9:
        scales = floats_attr(node, "scales")
    elif node.op_type == "Upsample" or folder.opset < 11:  # Upsample-9, Resize-10: (X, scales)
        scales = folder.floats(inputs[1]) if len(inputs) > 1 else None
    else:
        if len(inputs) > 3 and inputs[3] is not None:
            sizes = folder.ints(inputs[3])
        if sizes is None and len(inputs) > 2 and inputs[2] is not None:
            scales = folder.floats(inputs[2])
    if scales is not None and not scales:
        scales = None
    if sizes is not None and not sizes:
        sizes = None
    data_shape = data.shape if data is not None else None
    count = len(sizes) if sizes is not None else len(scales) if scales is not None else 0
    if not count:
        return [Out(elem, None)]
    axes = ints_attr(node, "axes")
    rank = len(data_shape) if data_shape is not None else None if axes else count
    if rank is None:
        return [Out(elem, None)]
    if axes and any(not -rank <= axis < rank for axis in axes):
        return [Out(elem, None)]
    axes = [axis % rank for axis in axes] if axes else list(range(count))
    if len(axes) != count or count > rank or len(set(axes)) != count:
        return [Out(elem, None)]
    dims: list[int | None] = list(data_shape) if data_shape is not None else [None] * rank
    shape: list[int] = [dim if dim is not None else 1 for dim in dims]
    if sizes is not None:
        if any(size < 0 for size in sizes):
            return [Out(elem, None)]
        policy = string_attr(node, "keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            for axis, size in zip(axes, sizes, strict=True):
                shape[axis] = size
            return [Out(elem, tuple(shape), at_least=any(dims[a] is None for a in range(rank) if a not in axes))]
        known = [(dims[axis], size) for axis, size in zip(axes, sizes, strict=True)]
        if any(dim is None or dim == 0 for dim, _ in known):
            return [Out(elem, None)]
        ratios = [size / dim for dim, size in known if dim]
        scale = min(ratios) if policy == "not_larger" else max(ratios)
        for axis in axes:
            dim = dims[axis]
            assert dim is not None
            shape[axis] = math.floor(dim * scale + 0.5)
        return [Out(elem, tuple(shape), at_least=any(dim is None for dim in dims))]
    assert scales is not None
    if any(not math.isfinite(scale) or scale < 0 for scale in scales):
        return [Out(elem, None)]
    for axis, scale in zip(axes, scales, strict=True):
        shape[axis] = math.floor(shape[axis] * scale)
    return [Out(elem, tuple(shape), at_least=any(dim is None for dim in dims))]


def _one_hot(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    if len(inputs) < 3:
        return []
    indices, values = inputs[0], inputs[2]
    elem = values.elem if values is not None else None
    depth = folder.scalar(inputs[1])
    if depth is None or not math.isfinite(depth) or depth < 0:
        return [Out(elem, None)]
    index_shape = indices.shape if indices is not None else None
    dims = list(index_shape) if index_shape is not None else []
    axis = int_attr(node, "axis", -1)
    rank = len(dims) + 1
    if not -rank <= axis < rank:
        return [Out(elem, None)]
    dims.insert(axis % rank, int(depth))
    shape = tuple(dim if dim is not None else 1 for dim in dims)
    return [Out(elem, shape, at_least=index_shape is None or any(dim is None for dim in index_shape))]


def _random(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    dims = ints_attr(node, "shape")
    elem = int_attr(node, "dtype", FLOAT)
    if dims is None or any(dim < 0 for dim in dims):
        return [Out(elem, None)]
    return [Out(elem, tuple(dims))]


def _reshape(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    elem = data.elem if data is not None else None
    target = folder.ints(inputs[1]) if len(inputs) > 1 else ints_attr(node, "shape")
    if target is None:
        return [Out(elem, None)]
    data_shape = data.shape if data is not None else None
    allow_zero = int_attr(node, "allowzero", 0)
    dims: list[int | None] = []
    for position, dim in enumerate(target):
        if dim == 0 and not allow_zero:
            dims.append(data_shape[position] if data_shape is not None and position < len(data_shape) else None)
        elif dim < -1:
            return [Out(elem, None)]
        else:
            dims.append(None if dim == -1 else dim)
    if target.count(-1) > 1:
        return [Out(elem, None)]
    if -1 in target:
        total = static_shape(data_shape)
        rest = static_shape(tuple(dim for position, dim in enumerate(dims) if target[position] != -1))
        if total is None or rest is None or math.prod(rest) == 0:
            return [Out(elem, tuple(dims))]
        dims[target.index(-1)] = math.prod(total) // math.prod(rest)
    values = folder.values(data)
    shape = tuple(dims)
    static = static_shape(shape)
    array = reshaped(values, static)
    return [Out(elem, shape, array)]


def _shape(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    if data is None or data.shape is None:
        return [Out(INT64, None)]
    rank = len(data.shape)
    start = int_attr(node, "start", 0)
    end = int_attr(node, "end", rank)
    dims = data.shape[slice(*slice(start, end).indices(rank))]
    static = static_shape(dims)
    array = np.array(static, dtype=np.int64) if static is not None else None
    return [Out(INT64, (len(dims),), array)]


def _size(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    static = static_shape(data.shape) if data is not None else None
    return [Out(INT64, (), np.array(math.prod(static), dtype=np.int64) if static is not None and math.prod(static) < 1 << 63 else None)]


def _concat(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    if not inputs or any(info is None or info.shape is None for info in inputs):
        return [Out(inputs[0].elem if inputs and inputs[0] is not None else None, None)]
    shapes = [info.shape for info in inputs if info is not None and info.shape is not None]
    rank = len(shapes[0])
    axis = int_attr(node, "axis", 0)
    if rank == 0 or any(len(shape) != rank for shape in shapes) or not -rank <= axis < rank:
        return []
    axis %= rank
    dims = list(shapes[0])
    along = [shape[axis] for shape in shapes]
    dims[axis] = sum(dim for dim in along if dim is not None) if None not in along else None
    for position in range(rank):
        if position != axis and dims[position] is None:
            dims[position] = next((shape[position] for shape in shapes if shape[position] is not None), None)
    elem = inputs[0].elem if inputs[0] is not None else None
    parts = [folder.values(info) for info in inputs]
    array = None
    arrays = [part for part in parts if part is not None and part.ndim == rank]
    if (
        len(arrays) == len(parts)
        and len({part.dtype for part in arrays}) == 1
        and all(fits(part.shape, axis, arrays[0].shape) for part in arrays)
    ):
        array = np.concatenate(arrays, axis=axis)
    return [Out(elem, tuple(dims), array)]


def _unsqueeze(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    elem = data.elem if data is not None else None
    axes = folder.ints(inputs[1]) if len(inputs) > 1 else ints_attr(node, "axes")
    if data is None or data.shape is None or axes is None:
        return [Out(elem, None)]
    rank = len(data.shape) + len(axes)
    if any(not -rank <= axis < rank for axis in axes) or len({axis % rank for axis in axes}) != len(axes):
        return []
    wanted = {axis % rank for axis in axes}
    rest = iter(data.shape)
    shape = tuple(1 if position in wanted else next(rest) for position in range(rank))
    values = folder.values(data)
    static = static_shape(shape)
    return [Out(elem, shape, reshaped(values, static))]


def _squeeze(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    elem = data.elem if data is not None else None
    axes = folder.ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else ints_attr(node, "axes")
    if data is None or data.shape is None:
        return [Out(elem, None)]
    rank = len(data.shape)
    if axes is None:
        if static_shape(data.shape) is None:
            return [Out(elem, None)]
        shape = tuple(dim for dim in data.shape if dim != 1)
    else:
        if any(not -rank <= axis < rank for axis in axes):
            return []
        wanted = {axis % rank for axis in axes}
        shape = tuple(dim for position, dim in enumerate(data.shape) if position not in wanted)
    values = folder.values(data)
    static = static_shape(shape)
    return [Out(elem, shape, reshaped(values, static))]


def _gather(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    if len(inputs) < 2:
        return []
    data, indices = inputs[0], inputs[1]
    elem = data.elem if data is not None else None
    if data is None or data.shape is None or indices is None or indices.shape is None:
        return [Out(elem, None)]
    rank = len(data.shape)
    axis = int_attr(node, "axis", 0)
    if not -rank <= axis < rank:
        return []
    axis %= rank
    shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :])
    array = None
    values, positions = folder.values(data), folder.values(indices)
    extent = data.shape[axis]
    if values is not None and positions is not None and positions.dtype.kind in "iu" and extent is not None and within(positions, extent):
        array = np.take(values, positions.astype(np.int64), axis=axis)
    return [Out(elem, shape, array)]


def _slice(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    elem = data.elem if data is not None else None
    if data is None or data.shape is None:
        return [Out(elem, None)]
    if len(inputs) == 1:  # Slice-1: attributes
        starts, ends, axes, steps = ints_attr(node, "starts"), ints_attr(node, "ends"), ints_attr(node, "axes"), None
    else:
        starts = folder.ints(inputs[1]) if len(inputs) > 1 else None
        ends = folder.ints(inputs[2]) if len(inputs) > 2 else None
        axes = folder.ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else None
        steps = folder.ints(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else None
        if (len(inputs) > 3 and inputs[3] is not None and axes is None) or (len(inputs) > 4 and inputs[4] is not None and steps is None):
            return [Out(elem, None)]
    rank = len(data.shape)
    if starts is None or ends is None or len(starts) != len(ends):
        return [Out(elem, None)]
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps if steps is not None else [1] * len(starts)
    if len(axes) != len(starts) or len(steps) != len(starts) or any(step == 0 for step in steps):
        return []
    if any(not -rank <= axis < rank for axis in axes):
        return []
    dims = list(data.shape)
    cuts: list[slice] = [slice(None)] * rank
    for start, end, axis, step in zip(starts, ends, axes, steps, strict=True):
        position = axis % rank
        dim = dims[position]
        cut = slice(start, end, step)
        cuts[position] = cut
        dims[position] = len(range(*cut.indices(dim))) if dim is not None else None
    values = folder.values(data)
    array = values[tuple(cuts)] if values is not None and values.shape == static_shape(data.shape) else None
    return [Out(elem, tuple(dims), array)]


def _flatten(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    elem = data.elem if data is not None else None
    if data is None or data.shape is None:
        return [Out(elem, None)]
    rank = len(data.shape)
    axis = int_attr(node, "axis", 1)
    if not -rank <= axis <= rank:
        return []
    axis = axis % rank if axis < 0 else axis
    left, right = static_shape(data.shape[:axis]), static_shape(data.shape[axis:])
    return [Out(elem, (math.prod(left) if left is not None else None, math.prod(right) if right is not None else None))]


def _transpose(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    elem = data.elem if data is not None else None
    if data is None or data.shape is None:
        return [Out(elem, None)]
    rank = len(data.shape)
    perm = ints_attr(node, "perm") or list(reversed(range(rank)))
    if sorted(perm) != list(range(rank)):
        return []
    return [Out(elem, tuple(data.shape[axis] for axis in perm))]


def _matmul(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    if len(inputs) < 2 or inputs[0] is None or inputs[1] is None:
        return []
    left, right = inputs[0].shape, inputs[1].shape
    elem = inputs[0].elem
    if left is None or right is None or not left or not right:
        return [Out(elem, None)]
    a = (1, *left) if len(left) == 1 else left
    b = (*right, 1) if len(right) == 1 else right
    batch = broadcast([a[:-2], b[:-2]])
    if batch is None:
        return [Out(elem, None)]
    dims = (*batch, *(() if len(left) == 1 else (a[-2],)), *(() if len(right) == 1 else (b[-1],)))
    return [Out(elem, dims)]


def _gemm(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    if len(inputs) < 2 or inputs[0] is None or inputs[1] is None:
        return []
    left, right = inputs[0].shape, inputs[1].shape
    elem = inputs[0].elem
    if left is None or right is None or len(left) != 2 or len(right) != 2:
        return [Out(elem, None)]
    rows = left[1] if int_attr(node, "transA", 0) else left[0]
    columns = right[0] if int_attr(node, "transB", 0) else right[1]
    return [Out(elem, (rows, columns))]


def _eye_like(folder: Folder, node: Node, inputs: list[Info | None]) -> list[Out | None]:
    data = inputs[0] if inputs else None
    elem = int_attr(node, "dtype", 0) or (data.elem if data is not None else None)
    return [Out(elem, data.shape if data is not None else None)]


RULES: Final[dict[str, Rule]] = {
    **dict.fromkeys(SAME_SHAPE, _same_shape),
    **dict.fromkeys(_BROADCAST, _broadcasting),
    "Cast": _cast,
    "CastLike": _cast_like,
    "Constant": _constant,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Expand": _expand,
    "Tile": _tile,
    "Pad": _pad,
    "Resize": _resize,
    "Upsample": _resize,
    "OneHot": _one_hot,
    "RandomNormal": _random,
    "RandomUniform": _random,
    "Reshape": _reshape,
    "Shape": _shape,
    "Size": _size,
    "Concat": _concat,
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Gather": _gather,
    "Slice": _slice,
    "Flatten": _flatten,
    "Transpose": _transpose,
    "MatMul": _matmul,
    "Gemm": _gemm,
    "EyeLike": _eye_like,
}
