"""The smoke run's dimension bindings, read against the model: `resolve_bindings`, `binding_plan`.

Owns `Bindings` (symbolic dimensions by name, input axes by input and axis,
and where each came from) and `resolve_bindings`, which places each `dim=`
binding of a request (`service.checks.outcome.parse_dims`) in the model or
refuses it:

- `NAME` must be the `dim_param` of a dimension declared by a graph input or
  output (a tensor, or an optional tensor);
- `INPUT[AXIS]` must name a graph input the run makes (no initializer) of a
  tensor type with a shape of more than AXIS dimensions, and that dimension
  must be free: without a name (it takes the value), or symbolic (its name
  takes the value, which must then agree with a `NAME` binding of it). A
  dimension with a fixed value is not bound.

Anything else is `DimensionBindingError`, a usage error the check worker
reports before any stage runs (`service.checks.stages.in_worker`), so that
the front end answers 400 and `onnx-import check` exits 64.

`binding_plan` adds, after the request's, the bindings the model states in
its own metadata (`metadata_props` key MODEL_DIMS_KEY, `onnx_import.dims`,
the same syntax comma-separated: `batch:4,x[1]:16`), then a registry's
(`soft_dims`). Those two are lenient: each is used only where it names a
free place of an input the run makes (a symbolic dimension of such an input,
or a free axis of one) that nothing before it bound, and is otherwise left
(a malformed entry of the metadata too), without an error: a request's
binding is the caller's, who can correct it (hence strict), while these are
hints from the model's exporter or a registry, which no caller can correct
and which should never refuse a check (hence lenient). A dimension is keyed
by its `NAME`, or `INPUT[AXIS]` for one without a name (`dimension_key`).
`default_hint` says, for a run that failed, which dimensions took the
default unbound and the binding that would change each.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import importer
from importer.messages import OptionalType, TensorType, TypeProto
from service.checks.outcome import BindingSource, ChecksError, DimensionBindingError, dim_target, parse_dims

MAX_NAMED: Final = 10  # the dimensions a refusal lists
MAX_HINTED: Final = 4  # the dimensions a finding's hint lists (a finding's message is bounded: importer MAX_MESSAGE_CHARS)
MODEL_DIMS_KEY: Final = "onnx_import.dims"  # the model's own bindings, in its metadata_props: `NAME:VALUE,INPUT[AXIS]:VALUE`


@dataclass(frozen=True, slots=True)
class Bindings:
    """Where the bindings go: `names` by symbolic dimension, `axes` by
    (input name, axis); `sources`, where each came from, by dimension key."""

    names: dict[str, int] = field(default_factory=dict)
    axes: dict[tuple[str, int], int] = field(default_factory=dict)
    sources: dict[str, BindingSource] = field(default_factory=dict)


def dimension_key(dim: int | str | None, name: str, axis: int) -> str:
    """How the summary names a free dimension: its `NAME` when it has one, else `INPUT[AXIS]`."""
    return dim if isinstance(dim, str) else f"{name}[{axis}]"


def declared_shape(declared: TypeProto | None) -> tuple[int | str | None, ...] | None:
    """The shape of a dense tensor or optional-tensor declaration, else None."""
    if isinstance(declared, OptionalType):
        declared = declared.elem_type
    if isinstance(declared, TensorType) and not declared.sparse:
        return declared.shape
    return None


def _symbolic_names(model: importer.OnnxModel) -> list[str]:
    """The dim_params of the graph's inputs and outputs, in order, once each."""
    names: dict[str, None] = {}
    for value in (*model.graph.inputs, *model.graph.outputs):
        for dim in declared_shape(value.type) or ():
            if isinstance(dim, str):
                names.setdefault(dim)
    return list(names)


def _listed(items: Iterable[str]) -> str:
    shown = list(items)
    text = ", ".join(repr(item) for item in shown[:MAX_NAMED])
    return (text + ", ...") if len(shown) > MAX_NAMED else (text or "none")


def resolve_bindings(model: importer.OnnxModel, dims: Mapping[str, int]) -> Bindings:
    """Place each of `dims` (`NAME` or `INPUT[AXIS]` -> value) in `model`, or
    raise DimensionBindingError naming the binding and what the model has."""
    bindings = Bindings()
    if not dims:
        return bindings  # nothing to place (and the graph need not be resolved for it)
    symbolic = _symbolic_names(model)
    inputs = {value.name: value for value in model.graph.inputs}
    by_axis: list[tuple[str, str, int]] = []  # (the key, a symbolic name an axis binding gives, its value)
    for key, value in dims.items():
        target, axis = dim_target(key)
        if axis is None:
            if key not in symbolic:
                raise DimensionBindingError(
                    f"unknown dimension binding {key}:{value}: the model's inputs and outputs have no dimension named {key!r} "
                    f"(their symbolic dimensions: {_listed(symbolic)}; a dimension without a name is bound as INPUT[AXIS]:VALUE)"
                )
            bindings.names[key] = value
            bindings.sources[key] = "request"
            continue
        given = inputs.get(target)
        if given is None:
            raise DimensionBindingError(
                f"unknown dimension binding {key}:{value}: the model has no input {target!r} (its inputs: {_listed(inputs)})"
            )
        if given.initializer is not None:
            raise DimensionBindingError(
                f"unknown dimension binding {key}:{value}: input {target!r} has an initializer, which the smoke run uses as it is"
            )
        shape = declared_shape(given.type)
        if shape is None or axis >= len(shape):
            rank = "declares no shape" if shape is None else f"has {len(shape)} dimensions"
            raise DimensionBindingError(f"unknown dimension binding {key}:{value}: input {target!r} {rank}, so no axis {axis}")
        dim = shape[axis]
        if isinstance(dim, int) and dim >= 0:
            raise DimensionBindingError(
                f"dimension binding {key}:{value}: axis {axis} of input {target!r} is declared {dim}; only a dimension "
                "without a value (symbolic or without a name) is bound"
            )
        bindings.axes[(target, axis)] = value
        bindings.sources[dimension_key(dim, target, axis)] = "request"
        if isinstance(dim, str):
            by_axis.append((key, dim, value))
    for key, name, value in by_axis:
        earlier = bindings.names.setdefault(name, value)
        if earlier != value:
            raise DimensionBindingError(
                f"conflicting dimension bindings: {key}:{value} binds dimension {name!r}, which is bound to {earlier} as well"
            )
    return bindings


def binding_plan(model: importer.OnnxModel, dims: Mapping[str, int], soft_dims: Mapping[str, int]) -> Bindings:
    """The request's `dims` (strict: resolve_bindings), then the model's own
    (MODEL_DIMS_KEY), then `soft_dims` (a registry's), each of the last two
    where it names a free place of a made input that nothing bound before."""
    bindings = resolve_bindings(model, dims)
    _add_lenient(model, bindings, model_dims(model), "model")
    _add_lenient(model, bindings, soft_dims, "registry")
    return bindings


def model_dims(model: importer.OnnxModel) -> dict[str, int]:
    """The bindings the model states in its metadata (MODEL_DIMS_KEY); a malformed entry is left out."""
    stated: dict[str, int] = {}
    for entry in model.proto.metadata_props:
        if entry.key != MODEL_DIMS_KEY:
            continue
        for part in entry.value.split(","):
            try:
                stated.update(parse_dims([part.strip()]))
            except ChecksError:
                continue
    return stated


def _add_lenient(model: importer.OnnxModel, bindings: Bindings, dims: Mapping[str, int], source: BindingSource) -> None:
    """Each of `dims` that names a free place of an input the run makes, not bound yet, into `bindings`."""
    shapes = {value.name: declared_shape(value.type) for value in model.graph.inputs if value.initializer is None}
    symbolic = {dim for shape in shapes.values() for dim in shape or () if isinstance(dim, str)}
    for key, value in dims.items():
        place = _free_place(shapes, symbolic, key)
        if isinstance(place, str) and place not in bindings.names:
            bindings.names[place] = value
            bindings.sources[place] = source
        elif isinstance(place, tuple) and place not in bindings.axes:
            bindings.axes[place] = value
            bindings.sources[dimension_key(None, *place)] = source


def _free_place(shapes: Mapping[str, tuple[int | str | None, ...] | None], symbolic: set[str], key: str) -> str | tuple[str, int] | None:
    """What `key` names among the made inputs' dimensions: a symbolic one's
    name, an axis without a name, or None (no such place, or a fixed dimension)."""
    target, axis = dim_target(key)
    if axis is None:
        return key if key in symbolic else None
    shape = shapes.get(target)
    if shape is None or axis >= len(shape):
        return None
    dim = shape[axis]
    if isinstance(dim, str):
        return dim
    return (target, axis) if dim is None or dim < 0 else None


def default_hint(names: Iterable[str], axes: Iterable[tuple[str, int]], value: int = 1) -> str:
    """What to bind, for a run at dimensions that took `value` unbound (`names`
    symbolic, `axes` without a name), the first MAX_HINTED; "" when there are none."""
    parts = [f"{name!r} (--dim {name}:VALUE, ?dim={urllib.parse.quote(name, safe='')}:VALUE)" for name in names]
    for name, axis in axes:
        key = f"{name}[{axis}]"
        parts.append(f"axis {axis} of input {name!r} (--dim {key}:VALUE, ?dim={urllib.parse.quote(key, safe='')}:VALUE)")
    if not parts:
        return ""
    listed = ", ".join(parts[:MAX_HINTED]) + (", ..." if len(parts) > MAX_HINTED else "")
    return f"unbound, these dimensions took {value}: {listed}"
