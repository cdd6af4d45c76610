"""Signed verdicts: each check run's verdict as an attestation a deployer can verify offline.

Owns the attestation of a check run: a Sigstore bundle
(`application/vnd.dev.sigstore.bundle.v0.3+json`) holding a DSSE envelope
over an in-toto Statement v1 whose subjects are the model's files (by name
and SHA-256) and whose predicate is a SLSA Verification Summary v1
(docs/attestations.md). Its modules: `signing_keys` (the signing key, read once at
the service's start, and the public keys that verify), `statement` (the
Statement and its predicate), `bundle` (signing a Statement into a bundle,
and checking a bundle's signature), `attester` (what the service and the
check command sign with), `folder_check` (a model folder against a
Statement's subjects) and `verify_command` (`onnx-import verify`).

The libraries of the field do the work: `cryptography` (keys, ECDSA P-256
and Ed25519), the OpenSSF `model-signing` library's DSSE pre-authentication
encoding and the bundle and envelope types of `sigstore-models`, and
`in-toto-attestation`'s Statement (the `signing` extra). Without that extra
the service runs; `--signing-key` then refuses the start naming it
(`attester.load_attester`).

May import: `service.checks` (a run's stages and verdict, the versions of the
code they ran), `service.settings`. Never `service.api`, `service.imports`
or `service.store`: the pipeline hands it the digests and the runs, and
keeps what it returns.
"""
