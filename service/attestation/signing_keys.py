"""Keys: attestations', and the trusted signers': `SigningKey`, `public_keys_in`, `fingerprint`, `trusted_signer_fingerprints`.

A signing key is a PEM private key, ECDSA on P-256 or Ed25519 (PKCS#8 or
the traditional EC form; unencrypted: it comes from a file or a mounted
Kubernetes secret, which is its protection), read once from its file
(`SigningKey.from_file`) and held in that object only: it is never logged,
shown or put in an exception's text (its `repr` names its fingerprint).
Public keys are PEM `PUBLIC KEY` blocks, one file holding one or several
(rotation: the keys an older attestation was signed with keep verifying).
A key's fingerprint is the SHA-256 of its SubjectPublicKeyInfo (DER), in
hex: what `/readyz` shows, what the bundle's `publicKey.hint` carries, and
`openssl pkey -pubin -outform DER | sha256sum` prints. The trusted signers
(the PEM public keys and CA certificates the `signature` stage verifies model
signatures with) are named by the same fingerprint, a certificate by its key's.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from service.checks.stages.model_signature import trusted_pems

PublicKey = ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey
PEM_PUBLIC_KEY: Final = re.compile(rb"-----BEGIN PUBLIC KEY-----.+?-----END PUBLIC KEY-----", re.DOTALL)
SUPPORTED: Final = "an ECDSA P-256 or Ed25519 key"


class KeyProblem(ValueError):
    """A key file that cannot serve: its message names the file, never the key's bytes."""


def fingerprint(key: PublicKeyTypes) -> str:
    """SHA-256 of the key's SubjectPublicKeyInfo (DER), hex."""
    return hashlib.sha256(key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)).hexdigest()


def trusted_signer_fingerprints(text: str) -> dict[str, list[str]]:
    """The fingerprints of `--trusted-signers`' PEM text (as the signature stage reads its blocks): its public keys'
    (`keys`) and its certificates' keys (`certificates`), each sorted, once each; a block that does not load, which
    trusts nothing, is left out."""
    keys, certificates = trusted_pems(text)
    found: dict[str, set[str]] = {"keys": set(), "certificates": set()}
    for pem in keys:
        try:
            found["keys"].add(fingerprint(serialization.load_pem_public_key(pem)))
        except (ValueError, UnsupportedAlgorithm):
            continue
    for pem in certificates:
        try:
            found["certificates"].add(fingerprint(x509.load_pem_x509_certificate(pem).public_key()))
        except (ValueError, UnsupportedAlgorithm):
            continue
    return {kind: sorted(prints) for kind, prints in found.items()}


def public_pem(key: PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _kind(key: object) -> str:
    """`a key of kind RSA`: how a refusal names a key's kind (never its bytes)."""
    return f"a key of kind {type(key).__name__.removeprefix('_').removesuffix('PrivateKey').removesuffix('PublicKey')}"


def _supported(key: object, path: Path) -> PublicKey:
    """The key's public half, if it is one of the kinds attestations use; KeyProblem otherwise."""
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        public = key.public_key() if isinstance(key, ec.EllipticCurvePrivateKey) else key
        if isinstance(public.curve, ec.SECP256R1):
            return public
        raise KeyProblem(f"{path}: an ECDSA key on {public.curve.name}, not P-256 ({SUPPORTED} is needed)")
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.public_key()
    if isinstance(key, ed25519.Ed25519PublicKey):
        return key
    raise KeyProblem(f"{path}: {_kind(key)}, not {SUPPORTED}")


class SigningKey:
    """A private key that signs attestations (the caller reads it once)."""

    __slots__ = ("_private", "public", "fingerprint")

    def __init__(self, private: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey, path: Path) -> None:
        self._private = private
        self.public = _supported(private, path)
        self.fingerprint = fingerprint(self.public)

    @classmethod
    def from_file(cls, path: Path) -> SigningKey:
        """The PEM private key in `path`; KeyProblem naming the file (never its bytes) when it cannot sign."""
        try:
            data = path.read_bytes()
        except OSError as error:
            raise KeyProblem(f"{path}: cannot be read ({error.strerror})") from None
        try:
            private = serialization.load_pem_private_key(data, password=None)
        except TypeError:
            raise KeyProblem(f"{path}: an encrypted private key; give it unencrypted (a file or a secret only the service reads)") from None
        except (ValueError, UnsupportedAlgorithm):
            raise KeyProblem(f"{path}: not a PEM private key ({SUPPORTED} is needed)") from None
        finally:
            del data
        if not isinstance(private, ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey):
            raise KeyProblem(f"{path}: {_kind(private)}, not {SUPPORTED}")
        return cls(private, path)

    def sign(self, message: bytes) -> bytes:
        """The signature of `message`: ECDSA with SHA-256 (DER), or Ed25519."""
        if isinstance(self._private, ec.EllipticCurvePrivateKey):
            return self._private.sign(message, ec.ECDSA(hashes.SHA256()))
        return self._private.sign(message)

    def __repr__(self) -> str:
        return f"SigningKey(fingerprint={self.fingerprint})"

    def __reduce__(self) -> tuple[object, ...]:
        raise TypeError("a signing key is never pickled: it stays in the process that read it")


def public_keys_in(path: Path) -> list[PublicKey]:
    """Every PEM public key in `path` (one or several blocks), in order; KeyProblem naming the file when none serves."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise KeyProblem(f"{path}: cannot be read ({error.strerror})") from None
    blocks = PEM_PUBLIC_KEY.findall(data)
    if not blocks:
        raise KeyProblem(f"{path}: holds no PEM public key (-----BEGIN PUBLIC KEY-----)")
    keys = []
    for number, block in enumerate(blocks, 1):
        try:
            loaded = serialization.load_pem_public_key(block)
        except (ValueError, UnsupportedAlgorithm):
            raise KeyProblem(f"{path}: its public key {number} cannot be read") from None
        keys.append(_supported(loaded, path))
    return keys


def verifies(key: PublicKey, signature: bytes, message: bytes) -> bool:
    """Whether `signature` is `key`'s over `message` (ECDSA with SHA-256, or Ed25519)."""
    from cryptography.exceptions import InvalidSignature

    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(signature, message, ec.ECDSA(hashes.SHA256()))
        else:
            key.verify(signature, message)
    except InvalidSignature:
        return False
    return True
