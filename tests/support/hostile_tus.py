"""A hostile tus service on the loopback, in threads: what the client's origin
rule and resume bound are tested (and red-teamed, bench/redteam.py) against.

`HostileTus(mode)` serves `POST /uploads`, `HEAD` and `PATCH /uploads/ID` and
`POST /models` over real HTTP/1.1, and records every request (`log`: method,
path, its `Authorization`) and the PATCH body bytes it read (`received`).
Its modes:

- "elsewhere": `POST /uploads` answers 201 with a `Location` on another port
  of the loopback, that of `elsewhere`, a `Listener`;
- "seesaw": the upload's offset goes forward, then back, forever: a PATCH
  from offset 0 is answered 204 with half the file held, the next one 204
  with nothing held. Forever but for the tests' sake: `lasting` seconds,
  after which every PATCH is a 400 (a client that had not given up by then
  fails on that instead of hanging the test).

`Listener` is a bare listening socket that accepts whatever comes, counts
the connections and bytes (`connections`, `received`), and closes each
connection once it has been silent for 0.2 s.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Literal

Mode = Literal["elsewhere", "seesaw"]
UPLOAD = "/uploads/0123456789abcdef0123456789abcdef"


class Listener:
    def __init__(self) -> None:
        self.connections = 0
        self.received = b""
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return
            self.connections += 1
            with connection, contextlib.suppress(OSError):
                connection.settimeout(0.2)  # what came in that long, then closed: a client that came here fails fast
                while data := connection.recv(65536):
                    self.received += data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)  # wakes the accept (closing alone does not)
        self._socket.close()
        self._thread.join(5)


class HostileTus:
    def __init__(self, mode: Mode, *, lasting: float = 30.0) -> None:
        self.mode = mode
        self.until = time.monotonic() + lasting
        self.log: list[tuple[str, str, str | None]] = []
        self.received = 0
        self.length = 0
        self.held = 0
        self.elsewhere = Listener()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port: int = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    def __enter__(self) -> HostileTus:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.elsewhere.close()

    def patches(self) -> int:
        return sum(1 for method, _, _ in self.log if method == "PATCH")

    def _answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str]]:
        """The status and headers for one request (its body read)."""
        if method == "POST" and path == "/uploads":
            self.length, self.held = int(headers.get("upload-length", "0")), 0
            where = f"http://127.0.0.1:{self.elsewhere.port}{UPLOAD}" if self.mode == "elsewhere" else UPLOAD
            return 201, {"Location": where, "Upload-Offset": "0"}
        if path != UPLOAD:
            return 404, {}
        if method == "HEAD":
            return 200, {"Upload-Offset": str(self.held), "Upload-Length": str(self.length)}
        if method == "PATCH":
            self.received += len(body)
            if time.monotonic() > self.until:
                return 400, {}
            self.held = self.length // 2 if headers.get("upload-offset") == "0" else 0  # forward, then back
            return 204, {"Upload-Offset": str(self.held)}
        return 405, {}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        tus = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _serve(self) -> None:
                headers = {name.lower(): value for name, value in self.headers.items()}
                tus.log.append((self.command, self.path, headers.get("authorization")))
                body = self.rfile.read(int(headers.get("content-length", "0") or 0))
                status, more = tus._answer(self.command, self.path, headers, body)
                self.send_response(status)
                for name, value in (more | {"Tus-Resumable": "1.0.0", "Content-Length": "0"}).items():
                    self.send_header(name, value)
                self.end_headers()

            do_POST = do_HEAD = do_PATCH = do_GET = do_DELETE = _serve

        return Handler
