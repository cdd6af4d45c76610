"""What the gate reads of an `MLmodel` file: `onnx_model_path` and `signature_inputs`.

MLflow's `MLmodel` is YAML; the service reads only two values: the ONNX file
the onnx flavour names, `flavors.onnx.data` (older writers:
`flavors.onnx.onnx_model`), and the signature's inputs, `signature.inputs`
(a JSON list of tensor specs, as a YAML string: single-quoted, folded over
several lines when long), with a reader of plain block mappings and plain or
quoted scalars. No YAML library (none in the service's dependencies):
nothing is constructed from the file, no tag, anchor or alias is followed,
and the file is bounded (`MAX_MLMODEL`).
"""

from __future__ import annotations

import json
from typing import Any

MAX_MLMODEL = 256 << 10  # bytes of an MLmodel file
KEYS = ("data", "onnx_model")
ONNX_FLAVOUR = ("flavors", "onnx")
SIGNATURE_INPUTS = ("signature", "inputs")


class MlmodelError(Exception):
    """The MLmodel file is not one the service reads (the reason)."""


def _closed(text: str) -> bool:
    """A single-quoted scalar's text (from its opening quote) ends on this text."""
    index = 1
    while index < len(text):
        if text[index] == "'":
            if text[index + 1 : index + 2] == "'":
                index += 2
                continue
            return True
        index += 1
    return False


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == "'" and text[-1] == "'":
        return text[1:-1].replace("''", "'")
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    if text[:1] in "&*!|>[{":
        raise MlmodelError(f"a value the gate reads is not a plain scalar: {text[:80]!r}")
    return text.split(" #", 1)[0].strip()


def _values(text: str, wanted: set[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """The scalar text of each wanted key path (a single-quoted one folded from its lines)."""
    if len(text) > MAX_MLMODEL:
        raise MlmodelError(f"the MLmodel file has more than {MAX_MLMODEL} bytes")
    section: list[tuple[int, str]] = []  # (indent, key) of the mappings we are in
    found: dict[tuple[str, ...], str] = {}
    lines = text.splitlines()
    at = 0
    while at < len(lines):
        raw = lines[at]
        at += 1
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise MlmodelError("the MLmodel file indents with tabs")
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        while section and section[-1][0] >= indent:
            section.pop()
        if line.startswith("- ") or ":" not in line:
            continue  # a list item or a continuation: nothing the gate reads is in it
        key, _, value = line.partition(":")
        key = key.strip().strip("'\"")
        value = value.strip()
        if value.startswith("'"):
            while not _closed(value) and at < len(lines):  # a quoted scalar folded over the next lines
                value += " " + lines[at].strip() if lines[at].strip() else "\n"
                at += 1
        path = (*(name for _, name in section), key)
        if path in wanted and value:
            found.setdefault(path, value)
        if not value:
            section.append((indent, key))
    return found


def onnx_model_path(text: str) -> str | None:
    """The file the onnx flavour names (relative to the MLmodel's folder), or None without an onnx flavour."""
    found = _values(text, {(*ONNX_FLAVOUR, key) for key in KEYS})
    for key in KEYS:
        if (*ONNX_FLAVOUR, key) in found:
            return _scalar(found[(*ONNX_FLAVOUR, key)])
    return None


def signature_inputs(text: str) -> list[Any]:
    """The signature's input specs (MLflow's JSON list), or [] without a signature; MlmodelError if unreadable."""
    found = _values(text, {SIGNATURE_INPUTS})
    if SIGNATURE_INPUTS not in found:
        return []
    scalar = _scalar(found[SIGNATURE_INPUTS])
    if scalar in ("", "null", "~"):
        return []
    try:
        inputs = json.loads(scalar)
    except ValueError:
        raise MlmodelError(f"the signature's inputs are not JSON: {scalar[:80]!r}") from None
    if not isinstance(inputs, list):
        raise MlmodelError("the signature's inputs are not a JSON list")
    return inputs
