"""`onnx-import check --attest FILE --signing-key KEY` and `onnx-import verify`,
run as a user runs them (the console script): a model folder checked and
signed verifies (exit 0) with the public key alone, its subjects the
`sha256sum` of its files; it is refused (exit 1, saying what failed) with one
byte of an external file changed, a file missing, the wrong key, a subject
that climbs out of the folder, and for a model that failed its checks; both
key kinds (ECDSA P-256, Ed25519) sign; `--attest` without a key is a usage
error."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.attestations import key_pair
from support.service_harness import SAMPLES
from support.small_models import wrong_output_type

from service.attestation.attester import attester_for
from service.attestation.statement import Subject
from service.checks.outcome import StageResult
from service.settings import load_settings

COMMAND = Path(sys.executable).with_name("onnx-import")


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(COMMAND), *map(str, args)], capture_output=True, text=True, timeout=300)


def statement_of(bundle: Path) -> dict[str, Any]:
    statement: dict[str, Any] = json.loads(base64.b64decode(json.loads(bundle.read_bytes())["dsseEnvelope"]["payload"]))
    return statement


@pytest.fixture(scope="module", params=["p256", "ed25519"])
def signed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    """The samples' model with external data (one file in a subfolder), checked and signed: (folder, attestation, key, public key)."""
    base = tmp_path_factory.mktemp(f"attested-{request.param}")
    folder = base / "model"
    shutil.copytree(SAMPLES / "external", folder)
    private, public, _ = key_pair(base, request.param)
    attestation = base / "model.attestation.json"
    done = run("check", folder / "model.onnx", "--checks", "schema,security,shape", "--attest", attestation, "--signing-key", private)
    assert done.returncode == 0, done.stderr
    return folder, attestation, private, public


def test_a_checked_folder_verifies_and_its_subjects_are_its_files(signed: tuple[Path, Path, Path, Path]) -> None:
    folder, attestation, _, public = signed
    statement = statement_of(attestation)
    files = sorted(path for path in folder.rglob("*") if path.is_file())
    assert {subject["name"]: subject["digest"]["sha256"] for subject in statement["subject"]} == {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest() for path in files
    }
    assert statement["predicate"]["verificationResult"] == "PASSED"
    assert statement["predicate"]["resourceUri"] == (folder / "model.onnx").resolve().as_uri()
    for target in (folder, folder / "model.onnx"):  # the folder, or its model file
        done = run("verify", target, "--attestation", attestation, "--public-key", public)
        assert done.returncode == 0, done.stderr
        assert "PASSED" in done.stdout and "more/bias.bin" in done.stdout


def test_a_changed_byte_a_missing_file_and_a_wrong_key_are_refused(signed: tuple[Path, Path, Path, Path], tmp_path: Path) -> None:
    folder, attestation, _, public = signed
    changed = tmp_path / "changed"
    shutil.copytree(folder, changed)
    data = bytearray((changed / "more" / "bias.bin").read_bytes())
    data[3] ^= 1
    (changed / "more" / "bias.bin").write_bytes(bytes(data))
    done = run("verify", changed, "--attestation", attestation, "--public-key", public)
    assert done.returncode == 1 and "changed file: more/bias.bin" in done.stderr, done.stderr
    (changed / "weights.bin").unlink()
    done = run("verify", changed, "--attestation", attestation, "--public-key", public)
    assert done.returncode == 1 and "missing file: weights.bin" in done.stderr, done.stderr
    _, other, _ = key_pair(tmp_path, "ed25519")
    done = run("verify", folder, "--attestation", attestation, "--public-key", other)
    assert done.returncode == 1 and "wrong key" in done.stderr, done.stderr
    done = run("verify", folder, "--attestation", attestation, "--public-key", other, "--public-key", public)  # rotation: any key
    assert done.returncode == 0, done.stderr


def test_a_failed_check_is_attested_failed_and_refused(tmp_path: Path) -> None:
    model = tmp_path / "wrong.onnx"
    model.write_bytes(wrong_output_type())
    private, public, _ = key_pair(tmp_path, "p256")
    attestation = tmp_path / "wrong.attestation.json"
    done = run("check", model, "--attest", attestation, "--signing-key", private)
    assert done.returncode == 1, done.stderr
    predicate = statement_of(attestation)["predicate"]
    assert predicate["verificationResult"] == "FAILED" and "ONNX_IMPORT_STAGE_SHAPE_FAIL" in predicate["verifiedLevels"]
    done = run("verify", tmp_path, "--attestation", attestation, "--public-key", public)
    assert done.returncode == 1 and "the attested result is FAILED" in done.stderr, done.stderr


def test_a_subject_outside_the_folder_is_never_opened(tmp_path: Path) -> None:
    private, public, _ = key_pair(tmp_path, "ed25519")
    (tmp_path / "secret").write_bytes(b"x")
    signer = attester_for(private, None, "test", load_settings([], environ={}))
    sha = hashlib.sha256(b"x").hexdigest()
    for name in ("../secret", "/etc/hostname"):
        bundle = signer.attest([Subject(name, sha, model=True)], [StageResult("schema", "pass")], "/models/x")
        (tmp_path / "a.json").write_bytes(bundle)
        (tmp_path / "model").mkdir(exist_ok=True)
        done = run("verify", tmp_path / "model", "--attestation", tmp_path / "a.json", "--public-key", public)
        assert done.returncode == 1 and f"refused subject {name!r}" in done.stderr, done.stderr


def test_attest_needs_its_key_and_one_model(tmp_path: Path) -> None:
    done = run("check", SAMPLES / "add.onnx", "--attest", tmp_path / "a.json")
    assert done.returncode == 64 and "--attest and --signing-key go together" in done.stderr
    private, _, _ = key_pair(tmp_path, "p256")
    done = run("check", SAMPLES / "add.onnx", SAMPLES / "if_subgraph.onnx", "--attest", tmp_path / "a.json", "--signing-key", private)
    assert done.returncode == 64 and "one model" in done.stderr
