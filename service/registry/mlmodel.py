"""The ONNX file an `MLmodel` file names: `onnx_model_path`.

MLflow's `MLmodel` is YAML; the service reads only the one value it needs,
`flavors.onnx.data` (older writers: `flavors.onnx.onnx_model`), with a
reader of plain block mappings and plain or quoted scalars. No YAML library
(none in the service's dependencies): nothing is constructed from the file,
no tag, anchor or alias is followed, and the file is bounded (`MAX_MLMODEL`).
"""

from __future__ import annotations

MAX_MLMODEL = 256 << 10  # bytes of an MLmodel file
KEYS = ("data", "onnx_model")


class MlmodelError(Exception):
    """The MLmodel file is not one the service reads (the reason)."""


def _scalar(text: str) -> str:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text[:1] in "&*!|>[{":
        raise MlmodelError(f"the onnx flavour's model path is not a plain scalar: {text[:80]!r}")
    return text.split(" #", 1)[0].strip()


def onnx_model_path(text: str) -> str | None:
    """The file the onnx flavour names (relative to the MLmodel's folder), or None without an onnx flavour."""
    if len(text) > MAX_MLMODEL:
        raise MlmodelError(f"the MLmodel file has more than {MAX_MLMODEL} bytes")
    section: list[tuple[int, str]] = []  # (indent, key) of the mappings we are in
    found: dict[str, str] = {}
    for raw in text.splitlines():
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise MlmodelError("the MLmodel file indents with tabs")
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        while section and section[-1][0] >= indent:
            section.pop()
        if line.startswith("- ") or ":" not in line:
            continue  # a list item or a continuation: nothing the onnx flavour's path is in
        key, _, value = line.partition(":")
        key = key.strip().strip("'\"")
        path = [name for _, name in section]
        if path == ["flavors", "onnx"] and key in KEYS and value.strip():
            found.setdefault(key, _scalar(value))
        if not value.strip():
            section.append((indent, key))
    for key in KEYS:
        if key in found:
            return found[key]
    return None
