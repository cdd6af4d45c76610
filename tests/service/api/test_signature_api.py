"""The `signature` stage through the service (in the test process over ASGI, its workers real), `--trusted-signers` set.

A path import of a folder signed with `model_signing sign key` (model-signing's
API, `support.signed_folders`) passes the stage, its summary naming the
signer's key fingerprint and the SHA-256 of its model.sig, kept with the
tenant's runs; the same folder with one byte of an external file changed
fails, `/diagnostics` naming the file. An upload sends the signature as one
more `external_data` part named `model.sig` (a resumable upload as one more
`external_data` entry of that name), which the model need not use:
the files as the client named them pass, a changed part fails, and without
the part the stage is `skipped` and the verdict `incomplete`, though the same
bytes passed before (the stage is never reused: it checks the folder, not the
model's bytes). The signature is checked, never stored with the model.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.asgi_service import AsgiService, serving_over_asgi
from support.service_harness import SAMPLES
from support.signed_folders import SIGNATURE, Signer, make_signer, sign
from support.tus_uploads import upload as resumable

CHECKS = {"checks": "signature,schema"}


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return make_signer(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory, signer: Signer) -> Path:
    """`signed/`: the external-data sample, signed; `changed/`: the same, then one byte of `weights.bin` changed."""
    root = tmp_path_factory.mktemp("signed-data")
    for name in ("signed", "changed"):
        shutil.copytree(SAMPLES / "external", root / name)
        sign(root / name, signer)
    weights = root / "changed" / "weights.bin"
    data = bytearray(weights.read_bytes())
    data[100] ^= 0x40
    weights.write_bytes(bytes(data))
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, data_root: Path, signer: Signer) -> Iterator[AsgiService]:
    store = tmp_path_factory.mktemp("store") / "store"
    with serving_over_asgi(store, data_root, "--trusted-signers", str(signer.public_key)) as service:
        yield service


@pytest.fixture(scope="module")
def client(server: AsgiService) -> Iterator[httpx.Client]:
    with server.client(timeout=120) as session:
        yield session


def imported(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code in (200, 201), response.text
    summary: dict[str, Any] = response.json()
    return summary


def upload(client: httpx.Client, folder: Path, signature: bool = True) -> dict[str, Any]:
    files = [("model", ("model.onnx", (folder / "model.onnx").read_bytes()))]
    files += [("external_data", (name, (folder / name).read_bytes())) for name in ("weights.bin", "more/bias.bin")]
    if signature:
        files.append(("external_data", (SIGNATURE, (folder / SIGNATURE).read_bytes())))
    return imported(client.post("/models", params=CHECKS, files=files))


def test_a_signed_folder_imported_by_path_passes_naming_its_signer(client: httpx.Client, data_root: Path, signer: Signer) -> None:
    summary = imported(client.post("/models", params=CHECKS, json={"path": "signed/model.onnx"}))
    stage = summary["checks"]["signature"]
    assert (stage["status"], summary["verdict"]) == ("pass", "pass"), stage
    assert stage["signer_fingerprint"] == signer.fingerprint
    assert stage["signature_sha256"] == hashlib.sha256((data_root / "signed" / SIGNATURE).read_bytes()).hexdigest()
    assert stage["versions"]["model-signing"] == "1.1.1"
    kept = client.get(f"/models/{summary['id']}").json()["checks"]["signature"]
    assert kept["signer_fingerprint"] == signer.fingerprint  # kept with the tenant's runs


def test_one_byte_changed_in_an_external_file_fails_naming_it(client: httpx.Client) -> None:
    summary = imported(client.post("/models", params=CHECKS, json={"path": "changed/model.onnx"}))
    assert (summary["checks"]["signature"]["status"], summary["verdict"]) == ("fail", "fail")
    found = client.get(f"/models/{summary['id']}/diagnostics", params={"stage": "signature"}).json()["items"]
    assert [(item["code"], item["field_path"]) for item in found] == [("signed-file-changed", "weights.bin")]


@pytest.mark.local_store  # reads the store's files
def test_an_upload_with_its_model_sig_passes_and_the_signature_is_not_stored(
    client: httpx.Client, server: AsgiService, data_root: Path, signer: Signer
) -> None:
    summary = upload(client, data_root / "signed")
    assert summary["checks"]["signature"]["status"] == "pass", summary["checks"]
    assert summary["checks"]["signature"]["signer_fingerprint"] == signer.fingerprint
    stored = {path.name for path in server.store.rglob("*") if path.is_file()}
    assert "weights.bin" in stored and SIGNATURE not in stored


def test_an_upload_of_a_changed_part_fails(client: httpx.Client, data_root: Path) -> None:
    summary = upload(client, data_root / "changed")
    assert summary["checks"]["signature"]["status"] == "fail"


def test_an_upload_without_its_signature_is_skipped_though_the_same_bytes_passed(client: httpx.Client, data_root: Path) -> None:
    assert upload(client, data_root / "signed")["checks"]["signature"]["status"] == "pass"
    summary = upload(client, data_root / "signed", signature=False)
    assert summary["checks"]["signature"]["status"] == "skipped", summary["checks"]["signature"]
    assert summary["verdict"] == "incomplete"


def test_a_stored_model_checked_again_has_no_folder(client: httpx.Client) -> None:
    summary = imported(client.post("/models", params=CHECKS, json={"path": "signed/model.onnx"}))
    again = imported(client.post(f"/models/{summary['id']}/checks", params=CHECKS))
    assert again["checks"]["signature"]["status"] == "incomplete"
    assert "model.sig" in again["checks"]["signature"]["reason"]


def test_resumable_uploads_carry_the_signature_as_an_external_data_entry(client: httpx.Client, data_root: Path, signer: Signer) -> None:
    folder = data_root / "signed"
    names = {"weights.bin": "weights.bin", "more/bias.bin": "more/bias.bin", SIGNATURE: SIGNATURE}
    ids = {location: resumable(client, (folder / name).read_bytes(), filename=name.rpartition("/")[2]) for location, name in names.items()}
    model = resumable(client, (folder / "model.onnx").read_bytes())
    summary = imported(client.post("/models", params=CHECKS, json={"upload": model, "external_data": ids}))
    stage = summary["checks"]["signature"]
    assert (stage["status"], stage["signer_fingerprint"]) == ("pass", signer.fingerprint), stage
