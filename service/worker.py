"""The import worker: one fresh process per import, forked from the fork server.

Owns `main(connection, job)`. Before reading anything it cuts the network off
(a new network namespace; unprivileged, a new user namespace with it; where
neither is permitted it goes on and reports "unavailable") and sets its own
limits: RLIMIT_DATA (memory; not RLIMIT_AS, which would count the read-only
mapping of a large model), RLIMIT_CPU, RLIMIT_NOFILE (the external files it
may map plus a margin: each mapping keeps a descriptor), RLIMIT_FSIZE 0 (it
writes no file), RLIMIT_CORE 0 and RLIMIT_NPROC 0 (no children; not enforced
for root, who is also the only user that can always unshare), after starting
its memory watchdog (`service.memory_watch`: RLIMIT_DATA alone can leave a
worker crawling at its limit instead of failing). Then it imports
the model and sends the result back over the pipe as frames (`send_result`):
a JSON header, then the graph JSON and every converted tensor in chunks.
It never writes a file and never opens one except through the importer.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import resource
import time
from multiprocessing.connection import Connection
from typing import Any

from importer import DataType, ErrorKind, Limits, ModelImportError, load_model
from importer.errors import NOT_FOUND
from importer.summary import element_type_name, summarize
from importer.tensor import FROM_EXTERNAL, FROM_RAW_DATA
from service.catalog import CatalogEntry, catalog_tensors
from service.graph_json import render_graph
from service.memory_watch import EXIT_MEMORY, watch_memory

CHUNK_BYTES = 1 << 20
NOFILE_MARGIN = 64
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000

Json = Any


def isolate_network() -> str:
    """Enter a new network namespace: "namespace", "user-namespace" or "unavailable"."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) == 0:
            return "namespace"
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
            return "user-namespace"
    except (OSError, AttributeError):
        pass
    return "unavailable"


def set_limits(job: dict[str, Any]) -> None:
    memory = int(job["memory"])
    cpu = int(job["cpu_seconds"])
    nofile = int(job["max_external_files"]) + NOFILE_MARGIN
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile if hard == resource.RLIM_INFINITY else min(nofile, hard)))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def main(connection: Connection, job: dict[str, Any]) -> None:
    """Import `job["model"]` and send the outcome over `connection`."""
    try:
        isolation = isolate_network()
        watch_memory(int(job["memory"]))  # before the limits: RLIMIT_NPROC 0 forbids new threads
        set_limits(job)
        if job.get("probe"):
            send_header(connection, {"status": "probe", "isolation": isolation})
            return
        if job.get("sleep"):  # test hook: hold the worker (sleeping, or burning CPU)
            if job.get("spin"):
                until = time.monotonic() + float(job["sleep"])
                while time.monotonic() < until:
                    pass
            else:
                time.sleep(float(job["sleep"]))
        run_import(connection, job, isolation)
    except MemoryError:
        gc.collect()
        try:
            send_header(connection, {"status": "resource_limit", "limit": "memory"})
        except BaseException:
            os._exit(EXIT_MEMORY)
    finally:
        connection.close()


def send_header(connection: Connection, header: Json) -> None:
    connection.send_bytes(json.dumps(header, allow_nan=False).encode())


def run_import(connection: Connection, job: dict[str, Any], isolation: str) -> None:
    os.chdir(job["directory"])
    model_path = os.path.abspath(job["model"])
    limits = Limits(max_external_files=int(job["max_external_files"]))
    try:
        model = load_model(model_path, external_data_dir=job.get("external_dir"), limits=limits)
    except ModelImportError as error:
        failure = error.as_dict()
        failure["input"] = job["display_name"]
        failure["message"] = str(failure["message"]).replace(model_path, job["display_name"])  # no server paths
        failure["missing"] = error.kind == ErrorKind.IO and error.reason == NOT_FOUND
        send_header(connection, {"status": "error", "error": failure})
        return
    with model:
        entries = catalog_tensors(model.proto)
        graph = json.dumps(render_graph(model, {id(e.tensor): e.url_name for e in entries}), allow_nan=False).encode()
        summary = summarize(model)
        _hide_model_path(summary, model_path, job["display_name"])
        blobs: list[memoryview | bytes] = []
        tensors = [_describe_entry(entry, model_path, blobs) for entry in entries]
        external_files = sorted({t["file"] for t in tensors if t.get("file") not in (None, "model")})
        header = {
            "status": "ok",
            "isolation": isolation,
            "summary": summary,
            "tensors": tensors,
            "external_files": external_files,
            "graph_length": len(graph),
            "blob_lengths": [len(b) for b in blobs],
        }
        send_header(connection, header)
        _send_chunks(connection, graph)
        del graph
        for blob in blobs:
            _send_chunks(connection, blob)


def _send_chunks(connection: Connection, data: memoryview | bytes) -> None:
    view = memoryview(data)
    for start in range(0, len(view), CHUNK_BYTES):
        connection.send_bytes(view[start : start + CHUNK_BYTES])


def _describe_entry(entry: CatalogEntry, model_path: str, blobs: list[memoryview | bytes]) -> Json:
    tensor = entry.tensor
    item: dict[str, Json] = {
        "name": entry.url_name,
        "tensor_name": tensor.name,
        "field_path": entry.field_path,
        "role": entry.role,
        "elem_type": element_type_name(tensor.data_type),
        "elem_type_code": int(tensor.data_type),
        "dims": list(tensor.dims),
        "source": tensor.source,
        "byte_length": tensor.byte_length,
    }
    if tensor.source in (FROM_RAW_DATA, FROM_EXTERNAL) and tensor.data_file is not None:
        item["file"] = "model" if tensor.data_file == model_path else os.path.normpath(tensor.data_file)
        item["offset"] = tensor.data_offset
        item["length"] = tensor.byte_length
        return item
    data = tensor.string_layout() if tensor.data_type == DataType.STRING else tensor.data
    item["length"] = len(data)
    if len(data):
        item["blob"] = len(blobs)
        blobs.append(data)
    return item


def _hide_model_path(summary: Json, model_path: str, display_name: str) -> None:
    """The summary names files as the client does, never by server path."""
    summary["input"] = display_name
    graph = summary.get("graph", {})
    locations = [t.get("location", {}) for t in graph.get("initializers", [])]
    for sparse in graph.get("sparse_initializers", []):
        locations += [sparse["values"].get("location", {}), sparse["indices"].get("location", {})]
    for location in locations:
        if location.get("file") == model_path:
            location["file"] = display_name
