"""The comparison of two graph documents, in a worker: task "diff".

Owns `open_documents` (both documents opened before the walls go up, as a
model is) and `send_diff`: each document inflated (the store keeps them
gzip-compressed) and parsed, and the two compared
(`service.tasks.model_diff.compare_models`, with the opsets the job carries), and
the answer sent as three streams (`service.sandbox.protocol.DIFF_STREAMS`):
the head (JSON: everything but the changes), the changes (one JSON object a
line, in order) and their index (for each change, the offset of its line in
the changes, little-endian 64-bit, then the changes' length), so the front
end serves any page of the changes by reading its lines, parsing nothing.
Parsing a graph document costs several times its size in memory, and
comparing two large ones seconds of CPU: here that is bounded by the
worker's limits, and no front end's interpreter waits for it.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
from multiprocessing.connection import Connection

from service.sandbox.protocol import CHUNK_BYTES, GZIP_MAGIC, DiffInputs, WorkerHeader, WorkerJob
from service.tasks.model_diff import ModelSide, compare_models

INDEX_ENTRY = struct.Struct("<Q")


def open_documents(job: WorkerJob) -> tuple[int, int]:
    """Both graph documents of a diff job, opened (not read), no link followed."""
    assert job.diff is not None
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
    first = os.open(os.path.join(job.directory, job.model), flags)
    try:
        return first, os.open(os.path.join(job.directory, job.diff.other), flags)
    except BaseException:
        os.close(first)
        raise


def _parsed(fd: int) -> object:
    """A graph document, gzip-compressed (as the store keeps it now) or not (as earlier releases kept it)."""
    with os.fdopen(fd, "rb") as document:
        compressed = document.read(len(GZIP_MAGIC)) == GZIP_MAGIC
        document.seek(0)
        if compressed:
            with gzip.GzipFile(fileobj=document) as inflated:
                return json.load(inflated)
        return json.load(document)


def _dumped(value: object) -> bytes:
    return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()


def send_diff(connection: Connection, documents: tuple[int, int], diff: DiffInputs, isolation: str) -> None:
    a = ModelSide(diff.a_id, _parsed(documents[0]), [{"domain": d, "version": v} for d, v in diff.a_opsets])
    b = ModelSide(diff.b_id, _parsed(documents[1]), [{"domain": d, "version": v} for d, v in diff.b_opsets])
    compared = compare_models(a, b)
    head = _dumped(compared.head)
    lines = [_dumped(change) + b"\n" for change in compared.changes]
    index = bytearray()
    offset = 0
    for line in lines:
        index += INDEX_ENTRY.pack(offset)
        offset += len(line)
    index += INDEX_ENTRY.pack(offset)
    header = WorkerHeader(status="ok", isolation=isolation, streams=[len(head), offset, len(index)])
    connection.send_bytes(header.model_dump_json(exclude_defaults=True).encode())
    for stream in (head, b"".join(lines), bytes(index)):
        view = memoryview(stream)
        for start in range(0, len(view), CHUNK_BYTES):
            connection.send_bytes(view[start : start + CHUNK_BYTES])
