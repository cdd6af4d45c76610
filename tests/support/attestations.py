"""Attestations as a deployer reads them, with `cryptography` alone: key pairs and a bundle's Statement.

`key_pair` writes a new private key (ECDSA P-256 or Ed25519, unencrypted
PKCS#8 PEM) and its public key; `statement_checked_by_hand` checks a
bundle's DSSE signature with nothing but `cryptography` and the
pre-authentication encoding written out here (never the service's own
verify code), and returns the Statement; `key_material` is every form the
private key's bytes could be shown in (for the tests that look for them).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

PrivateKey = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey


def key_pair(folder: Path, kind: str) -> tuple[Path, Path, PrivateKey]:
    """A new private key of `kind` (ed25519 or p256) and its public key, as PEM files in `folder`."""
    key: PrivateKey = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{kind}.key", folder / f"{kind}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return private, public, key


def statement_checked_by_hand(bundle: bytes, public: Any) -> dict[str, Any]:
    """The Statement of `bundle`, its DSSE signature checked with `cryptography` alone (InvalidSignature if not)."""
    document = json.loads(bundle)
    assert document["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    envelope = document["dsseEnvelope"]
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    payload = base64.b64decode(envelope["payload"])
    kind = b"application/vnd.in-toto+json"
    pae = b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    if isinstance(public, ec.EllipticCurvePublicKey):
        public.verify(signature, pae, ec.ECDSA(hashes.SHA256()))
    else:
        public.verify(signature, pae)
    statement: dict[str, Any] = json.loads(payload)
    return statement


def key_material(key: PrivateKey, pem_file: Path) -> list[bytes]:
    """The forms a leak of the private key would take: its PEM's body lines, and its private value raw, in hex and base64."""
    if isinstance(key, ed25519.Ed25519PrivateKey):
        raw = key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    else:
        raw = key.private_numbers().private_value.to_bytes(32, "big")
    body = [line for line in pem_file.read_bytes().splitlines() if line and not line.startswith(b"-----")]
    return [*body, raw, raw.hex().encode(), base64.b64encode(raw)]
