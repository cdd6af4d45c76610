"""Refused early (issue 57): the time to the refusal of a 2 GiB upload whose model part is refused.

One real `python -m service` on 127.0.0.1 (`--http-workers 1`, a local store
in a temporary folder, removed at the end, `--max-upload-total 4GiB`), run
from this checkout or from `--tree DIR` (another checkout: the figure
before). For each model part refused by its own bytes:

- malformed: one byte, a varint cut off;
- a tensor too large: one float32 weight of 2^29 + 1 elements (2^31 + 4
  bytes) in the external file `w.bin`, past the specification's limit;
- a location outside the rules: the weight's location `../w.bin`;

a client on a socket sends one multipart request: the model part, then one
`external_data` part `w.bin` of 2 GiB of zeros, made as it is sent (no
file), as fast as the socket takes them, while watching for the answer.
Reported per case, the median of RUNS: the seconds from the request's first
byte to the answer's status line, the body's bytes sent by then, the status
and kind answered, and whether the server closed the connection after the
answer (the socket at EOF or reset, and sending on failing) or kept it.

Usage: .venv/bin/python bench/refusal_bench.py [--runs 3] [--tree DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import select
import socket
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from fleet_bench import TREE, Server, run_stopping_on_interrupt, terminated_as_exit  # bench/ is on sys.path as this script's folder
from onnx import TensorProto, helper, numpy_helper
from read_bench import machine

GIB = 1 << 30
EXTERNAL_BYTES = 2 * GIB
CHUNK = 1 << 20
BOUNDARY = "refusal-bench"
TAIL = f"\r\n--{BOUNDARY}--\r\n".encode()
STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")
ANSWER_SECONDS = 120.0  # no answer by then: the run is reported as such


def external_model(location: str, elements: int) -> bytes:
    """One float32 weight of `elements` in the external file `location` (its dims say so; no bytes here)."""
    weight = numpy_helper.from_array(np.zeros(1, np.float32), "w")
    weight.ClearField("raw_data")
    weight.ClearField("dims")
    weight.dims.append(elements)
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(elements * 4))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [elements])
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "refused", [], [output], [weight])
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    return data


CASES = {
    "malformed": b"\x08",
    "a tensor of 2^31 + 4 bytes": external_model("w.bin", (1 << 29) + 1),
    "a location outside the rules": external_model("../w.bin", 1024),
}


@dataclass
class Run:
    seconds: float  # from the first byte sent to the answer's status line
    sent: int  # the body's bytes sent by then
    status: int
    kind: str
    closed: bool  # the server closed the connection after the answer


def request_start(model: bytes) -> bytes:
    """The request's head and body up to the external part's bytes (the whole body declared)."""
    body_head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"; filename="model.onnx"\r\n\r\n'.encode()
        + model
        + f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="external_data"; filename="w.bin"\r\n\r\n'.encode()
    )
    length = len(body_head) + EXTERNAL_BYTES + len(TAIL)
    head = f"POST /models HTTP/1.1\r\nHost: bench\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
    head += f"Content-Length: {length}\r\n\r\n"
    return head.encode() + body_head


def one_run(port: int, model: bytes) -> Run:
    start = request_start(model)
    rest = EXTERNAL_BYTES + len(TAIL)  # the body's bytes after `start`: the external part's zeros, then the tail
    zeros = memoryview(bytes(CHUNK))
    with socket.create_connection(("127.0.0.1", port)) as connection:
        began = time.perf_counter()
        connection.sendall(start)
        position, answer = 0, b""
        connection.setblocking(False)
        while time.perf_counter() - began < ANSWER_SECONDS:
            readable, writable, _ = select.select([connection], [connection] if position < rest else [], [], 1.0)
            if readable:
                answer = connection.recv(65536)
                break
            if writable:
                ahead = EXTERNAL_BYTES - position
                piece = zeros[: min(CHUNK, ahead)] if ahead > 0 else memoryview(TAIL)[-ahead:]
                position += connection.send(piece)
        seconds = time.perf_counter() - began
        status, kind, head = read_answer(connection, answer)
        closed = b"connection: close" in head.lower() and closed_by_the_server(connection)
    return Run(seconds, len(start) + position, status, kind, closed)


def read_answer(connection: socket.socket, data: bytes) -> tuple[int, str, bytes]:
    connection.setblocking(True)
    connection.settimeout(ANSWER_SECONDS)
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return 0, "no answer", data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    match = STATUS.match(head)
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    while length and len(body) < int(length.group(1)):
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    with contextlib.suppress(ValueError):
        return (int(match.group(1)) if match else 0), str(json.loads(body).get("kind") or ""), head
    return (int(match.group(1)) if match else 0), "", head


def closed_by_the_server(connection: socket.socket) -> bool:
    connection.settimeout(10)
    try:
        while connection.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    try:
        for _ in range(64):
            connection.sendall(bytes(CHUNK))
    except (BrokenPipeError, ConnectionResetError):
        return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, help="run the service from this checkout (the figure before)")
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    if options.tree is not None:
        TREE[0] = options.tree.resolve()
    print(machine())
    print(f"the service from {TREE[0]}")
    results: dict[str, list[Run]] = {}
    with terminated_as_exit(), tempfile.TemporaryDirectory(prefix="refusal-bench-") as folder:
        server = Server("service", Path(folder), ["--store", str(Path(folder) / "store"), "--max-upload-total", "4GiB"], {}, 2)
        try:
            for name, model in CASES.items():
                results[name] = [one_run(server.port, model) for _ in range(options.runs)]
        finally:
            server.stop()
    print("| model part | time to the answer: median (each run) | body sent by then | answer | connection |")
    print("| --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        median = statistics.median(run.seconds for run in runs)
        each = ", ".join(f"{run.seconds:.2f}" for run in runs)
        sent = statistics.median(run.sent for run in runs)
        answers = {f"{run.status} {run.kind}" for run in runs}
        closed = {"closed by the server" if run.closed else "kept open" for run in runs}
        print(
            f"| {name} | {median:.2f} s ({each}) | {sent / 1e6:,.0f} MB of {EXTERNAL_BYTES / 1e6:,.0f} MB "
            f"({sent / EXTERNAL_BYTES:.1%}) | {', '.join(sorted(answers))} | {', '.join(sorted(closed))} |"
        )
    if options.json is not None:
        options.json.write_text(json.dumps({name: [asdict(run) for run in runs] for name, runs in results.items()}, indent=1))


if __name__ == "__main__":
    run_stopping_on_interrupt(main)
