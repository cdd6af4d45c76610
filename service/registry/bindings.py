"""The dimension bindings the gate gives a version's smoke run: `gate_bindings`.

Three places may name them, each as the smoke run's bindings (`NAME:VALUE`,
`INPUT[AXIS]:VALUE`; `service.checks.outcome.parse_dims_text`), the later winning
a key the earlier ones bind too:

1. the MLflow model signature's input shapes (the `MLmodel`'s
   `signature.inputs`: each tensor spec's `name` and `tensor-spec.shape`,
   where -1 is a free dimension): a concrete value at a position binds
   `INPUT[AXIS]:VALUE`;
2. `--mlflow-dims` (comma-separated: `batch:4,seq:16`);
3. the version's tag `onnx_import.dims` (the same syntax).

They become the import's `CheckRequest.soft_dims`: each is used where the
model has a free place for it, and left otherwise (a registry's bindings
are hints, never a reason to refuse a model). A tag that is not bindings
refuses the version, with the reason; a signature that cannot be read
gives none (it is MLflow's, not the operator's).
"""

from __future__ import annotations

import logging
from typing import Any

from service.checks.outcome import ChecksError, parse_dims_text
from service.registry.sources import Refused

log = logging.getLogger("service")

DIMS_TAG = "onnx_import.dims"

Bindings = tuple[tuple[str, int], ...]


def signature_bindings(inputs: list[Any]) -> Bindings:
    """`INPUT[AXIS]:VALUE` for each concrete value of the signature's tensor specs (-1: free, nothing)."""
    bound: dict[str, int] = {}
    for spec in inputs:
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
            continue  # a spec without a name names no input of the model
        shape = spec.get("tensor-spec", {}).get("shape") if isinstance(spec.get("tensor-spec"), dict) else None
        if not isinstance(shape, list):
            continue
        for axis, value in enumerate(shape):
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                bound[f"{spec['name']}[{axis}]"] = value
    return tuple(sorted(bound.items()))


def gate_bindings(setting: str, tag: str | None, inputs: list[Any]) -> Bindings:
    """The bindings of a version: its tag's over `--mlflow-dims` over its signature's."""
    merged = dict(signature_bindings(inputs))
    merged |= dict(parse_dims_text(setting))
    if tag is not None:
        try:
            merged |= dict(parse_dims_text(tag))
        except ChecksError as error:
            raise Refused(f"the version's tag {DIMS_TAG}: {error}") from None
    return tuple(sorted(merged.items()))
