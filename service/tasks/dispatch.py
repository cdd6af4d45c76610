"""A worker's task, once its walls are up: `open_input` and `run_task`.

Owns what a worker does with its job (`service.sandbox.protocol`): its model
file opened (the importer's `open_model`: opened, not read) while the
worker is still the service's user, by `open_input`; then, by `run_task`,
the model read and the answer sent: for an import a bounded header (the
summary, `bounded_summary`), then the tensor catalogue as a serialized
SQLite database (`catalog_builder`, with the findings of the `schema` and
`security` check stages) and the converted tensor bytes; a graph task sends
the graph document (`graph_document`); a diff task compares two graph
documents (`compare`); task "externals" reports the external files the
model names; a check worker (task "checks") narrows its file policy to the
code once its inputs are mapped, and runs the stages that need onnx and
onnxruntime (`service.checks.stages.in_worker`); a signature worker (task
"signature") opens no model: it verifies the folder's model.sig and hashes the
files the job lists, each opened through the file broker
(`service.checks.stages.in_worker`). It never writes a file and
never opens one except through the importer. The entry that forks, walls
and ends the worker is `service.sandbox.worker.main`.
"""

from __future__ import annotations

import gc
import json
import os
import posixpath
import zlib
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from typing import Literal

from importer import ErrorKind, Limits, ModelImportError, OnnxModel, load_opened_model, open_model, opened_external_locations
from importer.data_owner import DataOwner
from importer.op_schemas import schema_table
from importer.source import ConfinedOpener, confined_descriptor
from service.checks.stages.in_worker import import_stages, send_checks, send_signature
from service.checks.stages.model_signature import load_library
from service.sandbox.protocol import (
    CHANGED,
    CHUNK_BYTES,
    GRAPH_COMPRESSION,
    GZIP_WBITS,
    ImportFailure,
    SourceReport,
    StageReport,
    WorkerHeader,
    WorkerJob,
)
from service.tasks import compare
from service.tasks.bounded_summary import bounded_summary
from service.tasks.catalog_builder import build_catalog
from service.tasks.catalog_format import MODEL_FILE_KEY
from service.tasks.graph_document import render_graph
from service.tasks.steps import Steps

CHANGED_MESSAGE = "the model file changed between its check and its reading"


def job_limits(job: WorkerJob) -> Limits:
    """The importer's limits a job reads its model with."""
    return Limits(max_external_files=job.max_external_files, allow_hard_links=job.allow_hard_links, max_tensor_bytes=job.max_tensor_bytes)


def open_input(connection: Connection, job: WorkerJob) -> DataOwner | Literal[False] | None:
    """The job's model file, opened (not read) while the worker is still the
    service's user and the file in view: None for a probe; False once a
    refusal (not found, not a regular file, a file other than the one the
    front end checked) has been sent; None for a signature worker too, which opens no model: it
    loads model-signing instead, which no other worker carries (`model_signature.load_library`)."""
    if job.task == "signature":
        load_library()
    if job.task in ("probe", "signature"):
        return None
    limits = job_limits(job)
    try:
        owner = open_model(os.path.join(job.directory, job.model), limits=limits)
    except ModelImportError as error:
        send_header(connection, WorkerHeader(status="error", error=_failure(error, job)))
        return False
    opened = owner.identity
    if job.expected_model is not None and (opened is None or (opened.device, opened.inode) != job.expected_model):
        owner.close()
        failure = ImportFailure(kind=ErrorKind.IO.value, message=CHANGED_MESSAGE, input=job.display_name, reason=CHANGED)
        send_header(connection, WorkerHeader(status="error", error=failure))
        return False
    return owner


def _failure(error: ModelImportError, job: WorkerJob) -> ImportFailure:
    return ImportFailure(
        kind=error.kind.value,
        message=error.message.replace(os.path.join(job.directory, job.model), job.display_name),  # no server paths
        input=job.display_name,
        offset=error.offset,
        field_path=error.field_path,
        reason=error.reason,
    )


def send_header(connection: Connection, header: WorkerHeader) -> None:
    connection.send_bytes(header.model_dump_json(exclude_defaults=True).encode())


def run_task(
    connection: Connection,
    job: WorkerJob,
    isolation: str,
    opened: DataOwner | None = None,
    external_opener: ConfinedOpener = confined_descriptor,
    narrow: Callable[[], bool] = lambda: False,
    freeze: Callable[[], None] = gc.freeze,
    steps: Steps | None = None,
    documents: tuple[int, int] | None = None,
    mapped: frozenset[str] | None = None,
) -> None:
    """Read the job's model (`opened`, else opened here), its external data
    files opened by `external_opener` (through the front end's file broker,
    in a sandboxed worker), and send the answer its task asks for. A check worker
    `narrow`s its file policy to the code once its inputs are mapped
    (in-process tests pass one that keeps the test's own files). Once the
    model is read, `freeze` keeps the cyclic collector off its objects for
    the worker's life (in-process tests, whose process lives on, pass a no-op).
    `steps` (the worker's profile so far) is sent with the answer. `mapped`:
    where the model file is bound for onnxruntime to open by name, the
    external locations bound beside it (the runtime stage then makes its
    session over those files); None where nothing is bound. A diff
    job compares its two graph documents (`documents`, else opened here) instead."""
    if job.task == "diff":
        assert job.diff is not None
        compare.send_diff(connection, documents or compare.open_documents(job), job.diff, isolation)
        return
    steps = steps or Steps()
    if job.task == "signature":
        send_signature(connection, job, isolation, external_opener, steps)
        return
    model_path = os.path.join(job.directory, job.model)  # absolute (WorkerJob): the worker's own directory is never used
    limits = job_limits(job)
    try:
        owner = opened if opened is not None else open_model(model_path, limits=limits)
        if job.task == "externals":  # which external files the model names: read the model only
            locations = opened_external_locations(owner, limits=limits)
            send_header(connection, WorkerHeader(status="ok", isolation=isolation, external_files=locations))
            return
        # A check worker resolves the graph only if a stage asks for it: `shape` does not (onnx reads the bytes; the
        # import worker, beside it, resolves and refuses what cannot be), and that is half the read of 200,000 nodes.
        model = load_opened_model(
            owner, external_data_dir=job.external_dir, limits=limits, external_opener=external_opener, resolve=job.task != "checks"
        )
    except ModelImportError as error:
        send_header(connection, WorkerHeader(status="error", error=_failure(error, job)))
        return
    # The model's objects (1.4 million for 200,000 nodes) live as long as the
    # worker: frozen, the cyclic collector never walks them again. Left in its
    # oldest generation, every full collection that a stage's allocations set
    # off would (a 200,000-item list of tuples: 0.34 s instead of 0.035 s).
    freeze()
    steps.done("read")
    narrowed = job.task == "checks" and narrow()
    if job.task == "checks":
        steps.done("narrow")
    with model:
        if job.task == "graph":
            send_graph(connection, model, job, isolation)
        elif job.task == "checks":
            send_checks(connection, model, job, isolation + ("+files-narrowed" if narrowed else ""), steps, mapped)
        else:
            send_import(connection, model, job, isolation, steps)


def send_import(connection: Connection, model: OnnxModel, job: WorkerJob, isolation: str, steps: Steps) -> None:
    diagnostics, checks = import_stages(model, job)
    steps.done("stages")
    catalog = build_catalog(model.proto, keep_rows=job.summary_items, diagnostics=diagnostics)
    summary = bounded_summary(model, job.display_name, catalog, job.summary_items, diagnostics)
    converted_length = sum(len(part) for part in catalog.converted)
    steps.done("catalogue")
    sources = source_reports(model, set(catalog.external_files), job.hash_sources)
    steps.done("hashes")
    header = WorkerHeader(
        status="ok",
        isolation=isolation,
        summary=summary,
        tensor_count=catalog.count,
        external_files=catalog.external_files,
        sources=sources,
        streams=[len(catalog.database), converted_length],
        checks=[StageReport.of(result, with_findings=False) for result in checks],
        steps=steps.taken,
    )
    send_header(connection, header)
    _send_chunks(connection, [catalog.database])
    _send_chunks(connection, catalog.converted)


def source_reports(model: OnnxModel, used: set[str], hashed: bool) -> list[SourceReport]:
    """The model file and each external file the tensors use: identity of what
    was read, and (if `hashed`) the SHA-256 of the bytes read."""
    reports = []
    for index, owner in enumerate(model.owners):
        key = MODEL_FILE_KEY if index == 0 else posixpath.normpath(owner.name)
        if owner.identity is None or (index and key not in used):
            continue
        identity = owner.identity
        reports.append(
            SourceReport(
                key=key,
                path=identity.path,
                device=identity.device,
                inode=identity.inode,
                size=identity.size,
                mtime_ns=identity.mtime_ns,
                sha256=owner.sha256() if hashed else "",
            )
        )
    return reports


def send_graph(connection: Connection, model: OnnxModel, job: WorkerJob, isolation: str) -> None:
    """The graph document, gzip-compressed (`service.sandbox.protocol.GRAPH_STREAMS`): kept and served so."""
    text = json.dumps(render_graph(model, job.model_id), allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()
    compressor = zlib.compressobj(GRAPH_COMPRESSION, zlib.DEFLATED, GZIP_WBITS)
    graph = compressor.compress(text) + compressor.flush()
    del text
    externals = {posixpath.normpath(owner.name) for owner in model.owners[1:]}
    sources = source_reports(model, externals, hashed=False)
    send_header(connection, WorkerHeader(status="ok", isolation=isolation, sources=sources, streams=[len(graph)]))
    _send_chunks(connection, [graph])


def _send_chunks(connection: Connection, parts: Sequence[memoryview | bytes]) -> None:
    """`parts`, one after the other, as frames of at most CHUNK_BYTES."""
    pending = bytearray()
    for part in parts:
        view = memoryview(part)
        while view:
            take = min(len(view), CHUNK_BYTES - len(pending))
            if not pending and take == CHUNK_BYTES:
                connection.send_bytes(view[:take])
            else:
                pending += view[:take]
                if len(pending) == CHUNK_BYTES:
                    connection.send_bytes(pending)
                    pending.clear()
            view = view[take:]
    if pending:
        connection.send_bytes(pending)


schema_table()  # loaded once in the fork server (which imports this module), not in every worker
