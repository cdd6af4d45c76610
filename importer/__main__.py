"""Command line: `python -m importer dump|summary|check MODEL [options]`.

Owns the process contract: on success the dump (or summary JSON) on standard
output and exit 0; on refusal nothing on standard output, one line of JSON
(kind, message, input, offset, field_path) on standard error, exit 2. `check`
prints `{"diagnostics": [...]}` (importer.check) and exits 0 when none is an
error (warnings allowed), 1 when one is; a refused file is refused as above.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from importer.dump import render_dump
from importer.errors import ModelImportError
from importer.limits import MAX_TENSOR_BYTES, MAX_TENSOR_BYTES_CEILING, NESTING_RANGE, Limits, parse_size
from importer.load import load_model
from importer.summary import summarize

EXIT_ERRORS = 1  # check: the model breaks its operators' schemas
EXIT_REFUSED = 2
EXIT_UNFLUSHED = 120  # the output could not be flushed (as the interpreter reports it)


def _nesting(text: str) -> int:
    value = int(text)
    low, high = NESTING_RANGE
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"must be within {low} to {high}")
    return value


def _tensor_bytes(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if not MAX_TENSOR_BYTES <= value <= MAX_TENSOR_BYTES_CEILING:
        raise argparse.ArgumentTypeError(f"must be within {MAX_TENSOR_BYTES} (2^31-1) to 2^60 bytes")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m importer", description="Read an ONNX model with our own reader.")
    commands = parser.add_subparsers(dest="command", required=True)
    for command, help_text in (
        ("dump", "the structural dump (onnx-dump/1)"),
        ("summary", "a summary of the resolved graph"),
        ("check", "check every node against its operator's schema (JSON diagnostics)"),
    ):
        sub = commands.add_parser(command, help=help_text)
        sub.add_argument("model", help="path of the .onnx file")
        sub.add_argument("--external-data-dir", default=None, help="where external data lives (default: the model's folder)")
        sub.add_argument("--max-nesting", type=_nesting, default=Limits().max_nesting, help="nesting limit (8 to 250)")
        sub.add_argument(
            "--max-tensor-bytes",
            type=_tensor_bytes,
            default=MAX_TENSOR_BYTES,
            help="largest tensor in external data, in bytes (4GiB, say): from 2^31-1, the default, up to 2^60; "
            "a tensor in the model file keeps 2^31-1",
        )
        sub.add_argument(
            "--allow-hard-links", action="store_true", help="accept model and external data files that have more than one hard link"
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        limits = Limits(max_nesting=args.max_nesting, allow_hard_links=args.allow_hard_links, max_tensor_bytes=args.max_tensor_bytes)
        with load_model(args.model, external_data_dir=args.external_data_dir, limits=limits) as model:
            status = 0
            if args.command == "dump":
                text = render_dump(model.proto)
            elif args.command == "summary":
                text = json.dumps(summarize(model), indent=1, ensure_ascii=False) + "\n"
            else:
                from importer.check import check_model  # only this command pays for the check's modules
                from importer.diagnostics import Severity

                diagnostics = check_model(model)
                status = EXIT_ERRORS if any(d.severity is Severity.ERROR for d in diagnostics) else 0
                text = json.dumps({"diagnostics": [d.as_dict() for d in diagnostics]}, indent=1, ensure_ascii=False) + "\n"
    except ModelImportError as error:
        sys.stderr.write(json.dumps(error.as_dict()) + "\n")
        return EXIT_REFUSED
    sys.stdout.write(text)
    return status


def hard_exit(status: int) -> None:
    """Flush the output, then leave without tearing down the heap."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # the reader went away (or the disk is full): Python's own status for this
        status = EXIT_UNFLUSHED
    os._exit(status)


if __name__ == "__main__":
    hard_exit(main())
