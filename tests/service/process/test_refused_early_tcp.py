"""A 2 GiB upload refused by its model part, against a real server process
on loopback: the answer comes while the body is still being sent, and the
server closes the connection without reading the rest.

Why a process: the point is the connection itself: a client on a socket
still sending a declared 2 GiB body reads the refusal before it has sent
5% of it, and the server's end of the socket closes (the body is never
read whole); the ASGI transport has neither a socket nor its end. The
answer's contents are tested in process (api/test_refused_early.py).
"""

from __future__ import annotations

import json
import re
import select
import socket
import time
from collections.abc import Iterator

import pytest
from support.raw_http import read_response
from support.service_harness import ServiceProcess, copy_samples, serving
from support.small_models import external_weight_model

BOUNDARY = "refused-early-tcp"
GIB = 1 << 30
EXTERNAL_BYTES = 2 * GIB
RATE = 64 << 20  # bytes a second the client sends at most: about a 500 Mbit/s link
ANSWERED_BEFORE = 0.05  # of the external part: sent when the answer comes
GIVE_UP = 0.25  # the client stops sending here: the server read on without answering
CHUNK = 256 << 10


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("refused-early-tcp")
    with serving(folder / "store", copy_samples(folder / "root"), "--http-workers", "1", "--max-upload-total", "4GiB") as service:
        yield service


def _request_start(model: bytes) -> bytes:
    """The request's head and its body up to the external part's first byte (the body declared whole)."""
    body_head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"; filename="model.onnx"\r\n\r\n'.encode()
        + model
        + f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="external_data"; filename="weights.bin"\r\n\r\n'.encode()
    )
    length = len(body_head) + EXTERNAL_BYTES + len(f"\r\n--{BOUNDARY}--\r\n")
    head = f"POST /models HTTP/1.1\r\nHost: test\r\nContent-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
    head += f"Content-Length: {length}\r\n\r\n"
    return head.encode() + body_head


def _sent_until_answered(connection: socket.socket, start: bytes) -> tuple[int, bytes]:
    """Send `start`, then the external part at RATE until the server answers: (its bytes sent by then, what came)."""
    connection.sendall(start)
    connection.setblocking(False)
    zeros = memoryview(bytes(CHUNK))
    sent = 0
    began = time.monotonic()
    while True:
        assert sent < GIVE_UP * EXTERNAL_BYTES, f"no answer after {sent} bytes of the external part"
        early = sent / RATE - (time.monotonic() - began)
        readable, writable, _ = select.select([connection], [connection] if early <= 0 else [], [], max(early, 0.0) or 1.0)
        if readable:
            return sent, connection.recv(65536)
        if writable:
            sent += connection.send(zeros)


def _closed_by_the_server(connection: socket.socket) -> bool:
    """Reading ends (EOF, or the reset of a socket closed with unread bytes) and sending on fails."""
    try:
        while connection.recv(65536):
            pass
    except ConnectionResetError:
        pass
    zeros = bytes(CHUNK)
    try:
        for _ in range(256):  # up to 64 MiB more: a peer still reading takes them
            connection.sendall(zeros)
    except (BrokenPipeError, ConnectionResetError):
        return True
    return False


@pytest.mark.parametrize(
    ("model", "kind", "field_path"),
    [
        (b"\x08", "Malformed", "ModelProto"),  # a varint cut off
        (external_weight_model("../weights.bin", 16), "ExternalData", "ModelProto.graph.initializer[0]"),  # outside the rules
    ],
    ids=["malformed", "location-outside-the-rules"],
)
def test_a_2_gib_upload_refused_by_its_model_part_is_answered_before_it_arrives(
    server: ServiceProcess, model: bytes, kind: str, field_path: str
) -> None:
    with socket.create_connection(("127.0.0.1", server.port)) as connection:
        sent, first = _sent_until_answered(connection, _request_start(model))
        status, head, body, _ = read_response(connection, first, timeout=30)
        problem = json.loads(body)
        assert sent < ANSWERED_BEFORE * EXTERNAL_BYTES, f"answered after {sent} of {EXTERNAL_BYTES} bytes"
        assert status == 422, problem
        assert re.search(rb"(?im)^connection: *close\r?$", head), head
        assert problem["kind"] == kind and problem["field_path"] == field_path, problem
        assert isinstance(problem["offset"], int)
        assert _closed_by_the_server(connection)
    deadline = time.monotonic() + 10
    while server.temporary_files() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert server.temporary_files() == []
    assert "Traceback" not in server.log.read_text(errors="replace")
