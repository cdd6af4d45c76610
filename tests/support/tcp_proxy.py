"""A TCP proxy on the loopback between a client and a service, in threads:
what the tests of resumable uploads put on the wire between them.

`TcpProxy(upstream_port)` listens on a port of its own and forwards every
connection both ways. It counts the bytes it forwards towards the service
(`sent`), may cut one connection (the first to carry more than `cut_after`
bytes upstream: both sides closed at once, as a dropped network would), and
may pace the upstream direction to `rate` bytes per second (changed at any
time; None: as fast as it comes). `go_away()` is a stopped server seen from
the client: its connections cut, its port refusing new ones until `come_back()`.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType

CHUNK = 1 << 16


class TcpProxy:
    def __init__(self, upstream_port: int, *, cut_after: int | None = None, rate: float | None = None) -> None:
        self.upstream_port = upstream_port
        self.cut_after = cut_after
        self.rate = rate
        self.sent = 0
        self.cuts = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._open: set[socket.socket] = set()
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> TcpProxy:
        self._acceptor.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self._closed = True
        self._listener.close()
        with self._lock:
            for held in list(self._open):
                _close(held)

    def go_away(self) -> None:
        """Refuse connections (the listener closed) and cut the open ones, as a stopped server would."""
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the acceptor's accept()
        self._listener.close()
        self._acceptor.join(5)
        with self._lock:
            for held in list(self._open):
                _close(held)

    def come_back(self) -> None:
        """Listen again, on the same port."""
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self.connections += 1
                self._open |= {client, upstream}
            threading.Thread(target=self._upstream, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._downstream, args=(upstream, client), daemon=True).start()

    def _upstream(self, client: socket.socket, upstream: socket.socket) -> None:
        carried = 0
        paced_since, paced_bytes, paced_rate = time.monotonic(), 0, self.rate
        try:
            while data := client.recv(CHUNK):
                cut = False
                with self._lock:
                    if self.cut_after is not None and carried + len(data) > self.cut_after:
                        data = data[: self.cut_after - carried]
                        self.cut_after = None  # once
                        self.cuts += 1
                        cut = True
                upstream.sendall(data)
                carried += len(data)
                with self._lock:
                    self.sent += len(data)
                if cut:
                    break
                if self.rate != paced_rate:  # changed meanwhile: paced from now on
                    paced_since, paced_bytes, paced_rate = time.monotonic(), 0, self.rate
                elif paced_rate:
                    paced_bytes += len(data)
                    ahead = paced_since + paced_bytes / paced_rate - time.monotonic()
                    if ahead > 0:
                        time.sleep(ahead)
        except OSError:
            pass
        finally:
            self._drop(client, upstream)

    def _downstream(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while data := upstream.recv(CHUNK):
                client.sendall(data)
        except OSError:
            pass
        finally:
            self._drop(client, upstream)

    def _drop(self, *sockets: socket.socket) -> None:
        with self._lock:
            for held in sockets:
                self._open.discard(held)
        for held in sockets:
            _close(held)


def _close(held: socket.socket) -> None:
    with contextlib.suppress(OSError):
        held.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        held.close()
