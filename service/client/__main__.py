"""Command line: `python -m service.client --url URL [--token T] COMMAND`.

Commands:
  import MODEL [--external-data FILE ... | --external-data-dir DIR]
         [--resumable-above SIZE] [--resume-store DIR] [--checks A,B] [--dim NAME:VALUE ...]
                                            upload; prints the summary JSON
  import-path NAME [--checks A,B] [--dim NAME:VALUE ...]
                                            import a model under the data root; prints the summary JSON
  recheck ID [--checks A,B] [--dim NAME:VALUE ...]
                                            run check stages again on a stored model; prints the summary
                                            JSON; exit 0 the verdict is pass, 1 fail, 2 incomplete
  tensor ID NAME -o FILE.npy [--raw]        a tensor's .npy file (or raw bytes), written atomically
  graph ID -o FILE                          the graph document (JSON, as the service sends it), written atomically
  diff A B                                  what changed from model A to model B (JSON: opsets, inputs, outputs,
                                            op-type counts, and every changed node and initializer)
  diagnostics ID [--format json|sarif|junit] [-o FILE]
                                            the check stages' findings (json: every one, a JSON array),
                                            or the whole report as SARIF 2.1.0 or JUnit XML
  list [--json] [--page-size N]             every stored model, newest first: a line each (id, input,
                                            bytes, created, tab-separated), or --json: the items as a JSON array
  delete ID                                 remove a model from the store

Every request is retried on a 503 (after its Retry-After) and on a failed
connection (and, for GET and DELETE, a reset one), after a backoff doubling
from `--retry-backoff` up to `--retry-max-delay`, `--retries` more times at
most; each retry is one JSON line on standard error.

`import` and `tensor` draw a progress bar (bytes, rate, time left) on
standard error when it is a terminal; `--progress` / `--no-progress` force
it either way. An upload above `--resumable-above` (default 64MiB; 0: every
upload) is resumable: a dropped connection is resumed on its own, and the
same command run again after the process was killed continues where the
service stopped receiving (the state is kept in `--resume-store`, by default
under $XDG_CACHE_HOME/onnx-import/uploads).

`--checks` names the check stages (comma-separated or repeated; default the
service's) and `--dim` binds a symbolic dimension of the smoke run.

Owns the process contract, as `python -m importer`'s: on success the output
and exit 0 (`recheck`: 0, 1 or 2 by the verdict, as `onnx-import check`);
when the service refuses (any problem answer), or the client refuses what it
answered (an upload URL on another origin, a resumable upload past its
bound: a problem of the same shape, status 0), nothing on standard output,
the problem JSON as one line on standard error, and exit 2.
A service that cannot be reached (once the retries are spent), or a local
file that cannot be read or sent: one line on standard error, exit 1 (the
retries' lines come before that line). Each external data file is sent
under its path relative to the model's folder (with `--external-data-dir`,
relative to DIR: exactly the files the model names, read from it with the
project's importer). The token may also come from ONNX_SERVICE_TOKEN.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import httpx

from service.client._common import ServiceError
from service.client.progress import ProgressOption
from service.client.resumable import RESUMABLE_ABOVE
from service.client.retry import Retry, RetryNote
from service.client.sync import Client

EXIT_REFUSED = 2
EXIT_UNREACHABLE = 1
EXIT_OF_VERDICT = {"pass": 0, "fail": 1}  # `recheck`, as `onnx-import check` (service/checks/command.py); else 2, incomplete
EXIT_INCOMPLETE = 2
# Sizes as the service's settings read them: 1k is 1000 bytes, 1KiB 1024.
SIZE_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 1 << 10, "m": 10**6, "mb": 10**6, "mib": 1 << 20}
SIZE_UNITS |= {"g": 10**9, "gb": 10**9, "gib": 1 << 30, "t": 10**12, "tb": 10**12, "tib": 1 << 40}
SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")


def parse_size(text: str) -> int:
    """`64MiB` -> 67108864; `1.5G` -> 1500000000; `0` -> 0."""
    match = SIZE.fullmatch(text)
    if match is None or match.group(2).lower() not in SIZE_UNITS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (a number with an optional unit such as KiB, MiB, GiB)")
    return int(float(match.group(1)) * SIZE_UNITS[match.group(2).lower()])


def parse_dim(text: str) -> tuple[str, int]:
    """`batch:4` -> ("batch", 4); the name may hold colons, the value is a whole number."""
    name, colon, value = text.rpartition(":")
    if not colon or not name or not value.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME:VALUE (a symbolic dimension and a whole number)")
    return name, int(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m service.client", description="A client of the ONNX import service.")
    parser.add_argument("--url", required=True, help="the service, e.g. http://127.0.0.1:8000")
    parser.add_argument("--token", default=os.environ.get("ONNX_SERVICE_TOKEN"), help="API key (default: $ONNX_SERVICE_TOKEN)")
    defaults = Retry()
    parser.add_argument(
        "--retries", type=int, default=defaults.attempts, metavar="N", help=f"retries of a request at most (default {defaults.attempts})"
    )
    parser.add_argument(
        "--retry-backoff",
        type=float,
        default=defaults.backoff,
        metavar="SECONDS",
        help=f"the first backoff, doubling (default {defaults.backoff})",
    )
    parser.add_argument(
        "--retry-max-delay",
        type=float,
        default=defaults.max_delay,
        metavar="SECONDS",
        help=f"the longest backoff (default {defaults.max_delay})",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    checked = argparse.ArgumentParser(add_help=False)
    checked.add_argument(
        "--checks", action="append", default=None, metavar="A,B", help="check stages, comma-separated or repeated (default: the service's)"
    )
    checked.add_argument(
        "--dim", action="append", type=parse_dim, default=[], metavar="NAME:VALUE", help="a symbolic dimension's value for the smoke run"
    )
    shows_progress = argparse.ArgumentParser(add_help=False)
    shows_progress.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="draw a progress bar on standard error (default: when it is a terminal)",
    )
    upload = commands.add_parser("import", help="upload a model file; prints its summary", parents=[shows_progress, checked])
    upload.add_argument("model", type=Path)
    upload.add_argument("--name", default=None, help="the name the service lists the model by (default: the file's name)")
    upload.add_argument("--label", default=None, help='a short label for the model, such as "v3 fp16"')
    external = upload.add_mutually_exclusive_group()
    external.add_argument(
        "--external-data", nargs="+", type=Path, default=[], metavar="FILE", help="external data files (under the model's folder)"
    )
    external.add_argument(
        "--external-data-dir", type=Path, default=None, metavar="DIR", help="send exactly the external data files the model names, from DIR"
    )
    upload.add_argument(
        "--resumable-above",
        type=parse_size,
        default=RESUMABLE_ABOVE,
        metavar="SIZE",
        help="upload resumably above this many bytes in all (default 64MiB; 0: always)",
    )
    upload.add_argument(
        "--resume-store", type=Path, default=None, metavar="DIR", help="where unfinished uploads are remembered (default: the cache folder)"
    )
    by_path = commands.add_parser("import-path", help="import a model under the service's data root; prints its summary", parents=[checked])
    by_path.add_argument("name")
    recheck = commands.add_parser("recheck", help="run check stages again on a stored model; prints its summary", parents=[checked])
    recheck.add_argument("id")
    tensor = commands.add_parser("tensor", help="download one tensor", parents=[shows_progress])
    tensor.add_argument("id")
    tensor.add_argument("name", help="the tensor's ONNX name (or its alias)")
    tensor.add_argument("-o", "--output", type=Path, required=True, help="the file to write (.npy unless --raw)")
    tensor.add_argument("--field-path", default=None, help="picks one tensor when several share the name")
    tensor.add_argument("--raw", action="store_true", help="the raw little-endian bytes instead of .npy")
    graph = commands.add_parser("graph", help="write the graph document (JSON)", parents=[shows_progress])
    graph.add_argument("id")
    graph.add_argument("-o", "--output", type=Path, required=True, help="the file to write")
    compared = commands.add_parser("diff", help="what changed from model A to model B (JSON)")
    compared.add_argument("a")
    compared.add_argument("b")
    diagnostics = commands.add_parser("diagnostics", help="the check stages' findings, or the report as SARIF or JUnit")
    diagnostics.add_argument("id")
    diagnostics.add_argument("--format", choices=("json", "sarif", "junit"), default="json")
    diagnostics.add_argument("-o", "--output", type=Path, default=None, help="the file to write (default: standard output)")
    listing = commands.add_parser("list", help="every stored model, newest first")
    listing.add_argument("--json", action="store_true", help="the items as a JSON array")
    listing.add_argument("--page-size", type=int, default=100, metavar="N", help="models asked for per request (1 to 1000; default 100)")
    delete = commands.add_parser("delete", help="remove a model from the store")
    delete.add_argument("id")
    return parser


def write_atomically(target: Path, chunks: Iterable[bytes]) -> None:
    """`chunks` into `target`, through a temporary file beside it (no partial file on failure)."""
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def diagnostics(client: Client, args: argparse.Namespace) -> bytes:
    if args.format == "json":
        return (json.dumps(list(client.diagnostics(args.id)), indent=1) + "\n").encode()
    return client.diagnostics_report(args.id, args.format)


def listing(client: Client, args: argparse.Namespace) -> bytes:
    items = list(client.models(page_size=args.page_size))
    if args.json:
        return (json.dumps(items, indent=1) + "\n").encode()
    lines = (f"{item['id']}\t{item['input']}\t{item['model_file']['size']}\t{item['created']}\n" for item in items)
    return "".join(lines).encode()


def upload(client: Client, args: argparse.Namespace, progress: ProgressOption) -> str:
    external_data: dict[str, Path] | list[Path] = args.external_data
    if args.external_data_dir is not None:
        from service.client.external_dir import named_files

        external_data = named_files(args.model, args.external_data_dir)
    summary = client.import_file(
        args.model, external_data=external_data, progress=progress, checks=args.checks, dim=dict(args.dim), name=args.name, label=args.label
    )
    return json.dumps(summary, indent=1) + "\n"


def run(client: Client, args: argparse.Namespace, progress: ProgressOption) -> tuple[bytes, int]:
    """The command's standard output and exit status."""
    if args.command == "import":
        return upload(client, args, progress).encode(), 0
    if args.command == "import-path":
        return (json.dumps(client.import_path(args.name, checks=args.checks, dim=dict(args.dim)), indent=1) + "\n").encode(), 0
    if args.command == "recheck":
        summary = client.recheck(args.id, checks=args.checks, dim=dict(args.dim))
        return (json.dumps(summary, indent=1) + "\n").encode(), EXIT_OF_VERDICT.get(str(summary.get("verdict")), EXIT_INCOMPLETE)
    if args.command == "tensor":
        format = "raw" if args.raw else "npy"
        write_atomically(args.output, client.tensor_bytes(args.id, args.name, field_path=args.field_path, format=format, progress=progress))
    elif args.command == "graph":
        write_atomically(args.output, client.graph_bytes(args.id, progress=progress))
    elif args.command == "diff":
        return (json.dumps(client.diff(args.a, args.b), indent=1) + "\n").encode(), 0
    elif args.command == "diagnostics":
        report = diagnostics(client, args)
        if args.output is None:
            return report, 0
        write_atomically(args.output, [report])
    elif args.command == "list":
        return listing(client, args), 0
    else:
        client.delete(args.id)
    return b"", 0


def tell_retry(note: RetryNote) -> None:
    line = {
        "retry": note.attempt,
        "of": note.attempts,
        "wait": round(note.wait, 3),
        "cause": note.cause,
        "request": f"{note.method} {note.url}",
    }
    sys.stderr.write(json.dumps(line) + "\n")
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    shown = getattr(args, "progress", None)
    progress = shown if shown is not None else sys.stderr.isatty()
    options = {"resumable_above": args.resumable_above, "resume_store": args.resume_store} if args.command == "import" else {}
    retry = Retry(attempts=args.retries, backoff=args.retry_backoff, max_delay=args.retry_max_delay)
    try:
        with Client(args.url, token=args.token, retry=retry, on_retry=tell_retry, **options) as client:
            output, status = run(client, args, progress)
    except ServiceError as error:
        sys.stderr.write(json.dumps(error.problem) + "\n")
        return EXIT_REFUSED
    except (httpx.TransportError, ValueError, OSError) as error:
        sys.stderr.write(json.dumps({"error": type(error).__name__, "detail": str(error)}) + "\n")
        return EXIT_UNREACHABLE
    sys.stdout.buffer.write(output)
    sys.stdout.flush()
    return status


if __name__ == "__main__":
    sys.exit(main())
