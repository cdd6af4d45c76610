"""The smoke run's dimension bindings, read against the model: `resolve_bindings`.

Owns `Bindings` (symbolic dimensions by name, and input axes by input and
axis) and `resolve_bindings`, which places each `dim=` binding of a request
(`service.checks.outcome.parse_dims`) in the model or refuses it:

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
`default_hint` says, for a run that failed, which dimensions took 1 unbound
and the binding that would change each.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

import importer
from importer.messages import OptionalType, TensorType, TypeProto
from service.checks.outcome import DimensionBindingError, dim_target

MAX_NAMED: Final = 10  # the dimensions a refusal lists
MAX_HINTED: Final = 4  # the dimensions a finding's hint lists (a finding's message is bounded: importer MAX_MESSAGE_CHARS)


@dataclass(frozen=True, slots=True)
class Bindings:
    """Where the request's bindings go: `names` by symbolic dimension,
    `axes` by (input name, axis)."""

    names: dict[str, int] = field(default_factory=dict)
    axes: dict[tuple[str, int], int] = field(default_factory=dict)


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
        if isinstance(dim, str):
            by_axis.append((key, dim, value))
    for key, name, value in by_axis:
        earlier = bindings.names.setdefault(name, value)
        if earlier != value:
            raise DimensionBindingError(
                f"conflicting dimension bindings: {key}:{value} binds dimension {name!r}, which is bound to {earlier} as well"
            )
    return bindings


def default_hint(names: Iterable[str], axes: Iterable[tuple[str, int]]) -> str:
    """What to bind, for a run at dimensions that took 1 unbound (`names`
    symbolic, `axes` without a name), the first MAX_HINTED; "" when there are none."""
    parts = [f"{name!r} (--dim {name}:VALUE, ?dim={urllib.parse.quote(name, safe='')}:VALUE)" for name in names]
    for name, axis in axes:
        key = f"{name}[{axis}]"
        parts.append(f"axis {axis} of input {name!r} (--dim {key}:VALUE, ?dim={urllib.parse.quote(key, safe='')}:VALUE)")
    if not parts:
        return ""
    listed = ", ".join(parts[:MAX_HINTED]) + (", ..." if len(parts) > MAX_HINTED else "")
    return f"unbound, these dimensions took 1: {listed}"
