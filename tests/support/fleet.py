"""The fleet store's throwaway servers as a session fixture (a pytest plugin:
tests/conftest.py names it in `pytest_plugins`, so there is one conftest.py).

`fleet_servers` is tools/fleet_servers.py's `FleetServers`: a real PostgreSQL
and a real S3 (SeaweedFS) on 127.0.0.1, started once per session for the first
test that asks, stopped and removed at its end. Tests take what they need from
it: `new_database()`, `new_store_url()`, `environ` (the AWS_* variables an S3
client reads: `monkeypatch.setenv` them, or pass them to a service process),
and the fault controls `stop_postgres()`, `start_postgres()`, `stop_s3()`,
`start_s3()`; a test that stops a server starts it again before it ends.
Where the servers cannot be had (no PostgreSQL binaries, no `weed`, root
without a `postgres` user: `bash tools/dev.sh test` installs Debian's
postgresql as root), the tests that use it skip with the reason; where one
is here and does not start, they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from fleet_servers import FleetServers


@pytest.fixture(scope="session")
def fleet_servers() -> Iterator[FleetServers]:
    """PostgreSQL and S3 for the session (tools/fleet_servers.py); skips with the reason where they cannot be had
    (a missing binary or user), and fails where one that is here did not start (FleetFailed)."""
    from fleet_servers import FleetFailed, FleetServers, FleetUnavailable  # tools/, on the path (conftest)

    try:
        servers = FleetServers()
    except FleetFailed:
        raise
    except FleetUnavailable as reason:
        pytest.skip(str(reason))
    with servers:
        yield servers
