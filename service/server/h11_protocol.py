"""The HTTP/1.1 connection edge: uvicorn's h11 protocol, hardened, and the
response-header middleware.

Owns `protocol_class(header_timeout)`, the class `python -m service` gives
uvicorn (`http=`).

What the protocol adds to `uvicorn.protocols.http.h11_impl.H11Protocol`:

- A header deadline. uvicorn has no timeout on a request's headers, only a
  keep-alive timeout on a silent idle connection, cancelled by the first byte
  that arrives: a client sending a partial request (or a byte now and then)
  held the connection forever. Here a connection waiting for a request's
  headers (just opened, or kept alive after a response ended) must complete
  them within `header_timeout` seconds of that moment; bytes arriving do not
  move the deadline. (A body still arriving after its request's response,
  say a 405 or 413 sent before the body was read, counts as waiting for the
  next headers: nobody reads it.) When it passes the connection is closed,
  after a 408 problem if part of a request had come (an idle connection is
  closed quietly, like uvicorn's keep-alive timeout does). A request's body
  is not covered: it has its own deadline, `--body-timeout`, where it is read.
- Framing that RFC 9112 §6.1 calls smuggling: h11 accepts a request with both
  Content-Length and Transfer-Encoding (Transfer-Encoding wins) and keeps the
  connection. Here it is a 400 and the connection is closed.
- A bound on a request's head (request line and header fields: h11's
  `max_incomplete_event_size`, 16 KiB unless uvicorn's config sets it). h11
  only enforces it on a head still incomplete, so a bigger head arriving in
  one read went through. Here a head over the bound is a 431 and the
  connection is closed, in one read or many.
- A fast path for request bodies with a Content-Length (`data_received`):
  once h11 is reading such a body and holds nothing unparsed, the bytes a
  read brings are handed to the request as they are, without passing through
  h11's receive buffer (which copied every byte twice and cost more CPU than
  the upload's hashing). h11's count of the bytes still due is kept, so it
  ends the body, frames what follows and sees a short body exactly as before.
  While more than `BODY_READ_SIZE` bytes of such a body are due, the socket
  is read 1 MiB at a time instead of asyncio's 256 KiB. Together with
  `service.imports.sources.body_pipe` this took an 805 MB upload from 4.0 s of the
  front end's CPU to 1.4 s.
- Zero-copy sends (`service.server.zero_copy`): on a plain-TCP connection
  each request's scope offers ASGI's `http.response.zerocopy`, so a tensor's
  bytes go from the file to the socket with `sendfile`.
- The protocol's own error answers (h11 refused the request: 400; a head too
  big: 431; the header deadline: 408) are RFC 9457 problems with
  `Connection: close` and `X-Content-Type-Options: nosniff`, not uvicorn's
  text/plain 400; when h11's state no longer allows a response the
  connection is just closed (uvicorn's 400 raised there, out of
  `data_received`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

import h11
from h11._connection import DEFAULT_MAX_INCOMPLETE_EVENT_SIZE
from h11._readers import ContentLengthReader
from uvicorn.config import Config
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.h11_impl import STATUS_PHRASES, H11Protocol
from uvicorn.server import ServerState

from service.api.nosniff import NOSNIFF_RAW_HEADER
from service.api.problems import PROBLEM_MEDIA_TYPE, PROBLEMS, ProblemType
from service.server.zero_copy import offer_zero_copy

log = logging.getLogger("service")

INVALID_REQUEST = "the request is not valid HTTP/1.1"
SMUGGLING = "a request must not have both Content-Length and Transfer-Encoding (RFC 9112 section 6.1)"
# The service's one 408 type (service.problems; the body deadline uses it too)
REQUEST_TIMEOUT = PROBLEMS["request-timeout"]
BODY_READ_SIZE = 1 << 20  # bytes per read while a large body arrives
# Only this protocol answers 431: the app never sees such a request
HEAD_TOO_LARGE = ProblemType("request-header-fields-too-large", "The request's header fields are too large", 431)


class StrictConnection(h11.Connection):
    """h11's server side, refusing what h11 lets through: a request with both
    Content-Length and Transfer-Encoding, and a request head over `max_head`
    bytes that arrived whole. `refusal` is the problem and detail of the last
    request refused here or for its head's size (None: refused by h11 for
    another reason)."""

    refusal: tuple[ProblemType, str] | None = None

    def __init__(self, max_head: int) -> None:
        super().__init__(h11.SERVER, max_head)
        self.max_head = max_head

    def next_event(self) -> Any:  # h11's own annotation names private event types
        head_expected = self.their_state is h11.IDLE
        buffered = len(self._receive_buffer)  # h11's buffer: what a request's head consumed of it is its size
        too_large = (HEAD_TOO_LARGE, f"a request's line and header fields must fit in {self.max_head} bytes")
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as error:
            if head_expected and error.error_status_hint == 431:  # h11: an incomplete head over the bound
                self.refusal = too_large
            raise
        if isinstance(event, h11.Request):
            if buffered - len(self._receive_buffer) > self.max_head:
                self.refusal = too_large
                raise h11.RemoteProtocolError(too_large[1], error_status_hint=431)
            names = {name for name, _ in event.headers}  # h11 gives them lower-cased
            if b"content-length" in names and b"transfer-encoding" in names:
                self.refusal = (PROBLEMS["bad-request"], SMUGGLING)
                raise h11.RemoteProtocolError(SMUGGLING, error_status_hint=400)
        return event


def problem_bytes(problem: ProblemType, detail: str) -> bytes:
    """An RFC 9457 body without `instance`: the protocol answers before it has a request target."""
    body = {"type": problem.uri, "title": problem.title, "status": problem.status, "detail": detail}
    return json.dumps(body).encode()


class HardenedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and strict framing (see the module)."""

    header_timeout: float = 10.0  # set per server by `protocol_class`

    def __init__(
        self, config: Config, server_state: ServerState, app_state: dict[str, Any], _loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        limit = config.h11_max_incomplete_event_size
        self.conn = StrictConnection(DEFAULT_MAX_INCOMPLETE_EVENT_SIZE if limit is None else limit)
        self.header_deadline: asyncio.TimerHandle | None = None
        self.read_size: int | None = None

    # The header deadline: armed while the connection waits for a request's
    # headers, from the moment it starts waiting; data does not re-arm it.

    def _waiting_for_headers(self) -> bool:
        """Both sides idle (a new connection, or kept alive after a response),
        or our response done while the client still sends the request's body,
        which nobody reads any more: the next headers cannot be far behind."""
        ours, theirs = self.conn.our_state, self.conn.their_state
        return (ours is h11.IDLE and theirs is h11.IDLE) or (ours is h11.DONE and theirs is h11.SEND_BODY)

    def _update_header_deadline(self) -> None:
        if self.transport.is_closing() or not self._waiting_for_headers():
            self._cancel_header_deadline()
        elif self.header_deadline is None:
            self.header_deadline = self.loop.call_later(self.header_timeout, self._header_deadline_passed)

    def _cancel_header_deadline(self) -> None:
        if self.header_deadline is not None:
            self.header_deadline.cancel()
            self.header_deadline = None

    def _header_deadline_passed(self) -> None:
        self.header_deadline = None
        if self.transport.is_closing() or not self._waiting_for_headers():
            return
        if self.conn.our_state is not h11.IDLE or not self.conn.trailing_data[0]:
            # Close quietly, as the keep-alive timeout does: nothing of a new
            # request came (a 408 here could be read by a client as the answer
            # to the request it is sending just now), or the client is still
            # sending the body of a request that has had its response.
            with contextlib.suppress(h11.LocalProtocolError):
                self.conn.send(h11.ConnectionClosed())
            self.transport.close()
            return
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
        log.info("closing the connection of %s: no complete request headers within %gs", client, self.header_timeout)
        self._answer_and_close(REQUEST_TIMEOUT, f"send a request's headers within {self.header_timeout:g} s")

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.read_size = getattr(transport, "max_size", None)  # asyncio's socket transport: bytes per recv(), 256 KiB
        self._update_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_header_deadline()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        rest = self._take_body(data)
        if rest:
            super().data_received(rest)
        elif self.conn.their_state is h11.SEND_BODY and self._body_due() == 0:
            self.handle_events()  # the body is complete: h11 ends it

    def _body_due(self) -> int | None:
        """The bytes of a Content-Length body h11 still waits for (None: no such body being read)."""
        reader = self.conn._reader
        return reader._remaining if isinstance(reader, ContentLengthReader) else None

    def _take_body(self, data: bytes) -> bytes:
        """Hand the part of `data` that belongs to the current request's body
        (Content-Length framing, nothing buffered in h11) straight to the
        request; what is left (the next request, or everything when the fast
        path does not apply) goes through h11."""
        conn, reader = self.conn, self.conn._reader
        if conn.their_state is not h11.SEND_BODY or not isinstance(reader, ContentLengthReader) or conn._receive_buffer:
            return data
        taken = min(len(data), reader._remaining)
        if taken == 0:
            return data
        reader._remaining -= taken
        if self.read_size is not None:  # a large body: fewer, larger reads (less work per byte); else the default
            self.transport.max_size = BODY_READ_SIZE if reader._remaining >= BODY_READ_SIZE else self.read_size  # type: ignore[attr-defined]
        body, rest = (data, b"") if taken == len(data) else (data[:taken], data[taken:])
        cycle = self.cycle
        if conn.our_state is h11.DONE or cycle is None:  # answered already: nobody reads the body
            return rest
        if cycle.body:
            cycle.body += body
        else:
            cycle.body = body  # type: ignore[assignment]  # bytes, not a copy: uvicorn's receive() passes it on as is
        if len(cycle.body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()
        return rest

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self.cycle is not None and self.transport.get_extra_info("sslcontext") is None:
            offer_zero_copy(self.cycle, self.loop)  # a new request: its body may be sent with sendfile
        self._update_header_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._update_header_deadline()

    def shutdown(self) -> None:
        self._cancel_header_deadline()
        super().shutdown()

    # The protocol's own answers.

    def send_400_response(self, msg: str) -> None:
        problem, detail = PROBLEMS["bad-request"], INVALID_REQUEST
        if isinstance(self.conn, StrictConnection) and self.conn.refusal is not None:
            (problem, detail), self.conn.refusal = self.conn.refusal, None
        self._answer_and_close(problem, detail)

    def _answer_and_close(self, problem: ProblemType, detail: str) -> None:
        """A problem with `Connection: close`, then close; only close when h11
        can no longer send a response on this connection."""
        self._cancel_header_deadline()
        if self.conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            body = problem_bytes(problem, detail)
            headers = [
                (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
                NOSNIFF_RAW_HEADER,
            ]
            try:
                response = h11.Response(status_code=problem.status, headers=headers, reason=STATUS_PHRASES[problem.status])
                for event in (response, h11.Data(data=body), h11.EndOfMessage()):
                    self.transport.write(self.conn.send(event) or b"")
            except h11.LocalProtocolError:
                pass  # h11 refused to frame it: the close below is the answer
        self.transport.close()


def protocol_class(header_timeout: float) -> type[HardenedH11Protocol]:
    """The protocol class for uvicorn's `http=` (uvicorn instantiates the class
    itself, so the setting travels as a class attribute)."""

    class ConfiguredH11Protocol(HardenedH11Protocol):
        pass

    ConfiguredH11Protocol.header_timeout = header_timeout
    return ConfiguredH11Protocol
