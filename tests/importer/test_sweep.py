"""The sweep: every ONNX backend test model and tensor file, against onnx.

Every model.onnx of the backend data (node cases generated from the installed
onnx package, plus the data its wheel ships) must import, and its structural
dump must be byte-identical to the reference writer's (tools/onnx_dump.py,
built on onnx.load). Every TensorProto .pb file read by our tensor reader must
give the reference SHA-256 of its values.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import onnx_dump

from importer import ModelImportError, load_model, load_tensor
from importer.dump import render_dump


def test_every_backend_model_imports_with_the_reference_dump(
    backend_dir: Path, backend_manifest: dict[str, Any], report: list[str]
) -> None:
    models = backend_manifest["models"]
    assert len(models) > 1900, "the backend data should hold about 2,000 models"
    differ: list[str] = []
    refused: list[str] = []
    ours = reference = 0.0
    for relative in models:
        path = backend_dir / relative
        start = time.perf_counter()
        expected = onnx_dump.dump_model(path)
        reference += time.perf_counter() - start
        start = time.perf_counter()
        try:
            with load_model(path) as model:
                actual = render_dump(model.proto)
        except ModelImportError as error:
            refused.append(f"{relative}: {error}")
            continue
        finally:
            ours += time.perf_counter() - start
        if actual != expected:
            differ.append(relative)
    report.append(
        f"sweep: {len(models)} models, {len(models) - len(differ) - len(refused)} identical dumps, "
        f"{len(differ)} differ, {len(refused)} refused; importer {ours:.2f}s, reference {reference:.2f}s"
    )
    assert refused == []
    assert differ == []


def test_every_backend_tensor_file_gives_the_reference_sha256(
    backend_dir: Path, backend_manifest: dict[str, Any], report: list[str]
) -> None:
    files = [entry["path"] for entry in backend_manifest["tensor_files"]]
    assert len(files) > 6000, "the backend data should hold about 6,600 tensor files"
    wrong: list[str] = []
    start = time.perf_counter()
    for relative in files:
        path = backend_dir / relative
        if load_tensor(path).sha256() != onnx_dump.tensor_file_sha256(path):
            wrong.append(relative)
    report.append(f"sweep: {len(files)} tensor files, {len(files) - len(wrong)} with the reference SHA-256 "
                  f"({time.perf_counter() - start:.2f}s both sides)")  # fmt: skip
    assert wrong == []
