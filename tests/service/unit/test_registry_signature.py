"""The MLflow gate passes a version's `model.sig` to the `signature` stage (`service.registry.signed_version`).

Over a version's artifacts held in memory (signed on disk first with
model-signing's API, as `model_signing sign key` signs a folder beside its
MLmodel): asked the `signature` stage, the gate fetches the folder's
`model.sig` and its other files through the folder (MLflow) besides the model
and its external data, the stage passes naming the signer, and the store keeps
the model's files only; a changed file of the folder (not the model's) fails
the stage naming it; a version without a `model.sig` fetches nothing more and
the stage is skipped; without the stage asked, nothing more is fetched. The
in-process sandbox runs the stage's worker task (its walls are the process
tests')."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from in_process import import_parts
from support.memory_artifacts import MemoryFolder
from support.signed_folders import SIGNATURE, Signer, make_signer, sign
from support.small_models import summed_external_model

from service.checks.requested import CheckRequest
from service.imports import pipeline
from service.imports.parts import ImportParts
from service.registry.version_source import RegistryFile

CHECKS = CheckRequest(("signature", "schema"))
MLMODEL = b"flavors:\n  onnx:\n    onnx_version: 1.17.0\n    data: model.onnx\n"


@pytest.fixture
def signer(tmp_path: Path) -> Signer:
    return make_signer(tmp_path / "keys")


@pytest.fixture
def imports(tmp_path: Path, signer: Signer) -> ImportParts:
    return import_parts(tmp_path, trusted_signers=signer.public_key)


def version(tmp_path: Path, signer: Signer | None) -> dict[str, bytes]:
    """A version's artifacts (a model, its external data, an MLmodel, a requirements file), signed by `signer` if given."""
    folder = tmp_path / "version"
    folder.mkdir()
    files = {"model.onnx": summed_external_model("w.bin"), "w.bin": b"\1" * 4, "MLmodel": MLMODEL, "requirements.txt": b"onnx\n"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    if signer is not None:
        sign(folder, signer)
        files[SIGNATURE] = (folder / SIGNATURE).read_bytes()
    return files


def checked(imports: ImportParts, folder: MemoryFolder, signed: bool = True) -> dict[str, Any]:
    source = RegistryFile(folder, "model.onnx", "models:/m/1", signed=signed)
    imported = asyncio.run(pipeline.run(imports, source, "mlflow", CHECKS if signed else CheckRequest(("schema",))))
    summary: dict[str, Any] = json.loads(imported.summary)
    return summary


def test_a_signed_version_passes_and_only_the_model_is_kept(imports: ImportParts, tmp_path: Path, signer: Signer) -> None:
    folder = MemoryFolder(version(tmp_path, signer))
    summary = checked(imports, folder)
    stage = summary["checks"]["signature"]
    assert (stage["status"], stage["signer_fingerprint"]) == ("pass", signer.fingerprint), stage
    assert sorted(folder.downloads) == sorted(["model.onnx", "w.bin", SIGNATURE, "MLmodel", "requirements.txt"])
    record = imports.store.read_record(summary["id"])
    assert record is not None and set(record.files) == {"model", "w.bin"}


def test_a_changed_file_of_the_folder_fails_naming_it(imports: ImportParts, tmp_path: Path, signer: Signer) -> None:
    files = version(tmp_path, signer)
    files["requirements.txt"] = b"onnx\nsomething-else\n"
    summary = checked(imports, MemoryFolder(files))
    assert summary["checks"]["signature"]["status"] == "fail"
    assert [(item["code"], item["field_path"]) for item in summary["diagnostics"]["items"]] == [("signed-file-changed", "requirements.txt")]


def test_an_unsigned_version_fetches_nothing_more_and_is_skipped(imports: ImportParts, tmp_path: Path) -> None:
    folder = MemoryFolder(version(tmp_path, None))
    summary = checked(imports, folder)
    assert summary["checks"]["signature"]["status"] == "skipped"
    assert folder.downloads == ["model.onnx", "w.bin"]


def test_without_the_stage_asked_nothing_more_is_fetched(imports: ImportParts, tmp_path: Path, signer: Signer) -> None:
    folder = MemoryFolder(version(tmp_path, signer))
    summary = checked(imports, folder, signed=False)
    assert "signature" not in summary["checks"]
    assert folder.downloads == ["model.onnx", "w.bin"]
