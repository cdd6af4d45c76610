"""The MLflow gate's attestations, in process: where a version's are logged
(`service.registry.version_attestations`: beside its folder, a file per
model, named by the registered model and the version), the hook logging them
and tagging where over an MLflow answered in memory (the in-process sandbox
imports the models), nothing logged without a signing key, nor for a version
read from the service's bucket, an attestation past the bound, or while the
index is away (the tag says why, the verdict is written), and their write
riding the verdict's (`service.registry.pending`): kept while MLflow is down,
written before the tags once it is back, once; MLflow's artifact proxy
written with a PUT of the bytes, retried as the other calls. Against a real
MLflow server, downloaded and verified: tests/service/process/test_registry_mlflow.py."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from in_process import import_parts
from support.attestations import key_pair, statement_checked_by_hand
from support.small_models import summed_external_model, weight_model

from service.attestation.attester import attester_for
from service.errors import StorageUnavailable
from service.imports.diffs import Diffs
from service.imports.parts import ImportParts
from service.registry.alias import AliasRule
from service.registry.folders import BucketFolder, ProxyFolder
from service.registry.hook import RegistryHook
from service.registry.mlflow_api import MAX_UPLOAD, Fetched, MlflowApi, MlflowRefused, MlflowUnavailable, TooLarge
from service.registry.pending import PendingWrites, WriteBack, write_back
from service.registry.verdict import FileVerdict
from service.registry.version_attestations import attestation_folder, path_segment, version_attestations
from service.registry.version_source import VersionFiles
from service.store.s3.bucket_root import BucketRoot
from service.store.sqlite.sqlite_index import SqliteIndex

ATTESTATION = "onnx_import.attestation"
FOLDER = "0/r/artifacts/model"  # the version's folder in the proxy: runs:/r/model of experiment 0


class RegistryWithArtifacts(MlflowApi):
    """Versions whose folder (`FOLDER`) holds `files`; what the hook writes, in order: ("put", path), ("tag", key), ("alias",)."""

    def __init__(self, files: dict[str, bytes]) -> None:
        super().__init__("http://127.0.0.1:5000", environ={})
        self.files = files
        self.uploaded: dict[str, bytes] = {}
        self.tags: dict[str, dict[str, str]] = {}
        self.calls: list[tuple[str, ...]] = []

    async def model_version(self, name: str, version: str) -> dict[str, Any]:
        return {"name": name, "version": version, "source": f"mlflow-artifacts:/{FOLDER}", "tags": []}

    async def list_artifacts(self, path: str) -> list[dict[str, Any]]:
        return [{"path": f"{path}/{name}", "is_dir": False, "file_size": len(data)} for name, data in self.files.items()]

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched:
        name = path.removeprefix(FOLDER + "/")
        if name not in self.files:
            raise MlflowRefused(404, "RESOURCE_DOES_NOT_EXIST")
        target.write_bytes(self.files[name])
        return Fetched(len(self.files[name]), hashlib.sha256(self.files[name]).hexdigest())

    async def version_by_alias(self, name: str, alias: str) -> dict[str, Any]:
        raise MlflowRefused(404, "RESOURCE_DOES_NOT_EXIST")

    async def upload(self, path: str, data: bytes) -> None:
        self.calls.append(("put", path))
        self.uploaded[path] = data

    async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
        self.calls.append(("tag", key))
        self.tags.setdefault(version, {})[key] = value

    async def set_alias(self, name: str, alias: str, version: str) -> None:
        self.calls.append(("alias",))


def signing_parts(tmp_path: Path) -> tuple[ImportParts, Any]:
    """The pipeline's parts with an attester (an ECDSA P-256 key), and the key's public half."""
    private, _, key = key_pair(tmp_path, "p256")
    parts = import_parts(tmp_path, mlflow_url="http://127.0.0.1:5000", mlflow_webhook_secret="s", mlflow_checks="schema")
    return dataclasses.replace(parts, attester=attester_for(private, None, "test", parts.settings)), key.public_key()


def test_the_attestations_folder_is_beside_the_versions_and_names_the_version() -> None:
    assert attestation_folder(FOLDER, "fraud", "3") == "0/r/artifacts/model.onnx-import/fraud/v3"
    assert attestation_folder("0/models/m-1/artifacts/", "fraud", "3") == "0/models/m-1/artifacts.onnx-import/fraud/v3"
    assert path_segment("fraud-detector_v2.1") == "fraud-detector_v2.1"
    # a name the proxy would decode (%), refuse (#) or take as a path (..) is kept apart from the names it resembles
    odd = ["fraud detector", "fraud%20detector", "fraud#1", "..", "", "fraud_detector"]
    segments = [path_segment(name) for name in odd]
    assert len(set(segments)) == len(odd), segments
    for segment in segments:
        assert segment not in ("", ".", "..") and all(char.isalnum() or char in "._-" for char in segment), segment
    assert path_segment("fraud detector").startswith("fraud_detector-")


def test_the_gate_logs_each_models_attestation_beside_the_version_and_tags_where(tmp_path: Path) -> None:
    """A version of two models: an attestation each, in the sibling folder, the tag naming that folder; each
    verifies with the public key (by hand), names the model's files as in the folder and the model's URI;
    they are written before the tags, the verdict last. A version of one model: the tag names its file."""
    parts, public = signing_parts(tmp_path)
    encoder, weights = summed_external_model("encoder.bin"), b"\1" * 4
    api = RegistryWithArtifacts({"encoder_model.onnx": encoder, "encoder.bin": weights, "decoder_model.onnx": weight_model(7)})
    hook = RegistryHook(parts, Diffs(tmp_path / "diffs"), api)
    asyncio.run(hook.validate("m", "1"))
    tags = api.tags["1"]
    assert tags["onnx_import.verdict"] == "pass", tags
    folder = "0/r/artifacts/model.onnx-import/m/v1"
    assert tags[ATTESTATION] == f"mlflow-artifacts:/{folder}"
    assert sorted(api.uploaded) == [f"{folder}/decoder_model.onnx.sigstore.json", f"{folder}/encoder_model.onnx.sigstore.json"]
    statement = statement_checked_by_hand(api.uploaded[f"{folder}/encoder_model.onnx.sigstore.json"], public)
    assert {subject["name"]: subject["digest"]["sha256"] for subject in statement["subject"]} == {
        "encoder_model.onnx": hashlib.sha256(encoder).hexdigest(),
        "encoder.bin": hashlib.sha256(weights).hexdigest(),
    }
    assert statement["predicate"]["resourceUri"] == "models:/m/1/encoder_model.onnx"
    assert statement["predicate"]["verificationResult"] == "PASSED"
    files = json.loads(tags["onnx_import.files"])
    model_id = next(entry["model_id"] for entry in files if entry["file"] == "encoder_model.onnx")
    assert api.uploaded[f"{folder}/encoder_model.onnx.sigstore.json"] == parts.store.attestation("mlflow", model_id)  # the served bytes
    kinds = [call[0] for call in api.calls]
    assert kinds[:2] == ["put", "put"] and api.calls[-1] == ("tag", "onnx_import.verdict")

    api.files = {"model.onnx": weight_model(8)}
    asyncio.run(hook.validate("m", "2"))
    assert api.tags["2"][ATTESTATION] == "mlflow-artifacts:/0/r/artifacts/model.onnx-import/m/v2/model.onnx.sigstore.json"
    statement = statement_checked_by_hand(api.uploaded[api.tags["2"][ATTESTATION].removeprefix("mlflow-artifacts:/")], public)
    assert statement["predicate"]["resourceUri"] == "models:/m/2"


def test_a_version_of_bytes_the_gate_checked_before_is_attested_under_its_own_name(tmp_path: Path) -> None:
    """Version 2 of the same bytes is answered from the runs the tenant holds (no worker runs again), and its
    attestation still names version 2, verified when those runs were: a deployer of models:/m/2 finds its own."""
    parts, public = signing_parts(tmp_path)
    api = RegistryWithArtifacts({"model.onnx": weight_model(9)})
    hook = RegistryHook(parts, Diffs(tmp_path / "diffs"), api)
    asyncio.run(hook.validate("m", "1"))
    asyncio.run(hook.validate("m", "2"))
    first, second = (
        statement_checked_by_hand(api.uploaded[api.tags[version][ATTESTATION].removeprefix("mlflow-artifacts:/")], public)
        for version in ("1", "2")
    )
    assert (first["predicate"]["resourceUri"], second["predicate"]["resourceUri"]) == ("models:/m/1", "models:/m/2")
    assert second["subject"] == first["subject"]
    assert second["predicate"]["timeVerified"] == first["predicate"]["timeVerified"]  # the runs it holds: not run again
    assert second["predicate"]["verificationResult"] == "PASSED"


def test_without_a_signing_key_nothing_is_logged(tmp_path: Path) -> None:
    parts = import_parts(tmp_path, mlflow_url="http://127.0.0.1:5000", mlflow_webhook_secret="s", mlflow_checks="schema")
    api = RegistryWithArtifacts({"model.onnx": weight_model(9)})
    asyncio.run(RegistryHook(parts, Diffs(tmp_path / "diffs"), api).validate("m", "1"))
    assert api.tags["1"]["onnx_import.verdict"] == "pass"
    assert api.uploaded == {} and ATTESTATION not in api.tags["1"]


def test_a_version_read_from_the_services_bucket_a_large_attestation_or_an_index_away_log_nothing_and_say_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parts, _ = signing_parts(tmp_path)
    checked = [FileVerdict("model.onnx", "pass", "abc")]
    monkeypatch.setattr(parts.store, "attestation", lambda tenant, model_id: b"{}")
    root = BucketRoot.__new__(BucketRoot)
    root.url = "s3://models/mlflow"
    in_bucket = VersionFiles("m", "1", BucketFolder(root, "0/r/artifacts/model"), ["model.onnx"])
    said = "not logged: the version's artifacts are in s3://models/mlflow/0/r/artifacts/model, which the service only reads"
    assert asyncio.run(version_attestations(parts, in_bucket, checked)) == ({}, {ATTESTATION: said})

    monkeypatch.setattr(parts.store, "attestation", lambda tenant, model_id: bytes(MAX_UPLOAD + 1))
    api = MlflowApi("http://127.0.0.1:5000", environ={})
    in_proxy = VersionFiles("m", "1", ProxyFolder(api, FOLDER), ["model.onnx"])
    said = "not logged: the attestation of model.onnx has more than the 1048576 bytes the gate writes to MLflow"
    assert asyncio.run(version_attestations(parts, in_proxy, checked)) == ({}, {ATTESTATION: said})

    def away(tenant: str, model_id: str) -> bytes:
        raise StorageUnavailable("the index does not answer")

    monkeypatch.setattr(parts.store, "attestation", away)
    said = "not logged: StorageUnavailable: the index does not answer"
    assert asyncio.run(version_attestations(parts, in_proxy, checked)) == ({}, {ATTESTATION: said})  # the verdict is still written
    asyncio.run(api.close())


def test_an_attestation_mlflow_missed_while_down_is_written_with_the_verdict_when_it_is_back(tmp_path: Path) -> None:
    """The attestation rides the verdict's kept write: kept while MLflow is down (or refuses the service's
    credentials), then written before the tags, once; a file MLflow refuses otherwise leaves the verdict written,
    its tag saying why the attestation is not there."""
    parts, _ = signing_parts(tmp_path)
    api = RegistryWithArtifacts({"model.onnx": weight_model(10)})
    hook = RegistryHook(parts, Diffs(tmp_path / "diffs"), api)
    down: list[str] = []

    async def unavailable(path: str, data: bytes) -> None:
        down.append(path)
        raise MlflowUnavailable("connection refused (5 attempts)")

    api.upload = unavailable  # type: ignore[method-assign]
    asyncio.run(hook.validate("m", "1"))
    assert down and api.tags == {}
    (kept,) = hook.pending.waiting()
    written = json.loads(kept.read_text())
    assert list(written["artifacts"]) == down and written["tags"][ATTESTATION] == f"mlflow-artifacts:/{down[0]}"

    async def forbidden(path: str, data: bytes) -> None:
        raise MlflowRefused(403, "PERMISSION_DENIED")

    api.upload = forbidden  # type: ignore[method-assign]
    assert asyncio.run(hook.pending.drain(api, hook.alias_rule)) == 0
    assert len(hook.pending.waiting()) == 1 and api.tags == {}  # the service's credentials can be fixed: kept

    del api.upload  # MLflow is back
    assert asyncio.run(hook.pending.drain(api, hook.alias_rule)) == 1
    assert api.calls[0] == ("put", down[0]) and api.calls[-1] == ("tag", "onnx_import.verdict")
    assert api.uploaded[down[0]].decode() == written["artifacts"][down[0]]
    assert api.tags["1"][ATTESTATION] == f"mlflow-artifacts:/{down[0]}" and api.tags["1"]["onnx_import.verdict"] == "pass"
    assert asyncio.run(hook.pending.drain(api, hook.alias_rule)) == 0 and len(api.calls) == len(set(api.calls))  # written once

    refused = RegistryWithArtifacts({})

    async def bad_request(path: str, data: bytes) -> None:
        raise MlflowRefused(400, "INVALID_PARAMETER_VALUE Invalid path")

    refused.upload = bad_request  # type: ignore[method-assign]
    write = WriteBack("m", "2", {"onnx_import.verdict": "fail", ATTESTATION: "mlflow-artifacts:/x"}, artifacts={"x": "{}"})
    asyncio.run(write_back(refused, write, hook.alias_rule))
    assert refused.tags["2"]["onnx_import.verdict"] == "fail"
    assert refused.tags["2"][ATTESTATION] == "not logged: MLflow answered 400: INVALID_PARAMETER_VALUE Invalid path"
    asyncio.run(api.close())
    asyncio.run(refused.close())


def test_a_kept_write_with_attestations_is_read_whole(tmp_path: Path) -> None:
    """Sixteen attestations of 100 KiB each: past the 1 MiB a kept write once was read within."""
    index = SqliteIndex(tmp_path / "index")
    index.open()
    pending = PendingWrites(tmp_path / "pending")
    artifacts = {f"f/{index}.sigstore.json": json.dumps({"payload": "x" * (100 << 10)}) for index in range(16)}
    pending.keep(WriteBack("m", "1", {"onnx_import.verdict": "pass"}, artifacts=artifacts))
    api = RegistryWithArtifacts({})
    assert asyncio.run(pending.drain(api, AliasRule(index.registry_rows()))) == 1
    assert {path: data.decode() for path, data in api.uploaded.items()} == artifacts
    asyncio.run(api.close())
    index.close()


def test_a_file_is_written_through_the_artifact_proxy_with_a_put_retried_as_the_other_calls() -> None:
    asked: list[tuple[str, str, bytes]] = []
    statuses = [503, 200]

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append((request.method, request.url.raw_path.decode(), request.content))
        return httpx.Response(statuses.pop(0), json={})

    api = MlflowApi("http://127.0.0.1:5000", environ={}, backoff=(0.0,), transport=httpx.MockTransport(answer))
    asyncio.run(api.upload("0/r/artifacts/model.onnx-import/m/v1/model.onnx.sigstore.json", b'{"a": 1}'))
    path = "/api/2.0/mlflow-artifacts/artifacts/0/r/artifacts/model.onnx-import/m/v1/model.onnx.sigstore.json"
    assert asked == [("PUT", path, b'{"a": 1}')] * 2
    with pytest.raises(TooLarge):
        asyncio.run(api.upload("x", bytes(MAX_UPLOAD + 1)))
    assert len(asked) == 2  # not sent
    asyncio.run(api.close())
