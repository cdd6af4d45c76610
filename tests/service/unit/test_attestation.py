"""The attestation of a check run (service/attestation), at its lowest layer: the
Statement and its predicate from stage results, the bundle signed with either
key kind and read back by nothing but `cryptography` and this test's own DSSE
pre-authentication encoding, the trusted signers its policy names (by their
keys' fingerprints, taken at start), the keys a signing key may be (and how a refused
one is named), a signing key that never shows or pickles itself, and a
plain install (without the `signing` extra) that runs and refuses
`--signing-key` naming the extra."""

from __future__ import annotations

import base64
import hashlib
import json
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from support.attestations import key_pair, statement_checked_by_hand
from support.signed_folders import certificate_signer, make_signer

from service.attestation.attester import Attester, attester_for
from service.attestation.bundle import BundleRefused, verified_statement
from service.attestation.signing_keys import KeyProblem, PublicKey, SigningKey, public_keys_in, public_pem
from service.attestation.statement import TRUSTED_SIGNERS, VERDICT_SETTINGS, Subject
from service.checks.outcome import StageResult
from service.settings import load_settings
from service.settings.kinds import SettingsError

PASSING = [StageResult("schema", "pass"), StageResult("shape", "pass"), StageResult("smoke", "pass", bindings=[{"batch": 1}])]


def attester(tmp_path: Path, kind: str = "p256") -> tuple[Attester, Any]:
    private, _, key = key_pair(tmp_path, kind)
    return attester_for(private, None, "https://checks.example", load_settings([], environ={})), key.public_key()


@pytest.mark.parametrize("kind", ["p256", "ed25519"])
def test_a_passing_run_is_signed_and_reads_back_with_cryptography_alone(tmp_path: Path, kind: str) -> None:
    signer, public = attester(tmp_path, kind)
    subjects = [Subject("model.onnx", "aa" * 32, model=True), Subject("more/bias.bin", "bb" * 32)]
    bundle = signer.attest(subjects, PASSING, "models:/resnet/3")
    statement = statement_checked_by_hand(bundle, public)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["subject"] == [
        {"name": "model.onnx", "digest": {"sha256": "aa" * 32}, "annotations": {"onnx_import.role": "model"}},
        {"name": "more/bias.bin", "digest": {"sha256": "bb" * 32}},
    ]
    assert statement["predicateType"] == "https://slsa.dev/verification_summary/v1"
    predicate = statement["predicate"]
    assert predicate["verifier"]["id"] == "https://checks.example"
    assert set(predicate["verifier"]["version"]) == {"onnx-import-service"}
    assert predicate["timeVerified"].endswith("Z")
    assert predicate["resourceUri"] == "models:/resnet/3"
    assert predicate["verificationResult"] == "PASSED"
    assert predicate["verifiedLevels"] == ["ONNX_IMPORT_STAGE_SCHEMA_PASS", "ONNX_IMPORT_STAGE_SHAPE_PASS", "ONNX_IMPORT_STAGE_SMOKE_PASS"]
    policy = predicate["onnxImportPolicy"]
    canonical = json.dumps(policy, sort_keys=True, separators=(",", ":")).encode()
    assert predicate["policy"]["digest"]["sha256"] == hashlib.sha256(canonical).hexdigest()
    assert set(policy["stages"]) == {"schema", "shape", "smoke"} and policy["stages"]["smoke"]["bindings"] == [{"batch": 1}]
    assert set(policy["versions"]) == {"onnx", "onnxruntime"}
    assert set(policy["settings"]) == {*VERDICT_SETTINGS, TRUSTED_SIGNERS}
    assert policy["settings"][TRUSTED_SIGNERS] == {"keys": [], "certificates": []}  # no --trusted-signers: none trusted
    settings = json.dumps(policy["settings"], sort_keys=True, separators=(",", ":")).encode()
    assert policy["settings_sha256"] == hashlib.sha256(settings).hexdigest()
    assert "inputAttestations" not in predicate  # no signature stage verified one
    assert json.loads(bundle)["verificationMaterial"]["publicKey"]["hint"] == signer.key.fingerprint


def test_the_policy_names_the_trusted_signers_by_their_keys_fingerprints(tmp_path: Path) -> None:
    """--trusted-signers decides the signature stage's verdict: the policy's settings name what it trusts, each public
    key and each CA certificate's key by the SHA-256 of its SubjectPublicKeyInfo (DER: `openssl pkey -pubin -outform
    DER | sha256sum`), a block that does not load left out; the settings' digest differs from an untrusting service's."""
    private, public, _ = key_pair(tmp_path, "p256")
    author, issued = make_signer(tmp_path / "author"), certificate_signer(tmp_path / "ca")
    assert issued.ca_certificate is not None
    trusted = tmp_path / "signers.pem"
    broken = b"-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n"
    trusted.write_bytes(author.public_key.read_bytes() + issued.ca_certificate.read_bytes() + broken + author.public_key.read_bytes())
    ca_key = x509.load_pem_x509_certificate(issued.ca_certificate.read_bytes()).public_key()
    ca_fingerprint = hashlib.sha256(ca_key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo))
    key = serialization.load_pem_public_key(public.read_bytes())
    policies = []
    for flags in (["--trusted-signers", str(trusted)], []):
        signer = attester_for(private, None, "id", load_settings(flags, environ={}))
        bundle = signer.attest([Subject("m.onnx", "cc" * 32, model=True)], PASSING, "/models/x")
        policies.append(statement_checked_by_hand(bundle, key)["predicate"]["onnxImportPolicy"])
    assert policies[0]["settings"][TRUSTED_SIGNERS] == {"keys": [author.fingerprint], "certificates": [ca_fingerprint.hexdigest()]}
    assert policies[1]["settings"][TRUSTED_SIGNERS] == {"keys": [], "certificates": []}
    assert policies[0]["settings_sha256"] != policies[1]["settings_sha256"]


def test_a_trusted_signers_file_replaced_while_the_service_runs_is_the_trust_the_next_attestation_names(tmp_path: Path) -> None:
    """The signature stage reads --trusted-signers again for each check; so does the attestation, or it would name a
    trust its stage did not run under."""
    private, public, _ = key_pair(tmp_path, "p256")
    first, second = make_signer(tmp_path / "first"), make_signer(tmp_path / "second")
    trusted = tmp_path / "signers.pem"
    trusted.write_bytes(first.public_key.read_bytes())
    signer = attester_for(private, None, "id", load_settings(["--trusted-signers", str(trusted)], environ={}))
    key = serialization.load_pem_public_key(public.read_bytes())
    named = []
    for holding in (first, second):
        trusted.write_bytes(holding.public_key.read_bytes())
        bundle = signer.attest([Subject("m.onnx", "cc" * 32, model=True)], PASSING, "/models/x")
        named.append(statement_checked_by_hand(bundle, key)["predicate"]["onnxImportPolicy"]["settings"][TRUSTED_SIGNERS]["keys"])
    assert named == [[first.fingerprint], [second.fingerprint]]


@pytest.mark.parametrize(
    ("results", "levels"),
    [
        ([StageResult("schema", "pass"), StageResult("security", "fail", errors=1)], ["SCHEMA_PASS", "SECURITY_FAIL"]),
        ([StageResult("schema", "pass"), StageResult("smoke", "incomplete", reason="CPU")], ["SCHEMA_PASS", "SMOKE_INCOMPLETE"]),
        ([StageResult("schema", "pass"), StageResult("smoke", "skipped")], ["SCHEMA_PASS", "SMOKE_SKIPPED"]),
        ([], []),
    ],
)
def test_a_failed_or_incomplete_run_is_failed(tmp_path: Path, results: list[StageResult], levels: list[str]) -> None:
    signer, public = attester(tmp_path)
    predicate = statement_checked_by_hand(signer.attest([Subject("m.onnx", "cc" * 32, model=True)], results, "/models/x"), public)[
        "predicate"
    ]
    assert predicate["verificationResult"] == "FAILED"
    assert predicate["verifiedLevels"] == [f"ONNX_IMPORT_STAGE_{level}" for level in levels]


def test_the_models_own_signature_is_an_input_attestation(tmp_path: Path) -> None:
    signer, public = attester(tmp_path)
    signed = StageResult("signature", "pass", signature_sha256="dd" * 32, signer_fingerprint="ee" * 32)  # as the signature stage gives it
    predicate = statement_checked_by_hand(signer.attest([Subject("m.onnx", "cc" * 32, model=True)], [signed], "/models/x"), public)[
        "predicate"
    ]
    assert predicate["inputAttestations"] == [{"uri": "model.sig", "digest": {"sha256": "dd" * 32}}]
    assert predicate["onnxImportPolicy"]["stages"]["signature"]["signer_fingerprint"] == "ee" * 32


def test_verifying_takes_any_key_of_a_rotation_and_refuses_another(tmp_path: Path) -> None:
    signer, public = attester(tmp_path)
    older = ed25519.Ed25519PrivateKey.generate().public_key()
    bundle = signer.attest([Subject("m.onnx", "cc" * 32, model=True)], PASSING, "/models/x")
    statement, used = verified_statement(bundle, [older, public])
    assert used == signer.key.fingerprint and statement["predicate"]["verificationResult"] == "PASSED"
    with pytest.raises(BundleRefused, match="wrong key"):
        verified_statement(bundle, [older])
    tampered = json.loads(bundle)
    payload = base64.b64decode(tampered["dsseEnvelope"]["payload"]).replace(b"PASSED", b"PASSES")
    tampered["dsseEnvelope"]["payload"] = base64.b64encode(payload).decode()
    with pytest.raises(BundleRefused, match="wrong key"):
        verified_statement(json.dumps(tampered).encode(), [public])
    with pytest.raises(BundleRefused, match="not a Sigstore bundle"):
        verified_statement(b"{}", [public])


def test_public_key_files_hold_one_key_or_several(tmp_path: Path) -> None:
    keys: list[PublicKey] = [ec.generate_private_key(ec.SECP256R1()).public_key(), ed25519.Ed25519PrivateKey.generate().public_key()]
    pems = [public_pem(key) for key in keys]
    (tmp_path / "keys.pem").write_bytes(b"# the keys of 2026\n" + b"".join(pems))
    assert [public_pem(key) for key in public_keys_in(tmp_path / "keys.pem")] == pems
    (tmp_path / "none.pem").write_text("nothing here\n")
    with pytest.raises(KeyProblem, match="no PEM public key"):
        public_keys_in(tmp_path / "none.pem")


def test_a_signing_key_of_another_kind_is_refused_naming_the_file_never_the_key(tmp_path: Path) -> None:
    refused: dict[str, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey] = {
        "rsa.pem": rsa.generate_private_key(65537, 2048),
        "p384.pem": ec.generate_private_key(ec.SECP384R1()),
    }
    for name, key in refused.items():
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
        (tmp_path / name).write_bytes(pem)
        with pytest.raises(SettingsError) as raised:
            attester_for(tmp_path / name, None, "id", load_settings([], environ={}))
        assert name in str(raised.value) and "P-256 or Ed25519" in str(raised.value)
        assert pem.decode().splitlines()[1] not in str(raised.value)
    (tmp_path / "public.pem").write_bytes(public_pem(ed25519.Ed25519PrivateKey.generate().public_key()))
    with pytest.raises(SettingsError, match="not a PEM private key"):
        attester_for(tmp_path / "public.pem", None, "id", load_settings([], environ={}))


def test_a_signing_key_never_shows_or_pickles_itself(tmp_path: Path) -> None:
    private, _, key = key_pair(tmp_path, "ed25519")
    assert isinstance(key, ed25519.Ed25519PrivateKey)
    signing = SigningKey.from_file(private)
    raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    shown = repr(signing) + str(signing)
    assert signing.fingerprint in shown and raw.hex() not in shown and "PRIVATE" not in shown
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(signing)
    with pytest.raises(InvalidSignature):  # what it signs is its own: another message does not verify
        key.public_key().verify(signing.sign(b"a"), b"b")


WITHOUT_THE_EXTRA = """
import sys

class WithoutTheSigningExtra:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"cryptography", "model_signing", "sigstore_models", "in_toto_attestation", "sigstore"}:
            raise ImportError(f"{name} is not installed")

sys.meta_path.insert(0, WithoutTheSigningExtra())
import service.app, service.checks.command, service.imports.pipeline  # a plain install imports the service whole
from service.attestation.attester import load_attester
from service.settings import load_settings
from service.settings.kinds import SettingsError

assert load_attester(load_settings([], environ={})) is None
try:
    load_attester(load_settings(["--signing-key", sys.argv[1]], environ={}))
except SettingsError as error:
    print(error)
"""


def test_a_plain_install_runs_and_says_signing_needs_the_extra(tmp_path: Path) -> None:
    """A fresh interpreter, the signing extra's packages made missing: the service imports whole, and
    `--signing-key` is refused naming the extra."""
    private, _, _ = key_pair(tmp_path, "p256")
    done = subprocess.run([sys.executable, "-c", WITHOUT_THE_EXTRA, str(private)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "--signing-key needs the signing extra" in done.stdout and "onnx-import-service[signing]" in done.stdout
