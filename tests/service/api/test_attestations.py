"""Signed verdicts over HTTP, in the test process over ASGI (support.asgi_service,
its workers real), with API keys and a P-256 signing key beside an older
Ed25519 key (rotation): each check run (a data-root path, an upload, a
recheck) leaves an attestation `GET /models/{id}/attestation` serves under
the Sigstore bundle's media type, which verifies with nothing but
`cryptography` and the service's public key, its subjects the SHA-256 of the
model's files and its result PASSED, or FAILED for a model that fails a
stage; a recheck replaces it with the tenant's runs as they now stand;
another tenant never sees it; a folder signed with model-signing
(`model.sig`) passes the `signature` stage, its attestation PASSED with the
signature among its input attestations and the model's files (not the
signature) as its subjects, and the same folder with one byte of an external
file changed is attested FAILED; `/readyz` shows the keys' fingerprints; the
private key appears in no log line, no /metrics and no problem; a service
without a key says so."""

from __future__ import annotations

import hashlib
import logging
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import pytest
from cryptography.hazmat.primitives import serialization
from support.asgi_service import AsgiService, serving_over_asgi
from support.attestations import PrivateKey, key_material, key_pair, statement_checked_by_hand
from support.service_harness import SAMPLES, assert_problem, copy_samples
from support.signed_folders import SIGNATURE, make_signer, sign
from support.small_models import wrong_output_type

from service.access.keys import new_key

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)
BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"


@dataclass
class Signing:
    server: AsgiService
    root: Path  # the data root
    key: PrivateKey
    key_file: Path
    older: PrivateKey  # a key signed with before (--verify-keys)
    alice: dict[str, str]
    bob: dict[str, str]
    metrics: dict[str, str]


def fingerprint(key: PrivateKey) -> str:
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(der).hexdigest()


@pytest.fixture(scope="module")
def signing(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Iterator[Signing]:
    base = tmp_path_factory.mktemp("attestations")
    key_file, _, key = key_pair(base, "p256")
    _, older_file, older = key_pair(base, "ed25519")
    tables, headers = [], []
    for tenant, scopes in (("alice", ["import", "read", "delete"]), ("bob", ["import", "read", "delete"]), ("ops", ["metrics"])):
        secret, table = new_key(tenant, scopes)
        tables.append(table)
        headers.append({"Authorization": f"Bearer {secret}"})
    (base / "keys.toml").write_text("".join(tables))
    root = copy_samples(base / "root")
    author = make_signer(base / "author")
    for name in ("signed", "changed"):  # the external-data sample signed by its author; then one byte changed in `changed`
        shutil.copytree(SAMPLES / "external", root / name)
        sign(root / name, author)
    weights = bytearray((root / "changed" / "weights.bin").read_bytes())
    weights[10] ^= 1
    (root / "changed" / "weights.bin").write_bytes(bytes(weights))
    args = ("--api-keys", str(base / "keys.toml"), "--signing-key", str(key_file), "--verify-keys", str(older_file),
            "--trusted-signers", str(author.public_key))  # fmt: skip
    with serving_over_asgi(base / "store", root, *args, "--verifier-id", "https://checks.example/onnx") as server:
        yield Signing(server, root, key, key_file, older, *headers)


def attestation(signing: Signing, model_id: str, headers: dict[str, str]) -> dict[str, Any]:
    with signing.server.client() as client:
        response = client.get(f"/models/{model_id}/attestation", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == BUNDLE
    return statement_checked_by_hand(response.content, signing.key.public_key())


def test_a_path_import_is_attested_and_verifies_with_the_public_key_alone(signing: Signing) -> None:
    with signing.server.client() as client:
        response = client.post("/models", json={"path": "external/model.onnx"}, headers=signing.alice)
    assert response.status_code in (200, 201), response.text
    model_id = response.json()["id"]
    statement = attestation(signing, model_id, signing.alice)
    folder = signing.root / "external"
    expected = {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() for path in folder.rglob("*") if path.is_file()
    }
    assert {subject["name"]: subject["digest"]["sha256"] for subject in statement["subject"]} == expected
    predicate = statement["predicate"]
    assert predicate["verificationResult"] == "PASSED"
    stages = ("SCHEMA", "SECURITY", "SHAPE")
    assert predicate["verifiedLevels"] == [f"ONNX_IMPORT_STAGE_{stage}_PASS" for stage in stages]
    with signing.server.client() as client:
        head = client.head(f"/models/{model_id}/attestation", headers=signing.alice)
    assert head.status_code == 200 and head.headers["content-type"] == BUNDLE and head.content == b""
    assert predicate["verifier"]["id"] == "https://checks.example/onnx"
    assert predicate["resourceUri"] == f"/models/{model_id}"


def test_a_signed_folder_is_attested_with_its_signature_and_a_changed_one_failed(signing: Signing) -> None:
    verdicts = {}
    for name in ("signed", "changed"):
        with signing.server.client() as client:
            response = client.post("/models?checks=signature,schema", json={"path": f"{name}/model.onnx"}, headers=signing.alice)
        assert response.status_code in (200, 201), response.text
        assert response.json()["checks"]["signature"]["status"] == ("pass" if name == "signed" else "fail")
        statement = attestation(signing, response.json()["id"], signing.alice)
        folder = signing.root / name
        model_files = {path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
                       for path in folder.rglob("*") if path.is_file() and path.name != SIGNATURE}  # fmt: skip
        assert {subject["name"]: subject["digest"]["sha256"] for subject in statement["subject"]} == model_files
        signature = {"uri": SIGNATURE, "digest": {"sha256": hashlib.sha256((folder / SIGNATURE).read_bytes()).hexdigest()}}
        assert statement["predicate"]["inputAttestations"] == [signature]
        verdicts[name] = statement["predicate"]["verificationResult"]
    assert verdicts == {"signed": "PASSED", "changed": "FAILED"}


def test_an_upload_and_its_recheck_are_attested(signing: Signing) -> None:
    model = (signing.root / "add.onnx").read_bytes()
    with signing.server.client() as client:
        response = client.post("/models", files={"model": ("add.onnx", model)}, headers=signing.alice)
        assert response.status_code in (200, 201), response.text
        model_id = response.json()["id"]
        first = attestation(signing, model_id, signing.alice)
        assert first["subject"] == [
            {"name": "add.onnx", "digest": {"sha256": hashlib.sha256(model).hexdigest()}, "annotations": {"onnx_import.role": "model"}}
        ]
        response = client.post(f"/models/{model_id}/checks?checks=smoke", headers=signing.alice)
        assert response.status_code == 200, response.text
    again = attestation(signing, model_id, signing.alice)
    assert again["subject"] == first["subject"]  # the recheck's worker hashed the stored files again
    levels = again["predicate"]["verifiedLevels"]
    assert "ONNX_IMPORT_STAGE_SMOKE_PASS" in levels and "ONNX_IMPORT_STAGE_SCHEMA_PASS" in levels  # the runs as they now stand


def test_a_failing_model_is_attested_failed(signing: Signing) -> None:
    with signing.server.client() as client:
        response = client.post("/models", files={"model": ("wrong.onnx", wrong_output_type())}, headers=signing.alice)
    assert response.status_code in (200, 201) and response.json()["verdict"] == "fail", response.text
    predicate = attestation(signing, response.json()["id"], signing.alice)["predicate"]
    assert predicate["verificationResult"] == "FAILED" and "ONNX_IMPORT_STAGE_SHAPE_FAIL" in predicate["verifiedLevels"]


def test_another_tenant_never_sees_an_attestation(signing: Signing) -> None:
    model = onnx.load(str(signing.root / "if_subgraph.onnx")).SerializeToString()
    with signing.server.client() as client:
        model_id = client.post("/models", files={"model": ("if.onnx", model)}, headers=signing.alice).json()["id"]
        alices = client.get(f"/models/{model_id}/attestation", headers=signing.alice).content
        assert_problem(client.get(f"/models/{model_id}/attestation", headers=signing.bob), 404, "not-found")
        response = client.post("/models?checks=schema", files={"model": ("bobs.onnx", model)}, headers=signing.bob)
        assert response.status_code in (200, 201) and response.json()["id"] == model_id  # the same content, shared underneath
        bobs = client.get(f"/models/{model_id}/attestation", headers=signing.bob)
        assert client.get(f"/models/{model_id}/attestation", headers=signing.alice).content == alices  # alice's own, unchanged
    bob_statement = statement_checked_by_hand(bobs.content, signing.key.public_key())
    assert bob_statement["predicate"]["verifiedLevels"] == ["ONNX_IMPORT_STAGE_SCHEMA_PASS"]  # bob's runs, never alice's
    assert bob_statement["subject"][0]["name"] == "bobs.onnx"


def test_readiness_shows_the_keys_fingerprints(signing: Signing) -> None:
    with signing.server.client() as client:
        ready = client.get("/readyz").json()
    assert ready["signing_key"] == fingerprint(signing.key)
    assert ready["verify_keys"] == [fingerprint(signing.older)]


def test_the_key_is_in_no_log_metrics_or_problem(signing: Signing, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    shown: list[bytes] = []
    with signing.server.client() as client:
        response = client.post("/models", json={"path": "typed_fields.onnx"}, headers=signing.alice)
        assert response.status_code in (200, 201)
        shown.append(client.get(f"/models/{response.json()['id']}/attestation", headers=signing.alice).content)
        shown.append(client.get("/metrics", headers=signing.metrics).content)
        shown.append(client.get("/readyz").content)
        for problem in (
            client.get("/models/" + "0" * 64 + "/attestation", headers=signing.alice),
            client.get("/models/x/attestation"),
            client.post("/models", json={"path": "../keys.toml"}, headers=signing.alice),
            client.post("/models", json={"path": str(signing.key_file)}, headers=signing.alice),
        ):
            assert problem.status_code >= 400
            shown.append(problem.content)
    shown.append(caplog.text.encode())
    for material in key_material(signing.key, signing.key_file):
        for text in shown:
            assert material not in text


def test_a_service_without_a_key_says_so(tmp_path: Path) -> None:
    with serving_over_asgi(tmp_path / "store", copy_samples(tmp_path / "root")) as server, server.client() as client:
        model_id = client.post("/models", json={"path": "add.onnx"}).json()["id"]
        body = assert_problem(client.get(f"/models/{model_id}/attestation"), 404, "not-found")
        assert "--signing-key" in body["detail"]
        ready = client.get("/readyz").json()
    assert ready["signing_key"] is None and ready["verify_keys"] == []
