"""The web server's pins: uvicorn and h11 as `pyproject.toml` bounds them,
and the few of their internals `service.server` relies on still there.

`service.server.h11_protocol` subclasses uvicorn's H11Protocol and reads
h11's reader state (the Content-Length body fast path), and
`service.server.zero_copy` writes through uvicorn's request cycle. A
release outside the tested range, or one that renamed what they use, must
fail here with the name of what moved, not as a server misbehaving."""

from __future__ import annotations

import tomllib
from importlib.metadata import version

import h11
from h11._readers import ContentLengthReader
from packaging.requirements import Requirement
from support.paths import REPO
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle


def _pinned(name: str) -> Requirement:
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(requirement for requirement in map(Requirement, dependencies) if requirement.name == name)


def test_uvicorn_and_h11_are_within_their_tested_ranges() -> None:
    for name in ("uvicorn", "h11"):
        requirement = _pinned(name)
        assert requirement.specifier, f"{name} has no version range in pyproject.toml"
        assert requirement.specifier.contains(version(name)), f"{name} {version(name)} is outside {requirement.specifier}"


def test_the_internals_the_server_uses_are_still_there() -> None:
    reader = ContentLengthReader(10)
    assert reader._remaining == 10  # h11's count of a body's bytes still due
    connection = h11.Connection(h11.SERVER)
    assert connection._reader is not None and connection._receive_buffer is not None
    for method in ("data_received", "handle_events", "on_response_complete", "connection_made"):
        assert callable(getattr(H11Protocol, method)), method
    cycle_fields = RequestResponseCycle.__init__.__code__.co_names
    for attribute in ("body", "message_event", "flow", "conn", "transport", "disconnected", "response_started", "response_complete"):
        assert attribute in cycle_fields, f"uvicorn's RequestResponseCycle no longer sets {attribute}"
