"""One HTTP/1.1 response read off a raw socket, for the tests that speak to the service byte by byte: `read_response`.

The response must carry a Content-Length (the service's problems and JSON
answers do). What arrived after it (a pipelined answer) is given back.
"""

from __future__ import annotations

import re
import socket

STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")
CONTENT_LENGTH = re.compile(rb"(?im)^content-length: *(\d+)")


def read_response(connection: socket.socket, buffered: bytes, timeout: float = 60) -> tuple[int, bytes, bytes, bytes]:
    """One response with a Content-Length, after `buffered` (bytes already read): (status, head, body, what came after it)."""
    connection.settimeout(timeout)
    data = buffered
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        assert chunk, f"the connection closed before a whole response: {data!r}"
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    status, length = STATUS.match(head), CONTENT_LENGTH.search(head)
    assert status and length, head
    while len(rest) < int(length.group(1)):
        chunk = connection.recv(65536)
        assert chunk, "the connection closed inside a response's body"
        rest += chunk
    return int(status.group(1)), head, rest[: int(length.group(1))], rest[int(length.group(1)) :]
