"""A Statement signed into a Sigstore bundle, and a bundle's signature checked: `signed_bundle`, `verified_statement`.

The bundle is model-signing's own shape for a key-signed model
(`model_signing._signing.sign_ec_key.Signer`): `sigstore-models`' `Bundle`
(media type `application/vnd.dev.sigstore.bundle.v0.3+json`) holding a DSSE
`Envelope` (payload type `application/vnd.in-toto+json`) with one signature
over model-signing's DSSE pre-authentication encoding (`pae`) of the
payload, and a `publicKey.hint` naming the key (here its fingerprint,
`service.attestation.signing_keys.fingerprint`). model-signing's signer reads its key
from a path each time and takes EC keys only; this glue signs with the key
read once (`SigningKey`), ECDSA P-256 (SHA-256) or Ed25519, into the same types.

`carried_statement` reads the Statement of a bundle the service made (its
store's: a recheck names the model as the import did).
`verified_statement` is the reverse of signing, for `onnx-import verify`: the bundle's
media type and payload type, a signature one of the given public keys made,
then the Statement's type and predicate type; `BundleRefused` says which
failed.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from service.attestation.statement import PREDICATE_TYPE, STATEMENT_TYPE

if TYPE_CHECKING:  # the signing extra's libraries load when a bundle is made or read, never at import
    from service.attestation.signing_keys import PublicKey, SigningKey

BUNDLE_MEDIA_TYPE: Final = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE: Final = "application/vnd.in-toto+json"


class BundleRefused(ValueError):
    """The bundle is not one this key set verifies: its message says why."""


def signed_bundle(statement: bytes, key: SigningKey) -> bytes:
    """The bundle's JSON: `statement` (a Statement's JSON) in a DSSE envelope signed by `key`."""
    from model_signing._signing.sign_sigstore_pb import pae
    from sigstore_models import intoto
    from sigstore_models.bundle import v1 as bundle_v1
    from sigstore_models.common import v1 as common_v1

    signature = intoto.Signature(sig=base64.b64encode(key.sign(pae(statement))), keyid="")  # its bytes fields take base64
    envelope = intoto.Envelope(payload=base64.b64encode(statement), payload_type=PAYLOAD_TYPE, signatures=[signature])
    bundle = bundle_v1.Bundle(
        media_type=BUNDLE_MEDIA_TYPE,
        verification_material=bundle_v1.VerificationMaterial(
            public_key=common_v1.PublicKeyIdentifier(hint=key.fingerprint), tlog_entries=[]
        ),
        dsse_envelope=envelope,
    )
    return bundle.to_json().encode()


def carried_statement(document: bytes) -> dict[str, Any]:
    """The Statement a bundle this service made carries, its signature not checked (the service's own, from its
    store: a recheck names the model as before); {} for anything else."""
    try:
        envelope = json.loads(document)["dsseEnvelope"]
        statement = json.loads(base64.b64decode(envelope["payload"]))
    except (ValueError, KeyError, TypeError):
        return {}
    return statement if isinstance(statement, dict) else {}


def verified_statement(document: bytes, keys: Sequence[PublicKey]) -> tuple[dict[str, Any], str]:
    """The Statement a bundle carries, once one of `keys` is found to have signed it, and that key's fingerprint."""
    from model_signing._signing.sign_sigstore_pb import pae
    from pydantic import ValidationError
    from sigstore_models.bundle import v1 as bundle_v1

    from service.attestation.signing_keys import fingerprint, verifies

    try:
        bundle = bundle_v1.Bundle.from_json(document)
    except (ValidationError, ValueError) as error:
        raise BundleRefused(f"not a Sigstore bundle: {str(error).splitlines()[0]}") from None
    if bundle.media_type != BUNDLE_MEDIA_TYPE:
        raise BundleRefused(f"the bundle's media type is {bundle.media_type}, not {BUNDLE_MEDIA_TYPE}")
    envelope = bundle.dsse_envelope
    if envelope is None or not envelope.signatures:
        raise BundleRefused("the bundle holds no signed DSSE envelope")
    if envelope.payload_type != PAYLOAD_TYPE:
        raise BundleRefused(f"the envelope's payload type is {envelope.payload_type}, not {PAYLOAD_TYPE}")
    message = pae(envelope.payload)
    signer = next(
        (key for key in keys for signature in envelope.signatures if verifies(key, signature.sig, message)),
        None,
    )
    if signer is None:
        hint = bundle.verification_material.public_key.hint if bundle.verification_material.public_key else None
        given = ", ".join(fingerprint(key) for key in keys)
        raise BundleRefused(f"wrong key: no public key given ({given}) verifies the signature (the bundle names key {hint or 'none'})")
    try:
        statement = json.loads(envelope.payload)
    except ValueError:
        raise BundleRefused("the signed payload is not JSON") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise BundleRefused(f"the signed payload is not an in-toto Statement ({STATEMENT_TYPE})")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise BundleRefused(f"the Statement's predicate is {statement.get('predicateType')!r}, not {PREDICATE_TYPE}")
    return statement, fingerprint(signer)
