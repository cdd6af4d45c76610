"""The import test hooks, read from request headers (refused unless test hooks are on).

Owns `import_hooks(request, settings)`: `X-Test-Worker-Sleep: 2.5` (the
worker sleeps) or `spin:2.5` (it burns that much CPU time), and `X-Test-Pause-Before-Commit: 2`
(a wait between the worker's answer and the commit, to swap links under a
running import) and `X-Test-Pause-After-Upload: 2` (a wait between the
content's upload and its record, to kill a replica mid-commit), as the use
case's `ImportHooks`.
"""

from __future__ import annotations

from fastapi import Request

from service.api.problems import ProblemError
from service.imports.hooks import ImportHooks
from service.settings import Settings

SLEEP_HEADER = "x-test-worker-sleep"
PAUSE_HEADER = "x-test-pause-before-commit"
HOLD_HEADER = "x-test-pause-after-upload"


def _header(request: Request, settings: Settings, name: str) -> str | None:
    value = request.headers.get(name)
    if value is not None and not settings.test_hooks:
        raise ProblemError("bad-request", f"{name} is a test hook, and test hooks are off")
    return value


def _seconds(text: str, most: float, name: str, form: str) -> float:
    try:
        return max(0.0, min(most, float(text)))
    except ValueError:
        raise ProblemError("bad-request", f"{name} must be {form}") from None


def import_hooks(request: Request, settings: Settings) -> ImportHooks:
    sleep_header = _header(request, settings, SLEEP_HEADER)
    pause_header = _header(request, settings, PAUSE_HEADER)
    sleep, spin = settings.debug_worker_sleep, False
    if sleep_header is not None:
        spin = sleep_header.startswith("spin:")
        sleep = _seconds(sleep_header.removeprefix("spin:"), 600.0, SLEEP_HEADER, "a number of seconds, or spin: and one")
    pause = 0.0 if pause_header is None else _seconds(pause_header, 60.0, PAUSE_HEADER, "a number of seconds")
    hold_header = _header(request, settings, HOLD_HEADER)
    hold = 0.0 if hold_header is None else _seconds(hold_header, 60.0, HOLD_HEADER, "a number of seconds")
    return ImportHooks(sleep, spin, pause, hold)
