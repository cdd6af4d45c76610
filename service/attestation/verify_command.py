"""`onnx-import verify PATH --attestation FILE --public-key FILE...`: an attestation checked where the model is deployed.

No service and no network: it reads the public keys (each `--public-key`
file may hold several: the keys of a rotation), checks the bundle's DSSE
signature against them (`service.attestation.bundle.verified_statement`),
hashes the model's files again against the Statement's subjects
(`service.attestation.folder_check`, PATH the model's folder or its model
file) and reads the result. Exit 0: signed by one of the keys, every file as
attested, and the result PASSED; it prints the model's files, the key and
the verified levels. Exit 1: each thing that failed on its own line on
standard error (a changed file, a missing file, a wrong key, a FAILED
result, a bundle that is not one). Exit 64: a usage error (a key file that
holds no key, the signing extra not installed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.attestation.signing_keys import PublicKey

EXIT_VERIFIED, EXIT_REFUSED, EXIT_USAGE = 0, 1, 64
EXTRA_MISSING = "onnx-import verify needs the signing extra (model-signing, sigstore-models): pip install 'onnx-import-service[signing]'"


def add_parser(commands: Any) -> None:
    """`verify` among the `onnx-import` command's subcommands (`commands`: argparse's subparsers)."""
    verify: argparse.ArgumentParser = commands.add_parser("verify", help="verify a model's attestation against its files and keys")
    verify.add_argument("path", type=Path, metavar="PATH", help="the model's folder (or its model file)")
    verify.add_argument("--attestation", type=Path, required=True, help="the Sigstore bundle (GET /models/{id}/attestation)")
    verify.add_argument("--public-key", type=Path, action="append", required=True, dest="public_keys",
                        help="a PEM file of the service's public key(s) (repeatable)")  # fmt: skip


def _keys(paths: list[Path]) -> list[PublicKey]:
    from service.attestation.signing_keys import public_keys_in

    keys: list[PublicKey] = []
    for path in paths:
        keys += public_keys_in(path)
    return keys


def _result_findings(statement: dict[str, Any]) -> list[str]:
    predicate = statement.get("predicate") if isinstance(statement.get("predicate"), dict) else {}
    assert isinstance(predicate, dict)
    result = predicate.get("verificationResult")
    if result == "PASSED":
        return []
    levels = ", ".join(str(level) for level in predicate.get("verifiedLevels", []) if isinstance(level, str))
    return [f"the attested result is {result} ({levels or 'no stage'})"]


def verify(args: argparse.Namespace) -> int:
    try:
        from service.attestation.bundle import BundleRefused, verified_statement
        from service.attestation.signing_keys import KeyProblem
    except ImportError:
        print(f"onnx-import: {EXTRA_MISSING}", file=sys.stderr)
        return EXIT_USAGE
    from service.attestation.folder_check import folder_findings

    try:
        keys = _keys(args.public_keys)
    except KeyProblem as error:
        print(f"onnx-import: --public-key {error}", file=sys.stderr)
        return EXIT_USAGE
    if not args.path.exists():
        print(f"onnx-import verify: missing model: no file or folder {str(args.path)!r}", file=sys.stderr)
        return EXIT_REFUSED
    try:
        document = args.attestation.read_bytes()
    except OSError as error:
        print(f"onnx-import verify: the attestation {str(args.attestation)!r} cannot be read ({error.strerror})", file=sys.stderr)
        return EXIT_REFUSED
    try:
        statement, signer = verified_statement(document, keys)
    except BundleRefused as error:
        print(f"onnx-import verify: {error}", file=sys.stderr)
        return EXIT_REFUSED
    findings = folder_findings(args.path, statement) + _result_findings(statement)
    for finding in findings:
        print(f"onnx-import verify: {finding}", file=sys.stderr)
    if findings:
        return EXIT_REFUSED
    names = ", ".join(str(subject.get("name")) for subject in statement["subject"])
    levels = ", ".join(statement["predicate"].get("verifiedLevels", []))
    print(f"verified: {names}; signed by key {signer}; PASSED ({levels})")
    return EXIT_VERIFIED
