"""When and how long the clients wait before sending a request again: the
one retry policy of `Client` and `AsyncClient`.

Owns `Retry` (the numbers: how many more attempts, the first backoff, the
longest backoff, the longest `Retry-After` worth waiting for) and `Attempts`
(one request's attempts: after each failure, the seconds to wait before the
next, or the error raised once the policy gives up; each retry is noted to
an `on_retry` callback and logged on the `service.client` logger). What is
retried:

- a 503 answer, for any method (the service did not act on the request):
  after its `Retry-After`, or the backoff when it sent none; one asking for
  more than `max_wait` seconds is raised at once;
- a connection that could not be made (`httpx.ConnectError`,
  `httpx.ConnectTimeout`: no byte of the request was sent), for any method;
- a connection reset or closed before the whole answer came
  (`httpx.ReadError`, `httpx.WriteError`, `httpx.RemoteProtocolError`), for
  the idempotent methods only (GET, HEAD, DELETE, PUT, OPTIONS): a POST cut
  off may have been acted on, so it is raised.

The backoff doubles from `backoff` and stays at most `max_delay`. The
resumable uploads (`service.client.resumable`) read the same numbers but
run their own loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from service.client._common import ServiceError, retry_after_seconds

UNAVAILABLE = 503
IDEMPOTENT = frozenset({"GET", "HEAD", "DELETE", "PUT", "OPTIONS"})
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout)  # the request never left: safe to send again whatever it is
CUT_OFF = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)  # maybe acted on: again only if idempotent
log = logging.getLogger("service.client")

Outcome = httpx.Response | httpx.TransportError  # a failed attempt: an error answer (its body read) or a transport error


@dataclass(frozen=True, slots=True)
class Retry:
    """At most `attempts` more attempts after the first; the backoff starts
    at `backoff` seconds and doubles, at most `max_delay`; a 503's
    `Retry-After` is waited as it is, unless above `max_wait` (then the 503
    is raised at once)."""

    attempts: int = 3
    backoff: float = 1.0
    max_wait: float = 60.0
    max_delay: float = 30.0

    def backoff_delay(self, attempt: int) -> float:
        """The backoff before attempt `attempt + 1` (`attempt` from 0)."""
        return min(self.max_delay, self.backoff * 2.0**attempt)

    def delay(self, response: httpx.Response, attempt: int) -> float | None:
        """Seconds to wait before retrying after `response` (the `attempt`-th
        answer, from 0), or None to give up and raise."""
        if response.status_code != UNAVAILABLE or attempt >= self.attempts:
            return None
        wait = retry_after_seconds(response)
        if wait is None:
            return self.backoff_delay(attempt)
        return wait if wait <= self.max_wait else None

    def delay_after_error(self, method: str, error: httpx.TransportError, attempt: int) -> float | None:
        """Seconds to wait before sending a `method` request again after
        `error`, or None to give up and raise."""
        if attempt >= self.attempts:
            return None
        if isinstance(error, NOT_SENT) or (isinstance(error, CUT_OFF) and method.upper() in IDEMPOTENT):
            return self.backoff_delay(attempt)
        return None


@dataclass(frozen=True, slots=True)
class RetryNote:
    """One retry, as told to `on_retry`: the `attempt`-th retry (from 1) of
    `attempts` at most, after `wait` seconds, because of `cause` (`503` or
    the transport error's class name)."""

    method: str
    url: str
    attempt: int
    attempts: int
    wait: float
    cause: str
    detail: str


OnRetry = Callable[[RetryNote], None]


class Attempts:
    """One request's attempts under `policy`: `wait_after(outcome)` after each
    failed one."""

    def __init__(self, policy: Retry, request: httpx.Request, on_retry: OnRetry | None) -> None:
        self.policy = policy
        self.method = request.method
        self.url = str(request.url)
        self.on_retry = on_retry
        self.failed = 0

    def wait_after(self, outcome: Outcome) -> float:
        """The seconds to wait before the next attempt; raises `ServiceError`
        (an error answer) or the transport error when the policy gives up."""
        if isinstance(outcome, httpx.Response):
            wait = self.policy.delay(outcome, self.failed)
            if wait is None:
                raise ServiceError.from_response(outcome)
            cause, detail = str(outcome.status_code), outcome.reason_phrase
        else:
            wait = self.policy.delay_after_error(self.method, outcome, self.failed)
            if wait is None:
                raise outcome
            cause, detail = type(outcome).__name__, str(outcome)
        self.failed += 1
        note = RetryNote(self.method, self.url, self.failed, self.policy.attempts, wait, cause, detail)
        log.info("retry %d of %d of %s %s in %.2f s after %s: %s", note.attempt, note.attempts, note.method, note.url, wait, cause, detail)
        if self.on_retry is not None:
            self.on_retry(note)
        return wait
