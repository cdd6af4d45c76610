"""The `onnx-import` command: the check stages on local models, without a server.

    onnx-import check PATH... [--external-data-dir DIR] [--checks schema,shape,...]
                              [--dim NAME:VALUE ...] [--format json|sarif|junit] [--output FILE]
                              [--max-loop-trips N] [--smoke-cpu-seconds S] [--smoke-second-dim N]
                              [--max-tensor-bytes SIZE] [--trusted-signers FILE] [--require-signature]
                              [--attest FILE --signing-key KEY]
    onnx-import verify PATH --attestation FILE --public-key FILE...
    onnx-import verify oci://REGISTRY/REPOSITORY@DIGEST --public-key FILE... [--credentials FILE] [--output DIR]

Each PATH is a model file or a folder (every `.onnx` file under it, its
external data found beside it). Every model runs through the same sandboxed
workers as the service (`service.sandbox`), one sandbox for them all: the
import's worker (the importer, `schema`, `security`) and, beside it, a check
worker (`shape`, `runtime`, `smoke`), each with the service's default limits
(`--worker-memory`, `--worker-cpu-seconds`, `--worker-timeout` change them;
the check worker's memory is sized to the model as the service sizes it,
its external files listed by a worker first)
and bounds (`--max-loop-trips`, the security check's bound on a Loop's
constant trip count; `--smoke-cpu-seconds`, each smoke run's CPU budget;
`--smoke-second-dim`, the value the second smoke run gives every dimension
left unbound, 1 for one run only; `--max-tensor-bytes`, the largest tensor
in external data, the specification's 2^31-1 bytes unless raised). The
`signature` stage (asked by `--checks`) verifies the model folder's `model.sig`
against `--trusted-signers` in a signature worker beside them
(`service.checks.signature_worker`), `--require-signature` failing a folder without one.
One report for all (`service.checks.report`): JSON (one model file named:
its object; else a list), SARIF (`service.checks.sarif`: one run, an
artifact per model, named by its path relative to the working directory) or
JUnit (`service.checks.junit`); a refused model is a result there. Exit
status: the worst model's, 0 pass, 1 fail, 2 refused (the importer refused
the file: its typed error is the result) or incomplete (a stage did not
finish), 64 a usage error. With `--attest FILE --signing-key KEY` (one
model), the run's attestation is written to FILE, signed with KEY
(`service.checks.local_attestation`); `verify` checks one where the model
is deployed (`service.attestation.verify_command`), and `verify oci://...` an
OCI artifact and its verdict referrer (`service.registry.oci_verify`).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from importer.limits import MAX_TENSOR_BYTES
from service.attestation.verify_command import add_parser as add_verify_parser
from service.attestation.verify_command import verify
from service.checks.junit import junit_log
from service.checks.outcome import (
    DEFAULT_CHECKS,
    IN_CHECK_WORKER,
    STAGES,
    ChecksError,
    Finding,
    StageResult,
    incomplete,
    parse_checks,
    parse_dims,
)
from service.checks.report import ModelChecks, Refusal, exit_status
from service.checks.sarif import artifact_uri, sarif_log
from service.settings.kinds import SettingsError

if TYPE_CHECKING:
    from service.attestation.signing_keys import PublicKey
    from service.sandbox.supervisor import Sandbox

EXIT_USAGE = 64


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnx-import", description="Check an ONNX model in the service's sandboxed workers.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="run the check stages on a model file")
    check.add_argument("paths", nargs="+", type=Path, metavar="PATH", help="a .onnx file, or a folder: every .onnx file under it")
    check.add_argument("--external-data-dir", type=Path, help="where its external data files are (default: beside the model)")
    check.add_argument("--checks", action="append", help=f"stages, comma-separated or repeated, among {', '.join(STAGES)} "
                       f"(default {DEFAULT_CHECKS})")  # fmt: skip
    check.add_argument("--dim", action="append", default=[], help="NAME:VALUE, a symbolic dimension's value for the smoke run (repeatable)")
    check.add_argument("--format", choices=("json", "sarif", "junit"), default="json")
    check.add_argument("--output", type=Path, help="write the report here (default: standard output)")
    check.add_argument("--worker-memory", default="2GiB", help="memory cap of each worker (default 2GiB)")
    check.add_argument(
        "--worker-memory-per-model-byte",
        default="2.5",
        help="the check worker's cap per byte of the model and its external data, if above --worker-memory (default 2.5)",
    )
    check.add_argument(
        "--worker-memory-per-mapped-byte",
        default="1.5",
        help="the same per byte of external data bound for onnxruntime to map, where the workers can bind files (default 1.5)",
    )
    check.add_argument(
        "--worker-memory-share",
        default="50%",
        help="share of the machine's memory (or of this process's cgroup limit) a sized check worker may take (default 50%%)",
    )
    check.add_argument("--worker-cpu-seconds", default="60", help="CPU-time cap of each worker (default 60)")
    check.add_argument("--worker-timeout", default="120", help="wall-clock deadline of each worker, in seconds (default 120)")
    check.add_argument("--max-loop-trips", default="1000000", help="the security check's bound on a Loop's constant trip count "
                       "(default 1000000)")  # fmt: skip
    check.add_argument("--max-tensor-bytes", default=str(MAX_TENSOR_BYTES), help="largest tensor in external data (4GiB, say): "
                       "from 2^31-1, the default, up to 2^60; a tensor in the model file keeps 2^31-1")  # fmt: skip
    check.add_argument("--smoke-cpu-seconds", default="3", help="CPU-seconds each smoke run may use (default 3)")
    check.add_argument("--trusted-signers", help="PEM file of the public keys and CA certificates the signature check trusts")
    check.add_argument("--require-signature", action="store_true", help="the signature check fails a model folder without a model.sig")
    check.add_argument("--smoke-second-dim", default="2", help="the second smoke run's value of every dimension left unbound, "
                       "after the run at 1 (default 2; 1: one run only)")  # fmt: skip
    check.add_argument("--attest", type=Path, metavar="FILE", help="write the run's signed attestation (a Sigstore bundle) here: "
                       "one model, with --signing-key")  # fmt: skip
    check.add_argument("--signing-key", type=Path, metavar="KEY", help="PEM private key (ECDSA P-256 or Ed25519) --attest signs with")
    add_verify_parser(commands)
    return parser


def _findings(catalog: Path) -> list[Finding]:
    """The import worker's findings, from the catalogue it sent."""
    if not catalog.exists():
        return []
    connection = sqlite3.connect(f"{catalog.as_uri()}?mode=ro", uri=True)
    try:
        cursor = connection.execute("SELECT * FROM diagnostics ORDER BY seq")
        names = [column[0] for column in cursor.description]
        return [Finding.from_dict(dict(zip(names, row, strict=True))) for row in cursor]
    finally:
        connection.close()


def models_of(paths: Sequence[Path]) -> list[Path]:
    """The model files `paths` name: a file as it is, a folder as every `.onnx`
    file under it (sorted, links to folders not followed); each once, in order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            under = sorted(item for item in path.rglob("*.onnx") if item.is_file())
            if not under:
                raise ChecksError(f"no .onnx file under the folder {str(path)!r}")
            found += under
        elif path.is_file():
            found.append(path)
        else:
            raise ChecksError(f"no model file or folder {str(path)!r}")
    unique: dict[Path, Path] = {}
    for path in found:
        unique.setdefault(path.resolve(), path)
    return list(unique.values())


def shown(path: Path) -> str:
    """The path as a report names it: relative to the working directory when
    it is under it, else absolute; `/`-separated."""
    absolute = Path(os.path.abspath(path))
    try:
        return absolute.relative_to(Path.cwd()).as_posix()
    except ValueError:
        return absolute.as_posix()


def report_uri(name: str) -> str:
    """A report's artifact URI for a path as `shown` gives it: relative (to
    the working directory, SARIF's `SRCROOT`), or a `file:` URI outside it."""
    return Path(name).as_uri() if Path(name).is_absolute() else artifact_uri(name)


def check_model(sandbox: Sandbox, path: Path, args: argparse.Namespace, scratch: Path) -> ModelChecks:
    """One model through the import's worker and a check worker side by side
    (as the service runs them: the check worker reads none of the import's
    answers); the import's refusal, if any, is the model's answer."""
    from service.checks.check_worker import check_worker_results, model_and_external_bytes
    from service.checks.signature_worker import SignaturePolicy, SignedFolder, signature_results

    model = path.resolve()
    name = shown(path)
    uri = report_uri(name)
    external = args.external_data_dir.resolve() if args.external_data_dir else None
    job = sandbox.job(
        "import",
        directory=str(model.parent),
        model=model.name,
        display_name=model.name,
        external_dir=str(external) if external else None,
        allow_hard_links=True,  # the caller's own files, on the caller's own machine
        checks=args.stages,
        dims=args.dims,
    )
    known: tuple[str, ...] | None = None  # the external files listed, which the check worker binds without a second list
    if any(stage in IN_CHECK_WORKER for stage in job.checks):  # the check worker's memory, sized to the model
        listed = sandbox.run(replace(job, task="externals"), [], 0)
        found = listed.header.external_files if listed.status == "ok" and listed.header is not None else []  # refused: said below
        known = tuple(found) if listed.status == "ok" and listed.header is not None else None
        job = replace(job, model_bytes=model_and_external_bytes(job.directory, job.model, job.external_dir, found))
    catalog = scratch / "catalog"
    with ThreadPoolExecutor(max_workers=2) as beside:
        checking = beside.submit(check_worker_results, sandbox, job, listed=known)
        folder = SignedFolder(str(model.parent), model.name)
        verifying = (
            beside.submit(signature_results, sandbox, job, folder, SignaturePolicy.of(sandbox.settings))
            if "signature" in job.checks
            else None
        )
        outcome = sandbox.run(job, [catalog, scratch / "converted"])
        if outcome.status == "error" and outcome.error is not None:  # the importer refused the file
            checking.exception()  # waited for; whatever it found is not the answer
            return ModelChecks(name, refusal=Refusal.from_dict(outcome.error.model_dump(exclude_none=True)), uri=uri)
        if outcome.status != "ok" or outcome.header is None:  # the worker did not answer (a limit, a crash): no stage finished
            checking.exception()
            reason = f"the import's worker ended without an answer ({outcome.status}): {outcome.detail or 'no detail'}"
            return ModelChecks(name, [incomplete(stage, reason) for stage in args.stages], uri=uri)
        checked = checking.result() + (verifying.result() if verifying else [])  # a dimension binding with no place raises here
    results: list[StageResult] = [report.result() for report in outcome.header.checks]
    findings = _findings(catalog)
    results += checked
    findings += [finding for result in checked for finding in result.findings]
    results.sort(key=lambda result: STAGES.index(result.stage))
    return ModelChecks(name, results, findings, uri=uri)


def _document(model: ModelChecks) -> dict[str, object]:
    """A model's JSON report."""
    if model.refusal is not None:
        return {"input": model.name, "verdict": "refused", "refused": {"input": Path(model.name).name, **model.refusal.as_dict()}}
    return {
        "input": model.name,
        "verdict": model.verdict,
        "checks": {result.stage: {**result.as_dict(), "seconds": round(result.seconds, 3)} for result in model.results},
        "diagnostics": [finding.as_dict() for finding in model.findings],
    }


def check(args: argparse.Namespace) -> tuple[int, str]:
    """Run the stages on every model; the exit status and the report's text."""
    from service.checks.local_attestation import local_attester, model_subjects, write_attestation
    from service.sandbox.supervisor import Sandbox
    from service.settings import load_settings

    paths = models_of(args.paths)
    if (args.attest is None) != (args.signing_key is None):
        raise ChecksError("--attest and --signing-key go together")
    if args.attest is not None and len(paths) != 1:
        raise ChecksError(f"--attest signs one model's run: {len(paths)} models are named")
    args.stages = parse_checks(args.checks or DEFAULT_CHECKS)
    args.dims = parse_dims(args.dim)
    models: list[ModelChecks] = []
    with tempfile.TemporaryDirectory(prefix="onnx-import-") as scratch:
        flags = ["--data-root", str(paths[0].resolve().parent), "--store", str(Path(scratch) / "store"), "--workers", "1"]
        flags += ["--worker-memory", args.worker_memory, "--worker-cpu-seconds", args.worker_cpu_seconds]
        flags += ["--worker-memory-per-model-byte", args.worker_memory_per_model_byte, "--worker-memory-share", args.worker_memory_share]
        flags += ["--worker-memory-per-mapped-byte", args.worker_memory_per_mapped_byte]
        flags += ["--worker-timeout", args.worker_timeout]
        flags += ["--max-loop-trips", args.max_loop_trips, "--smoke-cpu-seconds", args.smoke_cpu_seconds]
        flags += ["--smoke-second-dim", args.smoke_second_dim, "--max-tensor-bytes", args.max_tensor_bytes]
        flags += ["--trusted-signers", args.trusted_signers] if args.trusted_signers else []
        flags += ["--require-signature"] if args.require_signature else []
        settings = load_settings(flags, environ={})
        attester = local_attester(args.signing_key, settings) if args.attest is not None else None  # the key read before any worker
        sandbox = Sandbox(settings)
        sandbox.start()
        for index, path in enumerate(paths):
            work = Path(scratch) / f"model-{index}"
            work.mkdir()
            models.append(check_model(sandbox, path, args, work))
        if attester is not None:
            job = sandbox.job("externals", directory=str(paths[0].resolve().parent), model=paths[0].resolve().name,
                              display_name=paths[0].name, allow_hard_links=True,
                              external_dir=str(args.external_data_dir.resolve()) if args.external_data_dir else None)  # fmt: skip
            write_attestation(attester, model_subjects(sandbox, job), models[0], paths[0], args.attest)
    status = exit_status(models)
    if args.format == "sarif":
        base = Path.cwd().as_uri().rstrip("/") + "/"
        text = json.dumps(sarif_log(models, base_uri=base), indent=1, ensure_ascii=False) + "\n"
    elif args.format == "junit":
        text = junit_log(models)
    else:
        one = len(args.paths) == 1 and not args.paths[0].is_dir()
        document: object = _document(models[0]) if one else [_document(model) for model in models]
        text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    return status, text


def verify_artifact(args: argparse.Namespace, keys: list[PublicKey]) -> int:
    """`verify oci://...`: the OCI side's (`service.registry.oci_verify`), loaded only when an artifact is named."""
    from service.registry.oci_verify import verify_artifact as verify_oci

    return verify_oci(args, keys)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "verify":
        return verify(args, verify_artifact)
    try:
        status, text = check(args)
    except (ChecksError, SettingsError) as error:
        print(f"onnx-import: {error}", file=sys.stderr)
        return EXIT_USAGE
    if args.output is not None:
        args.output.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return status


if __name__ == "__main__":
    sys.exit(main())
