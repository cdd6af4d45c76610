"""The `signature` stage: a model folder's OpenSSF model signature (`model.sig`) verified in a sandboxed worker.

Folders are signed as their authors sign them (model-signing's own API, an EC
P-256 key made with cryptography: `support.signed_folders`; once with its
`model_signing sign key` command). A signed folder
passes, with the signer's key fingerprint (SHA-256 of its SubjectPublicKeyInfo,
DER) and the SHA-256 of its model.sig; one byte of an external data file
changed fails naming that file; a signed file missing, a file the signature
does not list, a key not trusted fail, each saying so; git's files are ignored
as model-signing ignores them; files hashed with BLAKE2 or BLAKE3, or in
shards, are checked as model-signing hashed them; a signer certified by a trusted CA passes. A
folder without a model.sig is `skipped` (the verdict then `incomplete`), or
fails under `--require-signature`. A hostile model.sig (not JSON, a JSON of
the wrong types, a valid bundle's fields swapped, a megabyte and more, a link)
fails cleanly, its reason named, never a traceback nor an `incomplete`; so
does a folder of more files than a model may have (`--max-external-files`), and
a signature that leaves the model file itself out.
Without the `signing` extra the stage is `incomplete`, naming the extra.

Why a process: the stage runs in a real sandboxed worker (its fork server a
child of this process), the files opened through the front end's file broker.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.service_harness import SAMPLES, started_sandbox
from support.signed_folders import SIGNATURE, Algorithm, Signer, certificate_signer, make_signer, sign, signed_model_folder

from importer.source import confined_descriptor
from service.checks.outcome import StageResult, verdict
from service.checks.signature_worker import SignaturePolicy, SignedFolder, signature_results
from service.checks.stages.model_signature import signature_stage
from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import Sandbox


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with started_sandbox() as started:
        yield started


def checked(sandbox: Sandbox, folder: Path, signer: Signer | Path | None, required: bool = False) -> StageResult:
    """The stage's one result on `folder`, trusting `signer`'s public key (or a PEM file given as a path)."""
    trusted = signer if isinstance(signer, Path) or signer is None else signer.public_key
    job = sandbox.job("import", directory=str(folder), model="model.onnx", display_name="model.onnx", checks=("signature",))
    (result,) = signature_results(sandbox, job, SignedFolder(str(folder), "model.onnx"), SignaturePolicy(trusted, required))
    return result


def codes(result: StageResult) -> list[tuple[str, str]]:
    return [(finding.code, finding.field_path) for finding in result.findings]


def test_a_signed_folder_passes_with_its_signers_fingerprint(sandbox: Sandbox, tmp_path: Path) -> None:
    folder, signer = signed_model_folder(tmp_path)
    result = checked(sandbox, folder, signer)
    assert (result.status, result.findings, result.reason) == ("pass", [], "")
    assert result.signer_fingerprint == signer.fingerprint
    assert result.signature_sha256 == hashlib.sha256((folder / SIGNATURE).read_bytes()).hexdigest()
    assert result.as_dict()["signer_fingerprint"] == signer.fingerprint


def test_one_byte_of_an_external_file_changed_fails_naming_the_file(sandbox: Sandbox, tmp_path: Path) -> None:
    folder, signer = signed_model_folder(tmp_path)
    weights = folder / "more" / "bias.bin"
    data = bytearray(weights.read_bytes())
    data[7] ^= 1
    weights.write_bytes(bytes(data))
    result = checked(sandbox, folder, signer)
    assert result.status == "fail"
    assert codes(result) == [("signed-file-changed", "more/bias.bin")]
    assert "more/bias.bin" in result.findings[0].message
    assert result.signer_fingerprint == signer.fingerprint  # the signature itself is sound: its signer is known


def test_a_missing_file_and_an_extra_file_fail(sandbox: Sandbox, tmp_path: Path) -> None:
    folder = tmp_path / "model"
    shutil.copytree(SAMPLES / "external", folder)
    (folder / "README.md").write_text("signed too\n")
    signer = make_signer(tmp_path / "keys")
    sign(folder, signer)
    (folder / "README.md").unlink()
    (folder / "notes.txt").write_text("not signed\n")
    result = checked(sandbox, folder, signer)
    assert result.status == "fail"
    assert codes(result) == [("signed-file-missing", "README.md"), ("unsigned-file", "notes.txt")]


def test_git_files_are_ignored_as_model_signing_ignores_them(sandbox: Sandbox, tmp_path: Path) -> None:
    folder, signer = signed_model_folder(tmp_path)
    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (folder / ".gitattributes").write_text("*.bin filter=lfs\n")
    assert checked(sandbox, folder, signer).status == "pass"


def test_a_key_not_trusted_fails(sandbox: Sandbox, tmp_path: Path) -> None:
    folder, _ = signed_model_folder(tmp_path)
    stranger = make_signer(tmp_path / "other", "stranger")
    result = checked(sandbox, folder, stranger)
    assert (result.status, codes(result)) == ("fail", [("signature-untrusted", SIGNATURE)])
    assert result.signer_fingerprint == ""
    assert checked(sandbox, folder, None).status == "fail"  # no --trusted-signers: no key is trusted


def test_several_trusted_keys_verify_by_the_one_that_signed(sandbox: Sandbox, tmp_path: Path) -> None:
    folder, signer = signed_model_folder(tmp_path)
    stranger = make_signer(tmp_path / "other", "stranger")
    both = tmp_path / "trusted.pem"
    both.write_bytes(stranger.public_key.read_bytes() + signer.public_key.read_bytes())
    result = checked(sandbox, folder, both)
    assert (result.status, result.signer_fingerprint) == ("pass", signer.fingerprint)


def test_a_signer_certified_by_a_trusted_ca_passes(sandbox: Sandbox, tmp_path: Path) -> None:
    signer = certificate_signer(tmp_path / "pki")
    folder, _ = signed_model_folder(tmp_path, signer)
    assert signer.ca_certificate is not None
    result = checked(sandbox, folder, signer.ca_certificate)
    assert (result.status, result.signer_fingerprint) == ("pass", signer.fingerprint)
    assert checked(sandbox, folder, signer.public_key).status == "fail"  # a chain needs its CA, not the leaf's key


def test_without_a_signature_the_stage_is_skipped_or_fails_when_required(sandbox: Sandbox, tmp_path: Path) -> None:
    folder, signer = signed_model_folder(tmp_path)
    (folder / SIGNATURE).unlink()
    skipped = checked(sandbox, folder, signer)
    assert (skipped.status, skipped.reason) == ("skipped", "no model.sig in the model's folder")
    assert verdict([skipped]) == "incomplete"
    required = checked(sandbox, folder, signer, required=True)
    assert (required.status, codes(required)) == ("fail", [("signature-required", SIGNATURE)])


def _bundle_with(folder: Path, change: dict[str, object]) -> bytes:
    bundle = json.loads((folder / SIGNATURE).read_bytes())
    bundle.update(change)
    return json.dumps(bundle).encode()


def _envelope_with(folder: Path, change: dict[str, object]) -> bytes:
    envelope = json.loads((folder / SIGNATURE).read_bytes())["dsseEnvelope"]
    return _bundle_with(folder, {"dsseEnvelope": {**envelope, **change}})


UNSIGNED_STATEMENT = base64.b64encode(b'{"_type": "https://in-toto.io/Statement/v1"}').decode()


HOSTILE: dict[str, Callable[[Path], bytes]] = {
    "not JSON": lambda folder: b"\xff\xfe not a bundle",
    "a JSON list": lambda folder: b"[1, 2, 3]",
    "wrong types": lambda folder: _bundle_with(folder, {"verificationMaterial": "key", "dsseEnvelope": 5}),
    "no envelope": lambda folder: _bundle_with(folder, {"dsseEnvelope": None}),
    "a payload that is not base64": lambda folder: _bundle_with(
        folder, {"dsseEnvelope": {"payload": "%%%", "payloadType": "application/vnd.in-toto+json", "signatures": []}}
    ),
    "no signature": lambda folder: _envelope_with(folder, {"signatures": []}),
    "a statement not signed": lambda folder: _envelope_with(folder, {"payload": UNSIGNED_STATEMENT}),
    "deeply nested": lambda folder: b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_signature_fails_cleanly(sandbox: Sandbox, tmp_path: Path, case: str) -> None:
    folder, signer = signed_model_folder(tmp_path)
    (folder / SIGNATURE).write_bytes(HOSTILE[case](folder))
    result = checked(sandbox, folder, signer)
    assert result.status == "fail", result.reason
    assert [code for code, _ in codes(result)] in (["signature-malformed"], ["signature-untrusted"]), codes(result)
    assert "Traceback" not in result.findings[0].message


def test_a_signature_past_a_megabyte_is_refused_unread(sandbox: Sandbox, tmp_path: Path) -> None:
    folder, signer = signed_model_folder(tmp_path)
    (folder / SIGNATURE).write_bytes(b" " * ((1 << 20) + 1))
    result = checked(sandbox, folder, signer)
    assert (result.status, codes(result)) == ("fail", [("signature-unreadable", SIGNATURE)])


def test_a_link_in_the_folder_fails_and_is_not_followed(sandbox: Sandbox, tmp_path: Path) -> None:
    folder, signer = signed_model_folder(tmp_path)
    os.symlink("/etc/passwd", folder / "passwd")
    result = checked(sandbox, folder, signer)
    assert (result.status, codes(result)) == ("fail", [("signed-file-unreadable", "passwd")])
    (folder / "passwd").unlink()
    (folder / SIGNATURE).rename(tmp_path / "outside.sig")
    os.symlink(tmp_path / "outside.sig", folder / SIGNATURE)
    linked = checked(sandbox, folder, signer)
    assert (linked.status, codes(linked)) == ("fail", [("signed-file-unreadable", SIGNATURE)])


def test_a_folder_of_more_files_than_a_model_may_have_fails_unlisted(sandbox: Sandbox, tmp_path: Path) -> None:
    folder, signer = signed_model_folder(tmp_path)
    (folder / "many").mkdir()
    for index in range(sandbox.settings.max_external_files + 2):
        (folder / "many" / f"{index}.txt").write_bytes(b"")
    result = checked(sandbox, folder, signer)
    assert (result.status, codes(result)) == ("fail", [("signed-file-unreadable", ".")])
    assert "more than" in result.findings[0].message


def test_a_folder_signed_by_model_signings_own_command_passes(sandbox: Sandbox, tmp_path: Path) -> None:
    """`model_signing sign key`, the command an author runs (a process: the command is the point)."""
    folder = tmp_path / "model"
    shutil.copytree(SAMPLES / "external", folder)
    signer = make_signer(tmp_path / "keys")
    command = Path(sys.executable).with_name("model_signing")
    signing = ["sign", "key", "--private_key", str(signer.private_key), "--signature", str(folder / SIGNATURE), str(folder)]
    done = subprocess.run([str(command), *signing],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = checked(sandbox, folder, signer)
    assert (result.status, result.signer_fingerprint) == ("pass", signer.fingerprint), codes(result)


@pytest.mark.parametrize(("algorithm", "shard_size"), [("blake2", 0), ("blake3", 0), ("sha256", 1000)])
def test_other_hashes_and_shards_are_checked_as_model_signing_made_them(
    sandbox: Sandbox, tmp_path: Path, algorithm: Algorithm, shard_size: int
) -> None:
    folder = tmp_path / "model"
    shutil.copytree(SAMPLES / "external", folder)
    signer = make_signer(tmp_path / "keys")
    sign(folder, signer, algorithm, shard_size)
    signed = checked(sandbox, folder, signer)
    assert signed.status == "pass", [finding.message for finding in signed.findings]
    weights = bytearray((folder / "weights.bin").read_bytes())
    weights[5000] ^= 1  # in the sixth shard of 1000 bytes
    (folder / "weights.bin").write_bytes(bytes(weights))
    changed = checked(sandbox, folder, signer)
    assert changed.status == "fail"
    assert [finding.field_path for finding in changed.findings] == ["weights.bin"]
    if shard_size:
        assert "weights.bin:5000:6000" in changed.findings[0].message


def test_without_the_signing_extra_the_stage_is_incomplete_naming_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The stage's function itself (no worker needed), where model-signing cannot be imported."""
    for module in ("model_signing", "model_signing._signing", "model_signing._signing.sign_sigstore_pb"):
        monkeypatch.setitem(sys.modules, module, None)
    job = WorkerJob("signature", 1 << 30, 10, 10, directory=str(tmp_path), folder_files=((SIGNATURE, SIGNATURE),))
    result = signature_stage(job, confined_descriptor)
    assert result.status == "incomplete" and "`signing` extra" in result.reason
    assert verdict([result]) == "incomplete"


def test_a_signature_that_leaves_the_model_out_fails(sandbox: Sandbox, tmp_path: Path) -> None:
    """Signed by a trusted key, its `ignore_paths` naming the model file: the model's bytes would go unchecked."""
    folder = tmp_path / "model"
    shutil.copytree(SAMPLES / "external", folder)
    signer = make_signer(tmp_path / "keys")
    sign(folder, signer, ignore=("model.onnx",))
    result = checked(sandbox, folder, signer)
    assert (result.status, codes(result)) == ("fail", [("unsigned-file", "model.onnx")])
