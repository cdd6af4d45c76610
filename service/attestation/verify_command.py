"""`onnx-import verify PATH --attestation FILE --public-key FILE...`: an attestation checked where the model is deployed.

`onnx-import verify oci://REGISTRY/REPOSITORY@DIGEST --public-key FILE...`
does the same for an OCI artifact and its verdict referrer, pulled from the
registry: `verify` checks the flags and reads the keys, then hands the
artifact to the verifier the command gives it (`service.registry.oci_verify`;
this package never imports the registry's side);
its flags `--credentials`, `--plain-http`, `--output`, `--max-upload-total`
and `--max-external-files` go with `oci://` only, `--attestation` with a PATH only).

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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from service.attestation.signing_keys import PublicKey

EXIT_VERIFIED, EXIT_REFUSED, EXIT_USAGE = 0, 1, 64
OCI_SCHEME = "oci://"
OCI_ONLY = ("credentials", "plain_http", "output", "max_upload_total", "max_external_files")
EXTRA_MISSING = "onnx-import verify needs the signing extra (model-signing, sigstore-models): pip install 'onnx-import-service[signing]'"


def add_parser(commands: Any) -> None:
    """`verify` among the `onnx-import` command's subcommands (`commands`: argparse's subparsers)."""
    verify: argparse.ArgumentParser = commands.add_parser("verify", help="verify a model's attestation against its files and keys")
    verify.add_argument("path", metavar="PATH", help=f"the model's folder (or its model file), or {OCI_SCHEME}REGISTRY/REPOSITORY@DIGEST")
    verify.add_argument("--attestation", type=Path, help="the Sigstore bundle (GET /models/{id}/attestation): with a PATH")
    verify.add_argument("--public-key", type=Path, action="append", required=True, dest="public_keys",
                        help="a PEM file of the service's public key(s) (repeatable)")  # fmt: skip
    oci = verify.add_argument_group(f"{OCI_SCHEME} artifacts")
    oci.add_argument("--credentials", type=Path, metavar="FILE", help="a Docker config.json (or a bearer token file) for the "
                     "registry (default: $DOCKER_CONFIG/config.json, else ~/.docker/config.json, where there is one)")  # fmt: skip
    oci.add_argument("--plain-http", action="store_true", help="speak HTTP to the registry, not HTTPS (a registry on the loopback)")
    oci.add_argument("--output", type=Path, metavar="DIR", help="write the verified files there, as the artifact lays them out "
                     "(DIR new or empty; nothing is written unless everything verifies)")  # fmt: skip
    oci.add_argument("--max-upload-total", metavar="SIZE", help="bytes the artifact's layers may hold in all "
                     "(default: the service's default)")  # fmt: skip
    oci.add_argument("--max-external-files", metavar="N", help="files besides its models the artifact may hold "
                     "(default: the service's default)")  # fmt: skip


def public_keys(paths: list[Path]) -> list[PublicKey]:
    """Every public key of the `--public-key` files, in order (KeyProblem naming a file that holds none)."""
    from service.attestation.signing_keys import public_keys_in

    keys: list[PublicKey] = []
    for path in paths:
        keys += public_keys_in(path)
    return keys


def result_findings(statement: dict[str, Any]) -> list[str]:
    """The attested result, where it is not PASSED."""
    predicate = statement.get("predicate") if isinstance(statement.get("predicate"), dict) else {}
    assert isinstance(predicate, dict)
    result = predicate.get("verificationResult")
    if result == "PASSED":
        return []
    levels = ", ".join(str(level) for level in predicate.get("verifiedLevels", []) if isinstance(level, str))
    return [f"the attested result is {result} ({levels or 'no stage'})"]


def usage_problem(args: argparse.Namespace) -> str:
    """What makes the parsed flags no verify command ("" for none): a PATH without --attestation, a flag of the other form."""
    oci = args.path.startswith(OCI_SCHEME)
    misused = ["--attestation"] if oci and args.attestation is not None else []
    misused += [f"--{name.replace('_', '-')}" for name in OCI_ONLY if not oci and getattr(args, name)]
    if misused:
        return f"{', '.join(misused)} cannot go with {'an oci:// artifact' if oci else 'a PATH'}"
    return "a PATH needs --attestation" if not oci and args.attestation is None else ""


def verify(args: argparse.Namespace, verify_artifact: Callable[[argparse.Namespace, list[PublicKey]], int]) -> int:
    """The exit status of `onnx-import verify` (`args` its flags; `verify_artifact` checks an `oci://` artifact)."""
    try:
        from service.attestation.bundle import BundleRefused, verified_statement
        from service.attestation.signing_keys import KeyProblem
    except ImportError:
        print(f"onnx-import: {EXTRA_MISSING}", file=sys.stderr)
        return EXIT_USAGE
    from service.attestation.folder_check import folder_findings

    problem = usage_problem(args)
    if problem:
        print(f"onnx-import verify: {problem}", file=sys.stderr)
        return EXIT_USAGE
    oci = args.path.startswith(OCI_SCHEME)
    try:
        keys = public_keys(args.public_keys)
    except KeyProblem as error:
        print(f"onnx-import: --public-key {error}", file=sys.stderr)
        return EXIT_USAGE
    if oci:
        return verify_artifact(args, keys)
    args.path = Path(args.path)
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
    findings = folder_findings(args.path, statement) + result_findings(statement)
    for finding in findings:
        print(f"onnx-import verify: {finding}", file=sys.stderr)
    if findings:
        return EXIT_REFUSED
    names = ", ".join(str(subject.get("name")) for subject in statement["subject"])
    levels = ", ".join(statement["predicate"].get("verifiedLevels", []))
    print(f"verified: {names}; signed by key {signer}; PASSED ({levels})")
    return EXIT_VERIFIED
