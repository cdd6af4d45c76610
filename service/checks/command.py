"""The `onnx-import` command: the check stages on a local model, without a server.

    onnx-import check MODEL [--external-data-dir DIR] [--checks schema,shape,...]
                            [--dim NAME:VALUE ...] [--format json|sarif|junit] [--output FILE]

Runs the same sandboxed workers as the service (`service.sandbox`): the
import's worker (the importer, `schema`, `security`), then a check worker
(`shape`, `runtime`, `smoke`), each with the service's default limits
(`--worker-memory`, `--worker-cpu-seconds`, `--worker-timeout` change them).
Exit status: 0 the verdict is pass, 1 fail, 2 refused (the importer refused
the file: its typed error is printed) or incomplete (a stage did not finish),
64 a usage error.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from service.checks.junit import junit_report
from service.checks.outcome import DEFAULT_CHECKS, STAGES, ChecksError, Finding, StageResult, parse_checks, parse_dims, verdict
from service.checks.sarif import sarif_report
from service.setting_kinds import SettingsError

EXIT_PASS, EXIT_FAIL, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2, 64
EXIT_OF_VERDICT = {"pass": EXIT_PASS, "fail": EXIT_FAIL, "incomplete": EXIT_REFUSED}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onnx-import", description="Check an ONNX model in the service's sandboxed workers.")
    commands = parser.add_subparsers(dest="command", required=True)
    check = commands.add_parser("check", help="run the check stages on a model file")
    check.add_argument("model", type=Path, help="the .onnx file")
    check.add_argument("--external-data-dir", type=Path, help="where its external data files are (default: beside the model)")
    check.add_argument("--checks", action="append", help=f"stages, comma-separated or repeated, among {', '.join(STAGES)} "
                       f"(default {DEFAULT_CHECKS})")  # fmt: skip
    check.add_argument("--dim", action="append", default=[], help="NAME:VALUE, a symbolic dimension's value for the smoke run (repeatable)")
    check.add_argument("--format", choices=("json", "sarif", "junit"), default="json")
    check.add_argument("--output", type=Path, help="write the report here (default: standard output)")
    check.add_argument("--worker-memory", default="2GiB", help="memory cap of each worker (default 2GiB)")
    check.add_argument("--worker-cpu-seconds", default="60", help="CPU-time cap of each worker (default 60)")
    check.add_argument("--worker-timeout", default="120", help="wall-clock deadline of each worker, in seconds (default 120)")
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


def check(args: argparse.Namespace) -> tuple[int, str]:
    """Run the stages; the exit status and the report's text."""
    from service.sandbox.check_run import check_worker_results
    from service.sandbox.supervisor import Sandbox
    from service.settings import load_settings

    model = args.model.resolve()
    if not model.is_file():
        raise ChecksError(f"no model file {str(args.model)!r}")
    stages = parse_checks(args.checks or DEFAULT_CHECKS)
    dims = parse_dims(args.dim)
    external = args.external_data_dir.resolve() if args.external_data_dir else None
    with tempfile.TemporaryDirectory(prefix="onnx-import-") as scratch:
        flags = ["--data-root", str(model.parent), "--store", str(Path(scratch) / "store"), "--workers", "1"]
        flags += ["--worker-memory", args.worker_memory, "--worker-cpu-seconds", args.worker_cpu_seconds]
        flags += ["--worker-timeout", args.worker_timeout]
        sandbox = Sandbox(load_settings(flags, environ={}))
        sandbox.start()
        job = sandbox.job(
            "import",
            directory=str(model.parent),
            model=model.name,
            display_name=model.name,
            external_dir=str(external) if external else None,
            allow_hard_links=True,  # the caller's own files, on the caller's own machine
            checks=stages,
            dims=dims,
        )
        catalog = Path(scratch) / "catalog"
        outcome = sandbox.run(job, [catalog, Path(scratch) / "converted"])
        if outcome.status != "ok" or outcome.header is None:
            error = outcome.error
            refusal = error.model_dump(exclude_none=True) if error is not None else {"kind": outcome.status, "message": outcome.detail}
            return EXIT_REFUSED, json.dumps({"input": model.name, "refused": refusal}, indent=1, ensure_ascii=False) + "\n"
        results: list[StageResult] = [report.result() for report in outcome.header.checks]
        findings = _findings(catalog)
        checked = check_worker_results(sandbox, job)
    results += checked
    findings += [finding for result in checked for finding in result.findings]
    results.sort(key=lambda result: STAGES.index(result.stage))
    outcome_verdict = verdict(results)
    if args.format == "sarif":
        text = json.dumps(sarif_report(model.name, results, findings), indent=1, ensure_ascii=False) + "\n"
    elif args.format == "junit":
        text = junit_report(model.name, results, findings)
    else:
        document = {
            "input": model.name,
            "verdict": outcome_verdict,
            "checks": {result.stage: result.as_dict() for result in results},
            "diagnostics": [finding.as_dict() for finding in findings],
        }
        text = json.dumps(document, indent=1, ensure_ascii=False) + "\n"
    return EXIT_OF_VERDICT[outcome_verdict], text


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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
