"""Command line: `python -m service.client --url URL [--token T] COMMAND`.

Commands:
  import MODEL [--external-data FILE ...]   upload; prints the summary JSON
  import-path NAME                          import a model under the data root; prints the summary JSON
  tensor ID NAME -o FILE.npy [--raw]        a tensor's .npy file (or raw bytes), written atomically
  delete ID                                 remove a model from the store

Owns the process contract, as `python -m importer`'s: on success the output
and exit 0; when the service refuses (any problem answer), nothing on
standard output, the problem JSON as one line on standard error, and exit 2.
A service that cannot be reached: one line on standard error, exit 1. Each
external data file is sent under its path relative to the model's folder.
The token may also come from ONNX_SERVICE_TOKEN.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

import httpx

from service.client._common import ServiceError
from service.client.sync import Client

EXIT_REFUSED = 2
EXIT_UNREACHABLE = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m service.client", description="A client of the ONNX import service.")
    parser.add_argument("--url", required=True, help="the service, e.g. http://127.0.0.1:8000")
    parser.add_argument("--token", default=os.environ.get("ONNX_SERVICE_TOKEN"), help="API key (default: $ONNX_SERVICE_TOKEN)")
    commands = parser.add_subparsers(dest="command", required=True)
    upload = commands.add_parser("import", help="upload a model file; prints its summary")
    upload.add_argument("model", type=Path)
    upload.add_argument(
        "--external-data", nargs="+", type=Path, default=[], metavar="FILE", help="external data files (under the model's folder)"
    )
    by_path = commands.add_parser("import-path", help="import a model under the service's data root; prints its summary")
    by_path.add_argument("name")
    tensor = commands.add_parser("tensor", help="download one tensor")
    tensor.add_argument("id")
    tensor.add_argument("name", help="the tensor's ONNX name (or its alias)")
    tensor.add_argument("-o", "--output", type=Path, required=True, help="the file to write (.npy unless --raw)")
    tensor.add_argument("--field-path", default=None, help="picks one tensor when several share the name")
    tensor.add_argument("--raw", action="store_true", help="the raw little-endian bytes instead of .npy")
    delete = commands.add_parser("delete", help="remove a model from the store")
    delete.add_argument("id")
    return parser


def download(client: Client, args: argparse.Namespace) -> None:
    """The tensor into args.output, through a temporary file beside it (no partial file on failure)."""
    target: Path = args.output
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in client.tensor_bytes(args.id, args.name, field_path=args.field_path, format="raw" if args.raw else "npy"):
                out.write(chunk)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with Client(args.url, token=args.token) as client:
            if args.command == "import":
                output = json.dumps(client.import_file(args.model, external_data=args.external_data), indent=1) + "\n"
            elif args.command == "import-path":
                output = json.dumps(client.import_path(args.name), indent=1) + "\n"
            elif args.command == "tensor":
                download(client, args)
                output = ""
            else:
                client.delete(args.id)
                output = ""
    except ServiceError as error:
        sys.stderr.write(json.dumps(error.problem) + "\n")
        return EXIT_REFUSED
    except (httpx.TransportError, ValueError, OSError) as error:
        sys.stderr.write(json.dumps({"error": type(error).__name__, "detail": str(error)}) + "\n")
        return EXIT_UNREACHABLE
    sys.stdout.write(output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
