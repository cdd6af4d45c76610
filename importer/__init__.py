"""ONNX model importer: reads model files with its own protobuf reader.

Public API: `load_model`, `load_model_bytes`, `load_model_stream`, `load_tensor`,
`load_tensor_bytes`, the returned `OnnxModel` / `Tensor`, `Limits`, and the one
exception type `ModelImportError` with its `ErrorKind`. This package does no
I/O beyond `importer.source` and imports nothing from `service` or `onnx`.
"""

from importer.element_types import DataType
from importer.errors import ErrorKind, ModelImportError
from importer.graph import OnnxModel, ResolvedGraph, ResolvedNode, Value
from importer.limits import Limits
from importer.load import load_model, load_model_bytes, load_model_stream, load_tensor, load_tensor_bytes
from importer.tensor import SparseTensor, Tensor

__all__ = [
    "DataType",
    "ErrorKind",
    "Limits",
    "ModelImportError",
    "OnnxModel",
    "ResolvedGraph",
    "ResolvedNode",
    "SparseTensor",
    "Tensor",
    "Value",
    "load_model",
    "load_model_bytes",
    "load_model_stream",
    "load_tensor",
    "load_tensor_bytes",
]
