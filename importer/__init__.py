"""ONNX model importer: reads model files with its own protobuf reader.

Public API: `load_model`, `load_model_bytes`, `load_model_stream`, `load_tensor`,
`load_tensor_bytes`, `open_model` with `load_opened_model` and
`opened_external_locations` (open first, read later), the returned `OnnxModel` / `Tensor`, `Limits`, the one
exception type `ModelImportError` with its `ErrorKind`, and the operator check
`check_model` with its `Diagnostic` (`Severity`, `Code`), imported on first
use (PEP 562: a process that only imports models does not pay for the
check's modules), and `BUILD`, which build is running: "compiled" (mypyc) or
"pure" (`importer.build_info`). This package does no I/O beyond `importer.source` (and
reading its own package data, the schema table of `importer.op_schemas`) and
imports nothing from `service` or `onnx`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from importer.build_info import BUILD
from importer.element_types import DataType
from importer.errors import ErrorKind, ModelImportError
from importer.graph import OnnxModel, ResolvedGraph, ResolvedNode, Value
from importer.limits import Limits
from importer.load import (
    external_locations,
    load_model,
    load_model_bytes,
    load_model_stream,
    load_opened_model,
    load_tensor,
    load_tensor_bytes,
    open_model,
    opened_external_locations,
)
from importer.tensor import SparseTensor, Tensor

if TYPE_CHECKING:
    from importer.check import check_model
    from importer.diagnostics import Code, Diagnostic, Severity

# Public names imported on first use -> their module.
_LAZY = {
    "check_model": "importer.check",
    "Code": "importer.diagnostics",
    "Diagnostic": "importer.diagnostics",
    "Severity": "importer.diagnostics",
}

__all__ = [
    "BUILD",
    "Code",
    "DataType",
    "Diagnostic",
    "ErrorKind",
    "Limits",
    "ModelImportError",
    "OnnxModel",
    "ResolvedGraph",
    "ResolvedNode",
    "Severity",
    "SparseTensor",
    "Tensor",
    "Value",
    "check_model",
    "external_locations",
    "load_model",
    "load_model_bytes",
    "load_model_stream",
    "load_opened_model",
    "load_tensor",
    "load_tensor_bytes",
    "open_model",
    "opened_external_locations",
]


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'importer' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
