"""Model folders signed as their authors sign them: model-signing's own API, an EC P-256 key made with cryptography.

`signed_model_folder(root)` copies the bundled external-data sample (a model
file, `weights.bin`, `more/bias.bin`) into `root/model`, makes a signer's key
pair (`Signer`: its private key's PEM file, its public key's PEM, and the
SHA-256 of that key's SubjectPublicKeyInfo, DER) and writes `model.sig` the way
`model_signing sign key --private_key KEY` does (`signing.Config().use_elliptic_key_signer`,
git's files and the signature itself ignored). `certificate_signer` makes a CA
and a leaf certificate for `model_signing sign certificate`. Made by the test that
uses them, never committed.
"""

from __future__ import annotations

import datetime
import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from support.service_harness import SAMPLES

SIGNATURE = "model.sig"
SAMPLE_FILES = ("model.onnx", "weights.bin", "more/bias.bin")  # the sample's files, as the signature lists them


@dataclass(frozen=True, slots=True)
class Signer:
    private_key: Path  # PEM, unencrypted
    public_key: Path  # PEM, SubjectPublicKeyInfo
    fingerprint: str  # SHA-256 (hex) of the public key's SubjectPublicKeyInfo, DER
    certificate: Path | None = None  # the leaf certificate (a certificate signer)
    ca_certificate: Path | None = None  # the CA that issued it: what a verifier trusts


def make_signer(folder: Path, name: str = "author") -> Signer:
    """A fresh EC P-256 key pair, written under `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    private = folder / f"{name}.key"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    public = folder / f"{name}.pub"
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    der = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return Signer(private, public, hashlib.sha256(der).hexdigest())


def certificate_signer(folder: Path) -> Signer:
    """A signer whose key a CA certified (for signing: digital signature, code signing); the CA's certificate beside."""
    signer = make_signer(folder, "leaf")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30)).add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = serialization.load_pem_private_key(signer.private_key.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    leaf = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "model author")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=7))
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    leaf_path, ca_path = folder / "leaf.crt", folder / "ca.crt"
    leaf_path.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return Signer(signer.private_key, signer.public_key, signer.fingerprint, leaf_path, ca_path)


Algorithm = Literal["sha256", "blake2", "blake3"]  # model-signing's hashes


def sign(folder: Path, signer: Signer, algorithm: Algorithm = "sha256", shard_size: int = 0, ignore: tuple[str, ...] = ()) -> Path:
    """Sign `folder` as `model_signing sign key` (or `sign certificate`) does, its files hashed whole with
    `algorithm` (model-signing's default: sha256), or in shards of `shard_size` bytes, the paths `ignore` left out
    (`--ignore-paths`); its model.sig."""
    from model_signing import hashing, signing

    signature = folder / SIGNATURE
    hashed = hashing.Config().set_ignored_paths(paths=[SIGNATURE, *ignore], ignore_git_paths=True)  # type: ignore[no-untyped-call]
    if shard_size:
        hashed.use_shard_serialization(hashing_algorithm=algorithm, shard_size=shard_size, ignore_paths=[folder / SIGNATURE])
    elif algorithm != "sha256":
        hashed.use_file_serialization(hashing_algorithm=algorithm, ignore_paths=[folder / SIGNATURE])
    config = signing.Config().set_hashing_config(hashed)  # type: ignore[no-untyped-call]
    if signer.certificate is not None:
        assert signer.ca_certificate is not None
        config.use_certificate_signer(
            private_key=signer.private_key, signing_certificate=signer.certificate, certificate_chain=[signer.ca_certificate]
        )
    else:
        config.use_elliptic_key_signer(private_key=signer.private_key)
    config.sign(folder, signature)
    return signature


def signed_model_folder(root: Path, signer: Signer | None = None) -> tuple[Path, Signer]:
    """The bundled external-data sample, copied to `root/model` and signed (by a new signer unless given one)."""
    folder = root / "model"
    shutil.copytree(SAMPLES / "external", folder)
    signer = signer or make_signer(root / "keys")
    sign(folder, signer)
    return folder, signer
