"""Output sizes that constants fix, estimated before anything runs.

Owns `estimate_static_outputs(model, max_bytes)`: every node output (in the
main graph, its subgraphs and the model-local functions' bodies) whose
element count the model's constants and static shapes fix, and which holds
more than `max_bytes` while its node makes more elements than it reads: the
amplifiers of a small file into a large allocation (`ConstantOfShape`,
`Range`, `Expand`, `Tile`, `Resize`/`Upsample`, `Pad`, `OneHot`,
`RandomNormal`/`RandomUniform`, `Reshape` to a constant shape, broadcasting
element-wise ops and `MatMul`/`Gemm` on static shapes, a `Loop`'s scan
outputs over a constant trip count), and sparse tensors (a sparse
initializer, a `Constant`'s `sparse_value`) whose dense form is that large,
since runtimes densify them.

How: one walk in resolved order (function bodies in file order), keeping
per value its element type, its shape where known (from the op's rule, else
its declared type) and, for small numeric tensors only, its values (the
constant-folded shape arithmetic of exporters: `Shape`, `Gather`, `Slice`,
`Concat`, `Unsqueeze`, `Squeeze`, `Cast`, `Add`/`Sub`/`Mul`/`Div`, ...).
Sizes are Python ints; nothing the model asks for is ever allocated: values
are read from initializers only up to `MAX_READ_ELEMENTS`, kept only up to
`MAX_FOLDED_ELEMENTS` each and `MAX_FOLDED_TOTAL` in all. Where an input's
shape is unknown, the estimate is a lower bound (unknown dimensions taken as
1, or 0 for `Pad`), reported as "at least".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, cast

import numpy as np
import numpy.typing as npt

from importer.attribute_types import AttributeType
from importer.element_types import DataType, bits_per_element, has_native_numpy_dtype, numpy_dtype_for
from importer.errors import ModelImportError
from importer.graph import OnnxModel, ResolvedGraph
from importer.messages import Attribute, Graph, Node, TensorType, TypeProto
from importer.resolve import normalize_domain
from importer.tensor import SparseTensor, Tensor

MAX_READ_ELEMENTS: Final = 1 << 12  # a tensor's values are read only when it has at most this many
MAX_FOLDED_ELEMENTS: Final = 1 << 12  # a computed value is kept only when it has at most this many
MAX_FOLDED_TOTAL: Final = 1 << 20  # elements read or kept across the whole model (8 MB of int64 at most)

Array = npt.NDArray[Any]
Dims = tuple[int | None, ...]  # None: an unknown dimension

_FLOAT: Final = int(DataType.FLOAT)
_INT64: Final = int(DataType.INT64)
_BOOL: Final = int(DataType.BOOL)

# Ops whose output has the broadcast shape of their inputs.
_BROADCAST: Final = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual",
    "GreaterOrEqual", "Where", "Max", "Min", "Sum", "Mean", "BitShift", "PRelu", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
})  # fmt: skip
_BOOL_RESULT: Final = frozenset({"And", "Or", "Xor", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "IsNaN", "IsInf"})
# Ops whose output 0 has the shape and type of input 0.
_SAME_SHAPE: Final = frozenset({
    "Identity", "Neg", "Abs", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Not", "Floor", "Ceil", "Round", "Sign",
    "Erf", "Reciprocal", "LeakyRelu", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Clip", "IsNaN", "IsInf", "Dropout",
    "HardSigmoid", "HardSwish", "Gelu", "Mish", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh",
    "Acosh", "Atanh", "Softmax", "LogSoftmax", "Hardmax", "BitwiseNot", "ThresholdedRelu", "Shrink", "CumSum",
    "LayerNormalization", "BatchNormalization", "InstanceNormalization", "LpNormalization", "MeanVarianceNormalization",
})  # fmt: skip
_FOLDABLE: Final = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum, "Min": np.minimum,
}  # fmt: skip


class _Info:
    """What is known of one value: element type, shape (None: unknown rank),
    and its values: an initializer's tensor (read on demand) or a small array."""

    __slots__ = ("elem", "shape", "tensor", "array")

    def __init__(self, elem: int | None, shape: Dims | None, tensor: Tensor | None = None, array: Array | None = None) -> None:
        self.elem = elem
        self.shape = shape
        self.tensor = tensor
        self.array = array


class _Out:
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


@dataclass(frozen=True, slots=True)
class Oversized:
    """One output (or sparse tensor) past the bound, with its place.
    `node` is None for a sparse initializer; `output` is the output's name
    (the tensor's for a sparse initializer)."""

    field_path: str
    offset: int
    node: Node | None
    output: str
    op: str
    elem: int | None
    elements: int
    bytes: int
    at_least: bool
    what: str  # how it comes about, for the message ("densified from a sparse tensor"); may be ""


def byte_size(elements: int, elem: int | None) -> int:
    """Bytes of `elements` elements of type `elem` (1 per element when the
    type is unknown or has no fixed width: a lower bound)."""
    bits = _bits(elem)
    return (elements * bits + 7) // 8 if bits else elements


_BITS: Final = {int(data_type): bits_per_element(data_type) for data_type in DataType}


def _bits(elem: int | None) -> int:
    return _BITS.get(elem, 0) if elem is not None else 0


def _product(dims: Sequence[int]) -> int:
    return math.prod(dims)


def _static(shape: Dims | None) -> tuple[int, ...] | None:
    if shape is None or None in shape:
        return None
    return cast(tuple[int, ...], shape)


def _largest(inputs: list[_Info | None]) -> int:
    """The element count of the largest input whose shape is static (0: none is)."""
    return max((_product(static) for info in inputs if info is not None and (static := _static(info.shape)) is not None), default=0)


def _declared(type_proto: TypeProto | None) -> _Info | None:
    if type(type_proto) is not TensorType or type_proto.sparse:
        return None
    shape = None if type_proto.shape is None else tuple(d if isinstance(d, int) and d >= 0 else None for d in type_proto.shape)
    return _Info(type_proto.elem_type or None, shape)


class _Scope:
    """The values of one graph, and the enclosing graph's (names in a
    subgraph may be outer values)."""

    __slots__ = ("infos", "declared", "parent")

    def __init__(self, declared: dict[str, TypeProto | None], parent: _Scope | None) -> None:
        self.infos: dict[str, _Info] = {}
        self.declared = declared
        self.parent = parent

    def lookup(self, name: str) -> _Info | None:
        scope: _Scope | None = self
        while scope is not None:
            info = scope.infos.get(name)
            if info is not None:
                return info
            if name in scope.declared:
                return _declared(scope.declared[name])
            scope = scope.parent
        return None


def _attribute(node: Node, name: str) -> Attribute | None:
    for attribute in node.attribute:
        if attribute.name == name and not attribute.ref_attr_name:
            return attribute
    return None


def _int_attr(node: Node, name: str, default: int) -> int:
    attribute = _attribute(node, name)
    return (
        attribute.value if attribute is not None and attribute.type is AttributeType.INT and isinstance(attribute.value, int) else default
    )


def _ints_attr(node: Node, name: str) -> list[int] | None:
    attribute = _attribute(node, name)
    if attribute is None or attribute.type is not AttributeType.INTS or not isinstance(attribute.value, list):
        return None
    return [int(item) for item in attribute.value]


def _floats_attr(node: Node, name: str) -> list[float] | None:
    attribute = _attribute(node, name)
    if attribute is None or attribute.type is not AttributeType.FLOATS:
        return None
    return attribute.float_values


def _string_attr(node: Node, name: str, default: str) -> str:
    attribute = _attribute(node, name)
    if attribute is None or attribute.type is not AttributeType.STRING or not isinstance(attribute.value, bytes):
        return default
    return attribute.value.decode("utf-8", "replace")


class Estimator:
    """One model's walk. `found` lists the outputs past `max_bytes`."""

    def __init__(self, model: OnnxModel, max_bytes: int) -> None:
        self.model = model
        self.max_bytes = max_bytes
        self.found: list[Oversized] = []
        self.budget = MAX_FOLDED_TOTAL
        self.read: dict[int, tuple[Tensor, Array]] = {}  # id(tensor) -> its values, each initializer read once
        self.opset = model.opsets.get("", 1)  # of the walk under way: the model's, or a function's
        self.resolved: dict[str, ResolvedGraph] = {model.graph.path: model.graph}
        for subgraph in model.graph.subgraphs():
            self.resolved[subgraph.path] = subgraph
        self.functions = {(normalize_domain(f.domain), f.name, f.overload) for f in model.functions}

    def run(self) -> list[Oversized]:
        main = self.model.graph
        self._graph(main.proto, main.path, None)
        for index, function in enumerate(self.model.functions):
            self.opset = next((entry.version for entry in function.opset_import if normalize_domain(entry.domain) == ""), self.opset)
            scope = _Scope({name: None for name in function.input}, None)
            self._nodes(function.node, range(len(function.node)), f"ModelProto.functions[{index}]", scope)
        self.found.sort(key=lambda item: item.offset)
        return self.found

    # --- graphs

    def _graph(self, proto: Graph, path: str, parent: _Scope | None) -> _Scope:
        declared: dict[str, TypeProto | None] = {}
        for info in (*proto.value_info, *proto.output, *proto.input):  # inputs last: their declaration wins
            declared[info.name] = info.type
        scope = _Scope(declared, parent)
        for tensor in proto.initializer:  # an input's default too: a run that does not feed the input uses it
            scope.infos[tensor.name] = _Info(int(tensor.data_type), tuple(tensor.dims), tensor)
        for index, sparse in enumerate(proto.sparse_initializer):
            self._sparse(sparse, f"{path}.sparse_initializer[{index}]", None, sparse.offset)
            scope.infos[sparse.name] = _Info(int(sparse.values.data_type), tuple(sparse.dims))
        resolved = self.resolved.get(path)
        order = [node.index for node in resolved.nodes] if resolved is not None and resolved.proto is proto else range(len(proto.node))
        self._nodes(proto.node, order, path, scope)
        return scope

    def _nodes(self, nodes: Sequence[Node], order: Sequence[int], path: str, scope: _Scope) -> None:
        no_bodies: dict[str, _Scope] = {}
        for index in order:
            node = nodes[index]
            bodies = {} if node.attribute else no_bodies
            for a_index, attribute in enumerate(node.attribute):
                node_path = f"{path}.node[{index}]"
                if attribute.type is AttributeType.GRAPH and isinstance(attribute.value, Graph):
                    bodies[attribute.name] = self._graph(attribute.value, f"{node_path}.attribute[{a_index}].g", scope)
                elif attribute.type is AttributeType.GRAPHS and isinstance(attribute.value, list):
                    for g_index, item in enumerate(attribute.value):
                        if isinstance(item, Graph):
                            self._graph(item, f"{node_path}.attribute[{a_index}].graphs[{g_index}]", scope)
            self._node(node, path, index, scope, bodies)

    def _node(self, node: Node, path: str, index: int, scope: _Scope, bodies: dict[str, _Scope]) -> None:
        inputs = [scope.lookup(name) if name else None for name in node.input]
        domain = node.domain
        outs: list[_Out | None] = []
        if self.functions and (normalize_domain(domain), node.op_type, node.overload) in self.functions:
            pass  # a call of a model-local function: its body is walked on its own
        elif domain == "" or domain == "ai.onnx":
            outs = self._rule(node, inputs, bodies)
        for position, name in enumerate(node.output):
            out = outs[position] if position < len(outs) else None
            if not name:
                continue
            if out is None or out.shape is None:
                fallback = scope.lookup(name)  # its declared type, when there is one
                if fallback is not None:
                    scope.infos[name] = fallback if out is None or out.elem is None else _Info(out.elem, fallback.shape)
                elif out is not None:
                    scope.infos[name] = _Info(out.elem, None)
                continue
            static = _static(out.shape)
            if static is None:
                scope.infos[name] = _Info(out.elem, out.shape)
                continue
            elements = _product(static)
            size = byte_size(elements, out.elem) if elements * 16 > self.max_bytes else 0  # no element is wider than 16 bytes
            if out.flag and size > self.max_bytes and elements > _largest(inputs):  # made here, not passed on
                self.found.append(
                    Oversized(
                        f"{path}.node[{index}]", node.offset, node, name, node.op_type, out.elem, elements, size, out.at_least, out.what
                    )
                )
            if out.at_least:
                scope.infos[name] = _Info(out.elem, None)  # a lower bound is not the shape
                continue
            array = out.array
            if array is not None and (array.shape != static or array.size > MAX_FOLDED_ELEMENTS or array.size > self.budget):
                array = None
            if array is not None:
                self.budget -= array.size
            scope.infos[name] = _Info(out.elem, static, array=array)

    def _sparse(self, sparse: SparseTensor, field_path: str, node: Node | None, offset: int) -> _Out:
        elem = int(sparse.values.data_type)
        dims = tuple(sparse.dims)
        elements = _product(dims) if all(dim >= 0 for dim in dims) else 0
        size = byte_size(elements, elem)
        if node is None and size > self.max_bytes:
            self.found.append(Oversized(field_path, offset, None, sparse.name, "sparse initializer", elem, elements, size, False, ""))
        return _Out(elem, dims, what="densified from a sparse tensor")

    # --- values

    def _values(self, info: _Info | None) -> Array | None:
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

    def _ints(self, info: _Info | None) -> list[int] | None:
        values = self._values(info)
        if values is None or values.dtype.kind not in "iub":
            return None
        return [int(value) for value in values.reshape(-1)]

    def _scalar(self, info: _Info | None) -> float | int | None:
        values = self._values(info)
        if values is None or values.size != 1 or values.dtype.kind not in "iubf":
            return None
        item = values.reshape(-1)[0]
        return int(item) if values.dtype.kind in "iub" else float(item)

    # --- the rules: each gives what it knows of the node's outputs

    def _rule(self, node: Node, inputs: list[_Info | None], bodies: dict[str, _Scope]) -> list[_Out | None]:
        op = node.op_type
        first = inputs[0] if inputs else None
        if op in _SAME_SHAPE:
            if first is None:
                return []
            elem = _BOOL if op in _BOOL_RESULT else first.elem
            array = self._values(first) if op == "Identity" else None
            return [_Out(elem, first.shape, array)]
        if op in _BROADCAST:
            return [self._broadcast_op(node, inputs)]
        if op == "Loop":
            return self._loop(node, inputs, bodies)
        rule = _RULES.get(op)
        return rule(self, node, inputs) if rule is not None else []

    def _broadcast_op(self, node: Node, inputs: list[_Info | None]) -> _Out | None:
        known = [info for info in inputs if info is not None]
        if len(known) != len(inputs) or not known:
            return None
        shapes = [info.shape for info in known]
        shape = _broadcast(shapes)
        op = node.op_type
        elem = _BOOL if op in _BOOL_RESULT else known[1].elem if op == "Where" and len(known) > 1 else known[0].elem
        array = None
        if shape is not None and _static(shape) is not None and len(known) == 2 and op in (*_FOLDABLE, "Div"):
            left, right = self._values(known[0]), self._values(known[1])
            if left is not None and right is not None and left.dtype == right.dtype and left.dtype.kind in "iu":
                array = _fold_int(op, left, right)
        return _Out(elem, shape, array)

    def _cast(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        first = inputs[0] if inputs else None
        to = _int_attr(node, "to", 0) or None
        if first is None:
            return [_Out(to, None)]
        return [_Out(to, first.shape, _cast_values(self._values(first), to))]

    def _cast_like(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        first = inputs[0] if inputs else None
        target = inputs[1] if len(inputs) > 1 else None
        return [_Out(target.elem if target is not None else None, first.shape if first is not None else None)]

    def _constant(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        for attribute in node.attribute:
            value = attribute.value
            if attribute.ref_attr_name:
                continue
            if attribute.name == "value" and isinstance(value, Tensor):
                array = self._values(_Info(int(value.data_type), tuple(value.dims), value))
                return [_Out(int(value.data_type), tuple(value.dims), array, flag=False)]
            if attribute.name == "sparse_value" and isinstance(value, SparseTensor):
                return [self._sparse(value, "", node, node.offset)]
            if attribute.name == "value_int" and isinstance(value, int):
                return [_Out(_INT64, (), np.array(value, dtype=np.int64), flag=False)]
            if attribute.name == "value_ints" and isinstance(value, list):
                return [_Out(_INT64, (len(value),), np.array(value, dtype=np.int64), flag=False)]
            if attribute.name == "value_float":
                return [_Out(_FLOAT, (), flag=False)]
            if attribute.name == "value_floats" and isinstance(value, list):
                return [_Out(_FLOAT, (len(value),), flag=False)]
            if attribute.name == "value_string":
                return [_Out(int(DataType.STRING), (), flag=False)]
            if attribute.name == "value_strings" and isinstance(value, list):
                return [_Out(int(DataType.STRING), (len(value),), flag=False)]
        return []

    def _constant_of_shape(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        elem = _FLOAT
        attribute = _attribute(node, "value")
        if attribute is not None and isinstance(attribute.value, Tensor):
            elem = int(attribute.value.data_type)
        dims = self._ints(inputs[0] if inputs else None)
        if dims is None or any(dim < 0 for dim in dims):
            return [_Out(elem, None)]
        return [_Out(elem, tuple(dims))]

    def _range(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        if len(inputs) < 3:
            return []
        start, limit, delta = (self._scalar(info) for info in inputs[:3])
        elem = inputs[0].elem if inputs[0] is not None else None
        if start is None or limit is None or delta is None:
            return [_Out(elem, None)]
        if isinstance(start, int) and isinstance(limit, int) and isinstance(delta, int):
            if delta == 0:
                return [_Out(elem, None)]
            count = max(-((start - limit) // delta), 0)  # ceil((limit - start) / delta)
            array = np.arange(start, limit, delta, dtype=np.int64) if count <= MAX_FOLDED_ELEMENTS else None
            return [_Out(elem, (count,), array)]
        span = (float(limit) - float(start)) / float(delta) if float(delta) != 0.0 else math.nan
        if not math.isfinite(span):
            return [_Out(elem, None)]
        return [_Out(elem, (max(math.ceil(span), 0),))]

    def _expand(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        target = self._ints(inputs[1] if len(inputs) > 1 else None)
        elem = data.elem if data is not None else None
        if target is None or any(dim < 0 for dim in target):
            return [_Out(elem, None)]
        data_shape = data.shape if data is not None else None
        shape = _broadcast([data_shape, tuple(target)], lower_bound=True)
        return [_lower_bound(elem, shape, data_shape)]

    def _tile(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        repeats = self._ints(inputs[1] if len(inputs) > 1 else None)
        elem = data.elem if data is not None else None
        if repeats is None or any(count < 0 for count in repeats):
            return [_Out(elem, None)]
        data_shape = data.shape if data is not None and data.shape is not None and len(data.shape) == len(repeats) else None
        dims = data_shape if data_shape is not None else (None,) * len(repeats)
        shape = tuple(count * (dim if dim is not None else 1) for dim, count in zip(dims, repeats, strict=True))
        return [_Out(elem, shape, at_least=_static(dims) is None)]

    def _pad(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        elem = data.elem if data is not None else None
        pads = (_ints_attr(node, "pads") or _ints_attr(node, "paddings")) if len(inputs) < 2 else self._ints(inputs[1])
        if pads is None or len(pads) % 2:
            return [_Out(elem, None)]
        half = len(pads) // 2
        data_shape = data.shape if data is not None else None
        rank = len(data_shape) if data_shape is not None else half
        if len(inputs) > 3 and inputs[3] is not None:
            axes = self._ints(inputs[3])
            if axes is None or data_shape is None:
                return [_Out(elem, None)]
        else:
            axes = list(range(half))
        if len(axes) != half or rank < half or any(not -rank <= axis < rank for axis in axes):
            return [_Out(elem, None)]
        dims: list[int | None] = list(data_shape) if data_shape is not None else [None] * rank
        extra = [0] * rank
        for position, axis in enumerate(axes):
            extra[axis % rank] += pads[position] + pads[position + half]
        shape = tuple(max((dim if dim is not None else 0) + more, 0) for dim, more in zip(dims, extra, strict=True))
        return [_Out(elem, shape, at_least=any(dim is None for dim in dims))]

    def _resize(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        elem = data.elem if data is not None else None
        scales: list[float] | None = None
        sizes: list[int] | None = None
        if node.op_type == "Upsample" and self.opset < 9:
            scales = _floats_attr(node, "scales")
        elif node.op_type == "Upsample" or self.opset < 11:  # Upsample-9, Resize-10: (X, scales)
            scales = self._floats(inputs[1]) if len(inputs) > 1 else None
        else:
            if len(inputs) > 3 and inputs[3] is not None:
                sizes = self._ints(inputs[3])
            if sizes is None and len(inputs) > 2 and inputs[2] is not None:
                scales = self._floats(inputs[2])
        if scales is not None and not scales:
            scales = None
        if sizes is not None and not sizes:
            sizes = None
        data_shape = data.shape if data is not None else None
        count = len(sizes) if sizes is not None else len(scales) if scales is not None else 0
        if not count:
            return [_Out(elem, None)]
        axes = _ints_attr(node, "axes")
        rank = len(data_shape) if data_shape is not None else None if axes else count
        if rank is None:
            return [_Out(elem, None)]
        if axes and any(not -rank <= axis < rank for axis in axes):
            return [_Out(elem, None)]
        axes = [axis % rank for axis in axes] if axes else list(range(count))
        if len(axes) != count or count > rank or len(set(axes)) != count:
            return [_Out(elem, None)]
        dims: list[int | None] = list(data_shape) if data_shape is not None else [None] * rank
        shape: list[int] = [dim if dim is not None else 1 for dim in dims]
        if sizes is not None:
            if any(size < 0 for size in sizes):
                return [_Out(elem, None)]
            policy = _string_attr(node, "keep_aspect_ratio_policy", "stretch")
            if policy == "stretch":
                for axis, size in zip(axes, sizes, strict=True):
                    shape[axis] = size
                return [_Out(elem, tuple(shape), at_least=any(dims[a] is None for a in range(rank) if a not in axes))]
            known = [(dims[axis], size) for axis, size in zip(axes, sizes, strict=True)]
            if any(dim is None or dim == 0 for dim, _ in known):
                return [_Out(elem, None)]
            ratios = [size / dim for dim, size in known if dim]
            scale = min(ratios) if policy == "not_larger" else max(ratios)
            for axis in axes:
                dim = dims[axis]
                assert dim is not None
                shape[axis] = math.floor(dim * scale + 0.5)
            return [_Out(elem, tuple(shape), at_least=any(dim is None for dim in dims))]
        assert scales is not None
        if any(not math.isfinite(scale) or scale < 0 for scale in scales):
            return [_Out(elem, None)]
        for axis, scale in zip(axes, scales, strict=True):
            shape[axis] = math.floor(shape[axis] * scale)
        return [_Out(elem, tuple(shape), at_least=any(dim is None for dim in dims))]

    def _floats(self, info: _Info | None) -> list[float] | None:
        values = self._values(info)
        if values is None or values.dtype.kind not in "f":
            return None
        return [float(value) for value in values.reshape(-1)]

    def _one_hot(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        if len(inputs) < 3:
            return []
        indices, values = inputs[0], inputs[2]
        elem = values.elem if values is not None else None
        depth = self._scalar(inputs[1])
        if depth is None or not math.isfinite(depth) or depth < 0:
            return [_Out(elem, None)]
        index_shape = indices.shape if indices is not None else None
        dims = list(index_shape) if index_shape is not None else []
        axis = _int_attr(node, "axis", -1)
        rank = len(dims) + 1
        if not -rank <= axis < rank:
            return [_Out(elem, None)]
        dims.insert(axis % rank, int(depth))
        shape = tuple(dim if dim is not None else 1 for dim in dims)
        return [_Out(elem, shape, at_least=index_shape is None or any(dim is None for dim in index_shape))]

    def _random(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        dims = _ints_attr(node, "shape")
        elem = _int_attr(node, "dtype", _FLOAT)
        if dims is None or any(dim < 0 for dim in dims):
            return [_Out(elem, None)]
        return [_Out(elem, tuple(dims))]

    def _reshape(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        elem = data.elem if data is not None else None
        target = self._ints(inputs[1]) if len(inputs) > 1 else _ints_attr(node, "shape")
        if target is None:
            return [_Out(elem, None)]
        data_shape = data.shape if data is not None else None
        allow_zero = _int_attr(node, "allowzero", 0)
        dims: list[int | None] = []
        for position, dim in enumerate(target):
            if dim == 0 and not allow_zero:
                dims.append(data_shape[position] if data_shape is not None and position < len(data_shape) else None)
            elif dim < -1:
                return [_Out(elem, None)]
            else:
                dims.append(None if dim == -1 else dim)
        if target.count(-1) > 1:
            return [_Out(elem, None)]
        if -1 in target:
            total = _static(data_shape)
            rest = _static(tuple(dim for position, dim in enumerate(dims) if target[position] != -1))
            if total is None or rest is None or _product(rest) == 0:
                return [_Out(elem, tuple(dims))]
            dims[target.index(-1)] = _product(total) // _product(rest)
        values = self._values(data)
        shape = tuple(dims)
        static = _static(shape)
        array = _reshaped(values, static)
        return [_Out(elem, shape, array)]

    def _shape(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        if data is None or data.shape is None:
            return [_Out(_INT64, None)]
        rank = len(data.shape)
        start = _int_attr(node, "start", 0)
        end = _int_attr(node, "end", rank)
        dims = data.shape[slice(*slice(start, end).indices(rank))]
        static = _static(dims)
        array = np.array(static, dtype=np.int64) if static is not None else None
        return [_Out(_INT64, (len(dims),), array)]

    def _size(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        static = _static(data.shape) if data is not None else None
        return [_Out(_INT64, (), np.array(_product(static), dtype=np.int64) if static is not None and _product(static) < 1 << 63 else None)]

    def _concat(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        if not inputs or any(info is None or info.shape is None for info in inputs):
            return [_Out(inputs[0].elem if inputs and inputs[0] is not None else None, None)]
        shapes = [info.shape for info in inputs if info is not None and info.shape is not None]
        rank = len(shapes[0])
        axis = _int_attr(node, "axis", 0)
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
        parts = [self._values(info) for info in inputs]
        array = None
        arrays = [part for part in parts if part is not None and part.ndim == rank]
        if (
            len(arrays) == len(parts)
            and len({part.dtype for part in arrays}) == 1
            and all(_fits(part.shape, axis, arrays[0].shape) for part in arrays)
        ):
            array = np.concatenate(arrays, axis=axis)
        return [_Out(elem, tuple(dims), array)]

    def _unsqueeze(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        elem = data.elem if data is not None else None
        axes = self._ints(inputs[1]) if len(inputs) > 1 else _ints_attr(node, "axes")
        if data is None or data.shape is None or axes is None:
            return [_Out(elem, None)]
        rank = len(data.shape) + len(axes)
        if any(not -rank <= axis < rank for axis in axes) or len({axis % rank for axis in axes}) != len(axes):
            return []
        wanted = {axis % rank for axis in axes}
        rest = iter(data.shape)
        shape = tuple(1 if position in wanted else next(rest) for position in range(rank))
        values = self._values(data)
        static = _static(shape)
        return [_Out(elem, shape, _reshaped(values, static))]

    def _squeeze(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        elem = data.elem if data is not None else None
        axes = self._ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else _ints_attr(node, "axes")
        if data is None or data.shape is None:
            return [_Out(elem, None)]
        rank = len(data.shape)
        if axes is None:
            if _static(data.shape) is None:
                return [_Out(elem, None)]
            shape = tuple(dim for dim in data.shape if dim != 1)
        else:
            if any(not -rank <= axis < rank for axis in axes):
                return []
            wanted = {axis % rank for axis in axes}
            shape = tuple(dim for position, dim in enumerate(data.shape) if position not in wanted)
        values = self._values(data)
        static = _static(shape)
        return [_Out(elem, shape, _reshaped(values, static))]

    def _gather(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        if len(inputs) < 2:
            return []
        data, indices = inputs[0], inputs[1]
        elem = data.elem if data is not None else None
        if data is None or data.shape is None or indices is None or indices.shape is None:
            return [_Out(elem, None)]
        rank = len(data.shape)
        axis = _int_attr(node, "axis", 0)
        if not -rank <= axis < rank:
            return []
        axis %= rank
        shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :])
        array = None
        values, positions = self._values(data), self._values(indices)
        extent = data.shape[axis]
        if (
            values is not None
            and positions is not None
            and positions.dtype.kind in "iu"
            and extent is not None
            and _within(positions, extent)
        ):
            array = np.take(values, positions.astype(np.int64), axis=axis)
        return [_Out(elem, shape, array)]

    def _slice(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        elem = data.elem if data is not None else None
        if data is None or data.shape is None:
            return [_Out(elem, None)]
        if len(inputs) == 1:  # Slice-1: attributes
            starts, ends, axes, steps = _ints_attr(node, "starts"), _ints_attr(node, "ends"), _ints_attr(node, "axes"), None
        else:
            starts = self._ints(inputs[1]) if len(inputs) > 1 else None
            ends = self._ints(inputs[2]) if len(inputs) > 2 else None
            axes = self._ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else None
            steps = self._ints(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else None
            if (len(inputs) > 3 and inputs[3] is not None and axes is None) or (
                len(inputs) > 4 and inputs[4] is not None and steps is None
            ):
                return [_Out(elem, None)]
        rank = len(data.shape)
        if starts is None or ends is None or len(starts) != len(ends):
            return [_Out(elem, None)]
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
        values = self._values(data)
        array = values[tuple(cuts)] if values is not None and values.shape == _static(data.shape) else None
        return [_Out(elem, tuple(dims), array)]

    def _flatten(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        elem = data.elem if data is not None else None
        if data is None or data.shape is None:
            return [_Out(elem, None)]
        rank = len(data.shape)
        axis = _int_attr(node, "axis", 1)
        if not -rank <= axis <= rank:
            return []
        axis = axis % rank if axis < 0 else axis
        left, right = _static(data.shape[:axis]), _static(data.shape[axis:])
        return [_Out(elem, (_product(left) if left is not None else None, _product(right) if right is not None else None))]

    def _transpose(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        elem = data.elem if data is not None else None
        if data is None or data.shape is None:
            return [_Out(elem, None)]
        rank = len(data.shape)
        perm = _ints_attr(node, "perm") or list(reversed(range(rank)))
        if sorted(perm) != list(range(rank)):
            return []
        return [_Out(elem, tuple(data.shape[axis] for axis in perm))]

    def _matmul(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        if len(inputs) < 2 or inputs[0] is None or inputs[1] is None:
            return []
        left, right = inputs[0].shape, inputs[1].shape
        elem = inputs[0].elem
        if left is None or right is None or not left or not right:
            return [_Out(elem, None)]
        a = (1, *left) if len(left) == 1 else left
        b = (*right, 1) if len(right) == 1 else right
        batch = _broadcast([a[:-2], b[:-2]])
        if batch is None:
            return [_Out(elem, None)]
        dims = (*batch, *(() if len(left) == 1 else (a[-2],)), *(() if len(right) == 1 else (b[-1],)))
        return [_Out(elem, dims)]

    def _gemm(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        if len(inputs) < 2 or inputs[0] is None or inputs[1] is None:
            return []
        left, right = inputs[0].shape, inputs[1].shape
        elem = inputs[0].elem
        if left is None or right is None or len(left) != 2 or len(right) != 2:
            return [_Out(elem, None)]
        rows = left[1] if _int_attr(node, "transA", 0) else left[0]
        columns = right[0] if _int_attr(node, "transB", 0) else right[1]
        return [_Out(elem, (rows, columns))]

    def _eye_like(self, node: Node, inputs: list[_Info | None]) -> list[_Out | None]:
        data = inputs[0] if inputs else None
        elem = _int_attr(node, "dtype", 0) or (data.elem if data is not None else None)
        return [_Out(elem, data.shape if data is not None else None)]

    def _loop(self, node: Node, inputs: list[_Info | None], bodies: dict[str, _Scope]) -> list[_Out | None]:
        """A Loop's scan outputs: the trip count (a constant) times what each
        iteration adds, when the body fixes that statically."""
        body = bodies.get("body")
        attribute = _attribute(node, "body")
        if body is None or attribute is None or not isinstance(attribute.value, Graph):
            return []
        trips = self._scalar(inputs[0]) if inputs and inputs[0] is not None else None
        if not isinstance(trips, int) or trips < 0:
            return []
        outputs = attribute.value.output
        carried = len(node.input) - 2
        outs: list[_Out | None] = [None] * max(carried, 0)
        for info in outputs[1 + carried :]:
            found = body.lookup(info.name)
            static = _static(found.shape) if found is not None else None
            outs.append(None if found is None or static is None else _Out(found.elem, (trips, *static), what=f"over {trips} iterations"))
        return outs


def _broadcast(shapes: Sequence[Dims | None], *, lower_bound: bool = False) -> Dims | None:
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


def _lower_bound(elem: int | None, shape: Dims | None, data_shape: Dims | None) -> _Out:
    """An Expand's output: exact when the data's shape is static, else with
    unknown dimensions taken as 1."""
    if shape is None:
        return _Out(elem, None)
    exact = data_shape is not None and _static(data_shape) is not None
    return _Out(elem, tuple(dim if dim is not None else 1 for dim in shape), at_least=not exact)


def _cast_values(values: Array | None, to: int | None) -> Array | None:
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


def _reshaped(values: Array | None, shape: tuple[int, ...] | None) -> Array | None:
    if values is None or shape is None or values.size != _product(shape):
        return None
    return values.reshape(shape)


def _fits(shape: tuple[int, ...], axis: int, first: tuple[int, ...]) -> bool:
    """Whether `shape` may be concatenated along `axis` to one like `first`."""
    return all(dim == other for position, (dim, other) in enumerate(zip(shape, first, strict=True)) if position != axis)


def _within(positions: Array, extent: int) -> bool:
    return positions.size == 0 or (int(positions.min()) >= -extent and int(positions.max()) < extent)


def _fold_int(op: str, left: Array, right: Array) -> Array | None:
    """`op` over two small integer arrays, wrapping as the runtime's int64 does (None: not foldable)."""
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


_Rule = Any  # a bound method of Estimator: (self, node, inputs) -> list[_Out | None]
_RULES: Final[dict[str, _Rule]] = {
    "Cast": Estimator._cast,
    "CastLike": Estimator._cast_like,
    "Constant": Estimator._constant,
    "ConstantOfShape": Estimator._constant_of_shape,
    "Range": Estimator._range,
    "Expand": Estimator._expand,
    "Tile": Estimator._tile,
    "Pad": Estimator._pad,
    "Resize": Estimator._resize,
    "Upsample": Estimator._resize,
    "OneHot": Estimator._one_hot,
    "RandomNormal": Estimator._random,
    "RandomUniform": Estimator._random,
    "Reshape": Estimator._reshape,
    "Shape": Estimator._shape,
    "Size": Estimator._size,
    "Concat": Estimator._concat,
    "Unsqueeze": Estimator._unsqueeze,
    "Squeeze": Estimator._squeeze,
    "Gather": Estimator._gather,
    "Slice": Estimator._slice,
    "Flatten": Estimator._flatten,
    "Transpose": Estimator._transpose,
    "MatMul": Estimator._matmul,
    "Gemm": Estimator._gemm,
    "EyeLike": Estimator._eye_like,
}  # and Loop (Estimator._loop), which also needs the body's values


def estimate_static_outputs(model: OnnxModel, max_bytes: int) -> list[Oversized]:
    """Every output whose constants fix a size past `max_bytes` (see the
    module's docstring), in file order."""
    return Estimator(model, max_bytes).run()
