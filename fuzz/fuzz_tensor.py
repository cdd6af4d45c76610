"""Fuzz target: the tensor reader (a TensorProto file, as in ONNX's test data).

Invariant: for any bytes, `load_tensor_bytes` either reads a tensor whose
values convert (raw view, SHA-256, numpy copy) or raises `ModelImportError`;
nothing else escapes, nothing hangs, memory stays bounded.
Run with tools/run_fuzz.sh tensor SECONDS.
"""

from __future__ import annotations

import atheris
from runner import fuzz

with atheris.instrument_imports(include=["importer"]):  # our code, not numpy's
    from importer import DataType, ModelImportError, load_tensor_bytes


def test_one_input(data: bytes) -> None:
    try:
        tensor = load_tensor_bytes(data, name="fuzz")
        tensor.sha256()
        if tensor.data_type != DataType.STRING and tensor.is_bound:
            assert len(tensor.data) == tensor.byte_length
        if tensor.is_bound or tensor.data_type == DataType.STRING:
            array = tensor.to_numpy()
            assert array.size == tensor.element_count, (array.size, tensor.element_count)
    except ModelImportError:
        pass


def main() -> None:
    fuzz(test_one_input)


if __name__ == "__main__":
    main()
