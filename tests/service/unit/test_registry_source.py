"""A registry version's files as sources of the import pipeline
(`service.registry.version_source.RegistryFile`), over a folder of
artifacts held in memory: each external file is fetched once, by the
location the model names (two spellings of one path are one file; a
location holding a percent sign is refused, since MLflow's artifact proxy
would decode it), within the byte budget; a version of several files
imports each with its own external data, named by the version and the
file, and the version's verdict is its worst file's (the hook over an
MLflow of this test); a version's attestation names its files as in its
folder and the model `models:/NAME/VERSION`, and a recheck keeps naming
them so. The in-process sandbox reads the model (its external
locations, then the import)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from in_process import import_parts
from support.attestations import key_pair, statement_checked_by_hand
from support.memory_artifacts import MemoryFolder
from support.small_models import summed_external_model

from service.attestation.attester import attester_for
from service.checks.requested import CheckRequest
from service.errors import UploadTooLarge
from service.imports import pipeline
from service.imports.answers import Imported
from service.imports.diffs import Diffs
from service.imports.parts import ImportParts
from service.imports.sources.stored import StoredModel
from service.registry.hook import RegistryHook
from service.registry.mlflow_api import Fetched, MlflowApi, MlflowRefused
from service.registry.sources import Refused
from service.registry.version_source import RegistryFile, VersionFiles, import_file


@pytest.fixture
def imports(tmp_path: Path) -> ImportParts:
    return import_parts(tmp_path)


def _validated(imports: ImportParts, folder: MemoryFolder) -> Imported:
    return asyncio.run(pipeline.run(imports, RegistryFile(folder, "model.onnx", "models:/m/1"), "mlflow"))


def test_two_spellings_of_one_location_are_one_file_fetched_once(imports: ImportParts) -> None:
    folder = MemoryFolder({"model.onnx": summed_external_model("w.bin", "./w.bin", "././w.bin"), "w.bin": b"\0" * 4})
    imported = _validated(imports, folder)
    assert imported.created
    assert folder.downloads == ["model.onnx", "w.bin"]
    record = imports.store.read_record(imported.model_id)
    assert record is not None and set(record.files) == {"model", "w.bin"}


def test_the_listing_that_fetched_the_external_data_sizes_the_check_worker(imports: ImportParts, caplog: pytest.LogCaptureFixture) -> None:
    """A worker lists the locations the version's model names to fetch them; sizing the check worker's memory (a
    check-worker stage asked) takes that listing, not a second worker's."""
    folder = MemoryFolder({"model.onnx": summed_external_model("w.bin"), "w.bin": b"\0" * 4})
    with caplog.at_level(logging.INFO, logger="service"):
        asyncio.run(pipeline.run(imports, RegistryFile(folder, "model.onnx", "models:/m/1"), "mlflow", CheckRequest(("schema", "shape"))))
    listings = [record.getMessage() for record in caplog.records if record.getMessage().startswith("externals of ")]
    assert len(listings) == 1, listings


def test_a_location_holding_a_percent_sign_is_refused_before_anything_is_fetched_for_it(imports: ImportParts) -> None:
    """Two hundred spellings `w.bi%6E`, ... of one name: MLflow's proxy would decode each to `w.bin` (attack 25)."""
    forms = [[c, f"%{ord(c):02X}", f"%{ord(c):02x}"] for c in "w.bin"]  # each character as it is, or percent-encoded
    spellings = [a + b + c + d + e for a in forms[0] for b in forms[1] for c in forms[2] for d in forms[3] for e in forms[4]]
    spellings = sorted(set(spellings) - {"w.bin"})[:200]
    folder = MemoryFolder({"model.onnx": summed_external_model("w.bin", *spellings), "w.bin": b"\0" * 4})
    with pytest.raises(Refused, match="holds a '%'"):
        _validated(imports, folder)
    assert folder.downloads == ["model.onnx", "w.bin"]  # the real name once; no spelling fetched
    assert imports.store.model_count() == 0


def test_the_files_fetched_count_against_the_budget(tmp_path: Path) -> None:
    imports = import_parts(tmp_path, max_upload=1024, max_upload_total=1024)
    folder = MemoryFolder({"model.onnx": summed_external_model("w.bin"), "w.bin": b"\0" * 2048})
    with pytest.raises(UploadTooLarge) as refused:
        _validated(imports, folder)
    assert refused.value.limit == "max_upload_total"
    assert imports.store.model_count() == 0


def test_the_versions_name_is_the_holdings_name(imports: ImportParts) -> None:
    """`models:/NAME/VERSION`, the source's display name, is what the tenant's listing and summary name the model by."""
    imported = _validated(imports, MemoryFolder({"model.onnx": summed_external_model("w.bin"), "w.bin": b"\0" * 4}))
    (listed,) = imports.store.listing("mlflow", None, 10)
    assert (listed.model_id, listed.holding.input, listed.holding.label) == (imported.model_id, "models:/m/1", "")
    assert b'"input":"models:/m/1"' in imported.summary


def test_each_file_of_a_version_is_imported_with_its_own_external_data(imports: ImportParts) -> None:
    folder = MemoryFolder({
        "decoder_model.onnx": summed_external_model("decoder.bin"), "decoder.bin": b"\1" * 4,
        "encoder_model.onnx": summed_external_model("encoder.bin"), "encoder.bin": b"\2" * 4,
    })  # fmt: skip
    files = VersionFiles("m", "3", folder, ["decoder_model.onnx", "encoder_model.onnx"], soft_dims=(("batch", 2),))
    checks = CheckRequest(("schema",))
    ids = []
    for path in files.paths:
        imported = asyncio.run(import_file(imports, files, path, "mlflow", checks))
        holding = imports.store.holding("mlflow", imported.model_id)
        assert holding is not None and holding.input == f"models:/m/3/{path}"
        ids.append(imported.model_id)
    assert folder.downloads == ["decoder_model.onnx", "decoder.bin", "encoder_model.onnx", "encoder.bin"]  # each its own, once
    assert len(set(ids)) == 2
    assert VersionFiles("m", "3", folder, ["model.onnx"]).display_name("model.onnx") == "models:/m/3"  # one file: the version's name


class FolderApi(MlflowApi):
    """MLflow's answers for versions whose artifacts are `files`, and the tags and alias moves the hook writes."""

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__("http://127.0.0.1:5000", environ={})
        self.files = files
        self.tags: dict[str, dict[str, str]] = {}
        self.moves: list[str] = []

    async def model_version(self, name: str, version: str) -> dict[str, Any]:
        return {"name": name, "version": version, "source": "mlflow-artifacts:/0/r/artifacts", "tags": []}

    async def list_artifacts(self, path: str) -> list[dict[str, Any]]:
        return [{"path": f"{path}/{name}", "is_dir": False, "file_size": len(data)} for name, data in self.files.items()]

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched:
        name = path.removeprefix("0/r/artifacts/")
        if name not in self.files:
            raise MlflowRefused(404, "RESOURCE_DOES_NOT_EXIST")
        target.write_bytes(self.files[name])
        return Fetched(len(self.files[name]), hashlib.sha256(self.files[name]).hexdigest())

    async def version_by_alias(self, name: str, alias: str) -> dict[str, Any]:
        if not self.moves:
            raise MlflowRefused(400, f"INVALID_PARAMETER_VALUE Registered model alias {alias} not found.")
        return {
            "version": self.moves[-1],
            "tags": [{"key": "onnx_import.model_id", "value": self.tags[self.moves[-1]]["onnx_import.model_id"]}],
        }

    async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
        self.tags.setdefault(version, {})[key] = value

    async def set_alias(self, name: str, alias: str, version: str) -> None:
        self.moves.append(version)


def test_a_version_is_as_good_as_its_worst_file(tmp_path: Path) -> None:
    """An encoder naming external data the version lacks is refused, so the version is, though its decoder passes;
    with the file there, both pass and the version is given the alias."""
    parts = import_parts(tmp_path, mlflow_url="http://127.0.0.1:5000", mlflow_webhook_secret="s", mlflow_checks="schema")
    api = FolderApi({"decoder_model.onnx": summed_external_model("decoder.bin"), "decoder.bin": b"\1" * 4,
                     "encoder_model.onnx": summed_external_model("encoder.bin")})  # fmt: skip
    hook = RegistryHook(parts, Diffs(tmp_path / "diffs"), api)
    asyncio.run(hook.validate("m", "1"))
    tags = api.tags["1"]
    assert tags["onnx_import.verdict"] == "refused" and api.moves == []
    files = json.loads(tags["onnx_import.files"])
    assert [(entry["file"], entry["verdict"], bool(entry["model_id"])) for entry in files] == [
        ("decoder_model.onnx", "pass", True), ("encoder_model.onnx", "refused", False),
    ]  # fmt: skip
    assert tags["onnx_import.reason"].startswith("encoder_model.onnx: external data 'encoder.bin' ")
    assert tags["onnx_import.checks"] == "decoder_model.onnx: schema=pass; encoder_model.onnx: refused"
    assert tags["onnx_import.model_id"] == files[0]["model_id"]
    api.files["encoder.bin"] = b"\2" * 4
    asyncio.run(hook.validate("m", "2"))
    assert api.tags["2"]["onnx_import.verdict"] == "pass" and api.moves == ["2"]
    assert api.tags["2"]["onnx_import.alias"] == "moved here (no version held it)"
    assert api.tags["2"]["onnx_import.model_id"] == files[0]["model_id"]  # the same decoder: the same content


def test_a_versions_attestation_names_its_files_in_the_folder_and_its_models_uri(tmp_path: Path) -> None:
    """The subjects are named as in the version's artifact folder (the model's path, its external data beside it),
    with the SHA-256 of what was fetched; the resource is `models:/NAME/VERSION`."""
    private, _, key = key_pair(tmp_path, "p256")
    parts = import_parts(tmp_path)
    parts = dataclasses.replace(parts, attester=attester_for(private, None, "test", parts.settings))
    model, weights = summed_external_model("w.bin"), b"\3" * 4
    folder = MemoryFolder({"onnx/model.onnx": model, "onnx/w.bin": weights})
    imported = asyncio.run(pipeline.run(parts, RegistryFile(folder, "onnx/model.onnx", "models:/m/4"), "mlflow"))
    bundle = parts.store.attestation("mlflow", imported.model_id)
    assert bundle is not None
    statement = statement_checked_by_hand(bundle, key.public_key())
    assert {subject["name"]: subject["digest"]["sha256"] for subject in statement["subject"]} == {
        "onnx/model.onnx": hashlib.sha256(model).hexdigest(),
        "onnx/w.bin": hashlib.sha256(weights).hexdigest(),
    }
    assert statement["predicate"]["resourceUri"] == "models:/m/4"
    assert parts.store.attestation("someone-else", imported.model_id) is None
    asyncio.run(pipeline.run(parts, StoredModel(parts, "mlflow", imported.model_id), "mlflow", CheckRequest(("security",))))
    again = parts.store.attestation("mlflow", imported.model_id)
    assert again is not None and again != bundle
    rechecked = statement_checked_by_hand(again, key.public_key())
    assert rechecked["subject"] == statement["subject"] and rechecked["predicate"]["resourceUri"] == "models:/m/4"  # named as before
    assert "ONNX_IMPORT_STAGE_SECURITY_PASS" in rechecked["predicate"]["verifiedLevels"]
