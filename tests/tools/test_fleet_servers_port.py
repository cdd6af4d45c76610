"""tools/fleet_servers.py: PostgreSQL's port, taken by another process between our choice of it and PostgreSQL's
bind (CI's fleet round once skipped 160 tests on "Address already in use"), is chosen again; a server that is here
and does not start is `FleetFailed`, which the fleet fixture fails on, where a missing one is a skip.

Why a process: the point is a real PostgreSQL refused a port another socket holds.
"""

from __future__ import annotations

import socket

import fleet_servers  # tools/, on the path (conftest)
import pytest
from fleet_servers import FleetServers, FleetUnavailable


def test_a_port_taken_meanwhile_is_chosen_again(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        choices = [[taken]]
        real = fleet_servers.free_ports
        monkeypatch.setattr(fleet_servers, "free_ports", lambda count: choices.pop() if choices else real(count))
        try:
            servers = FleetServers()
        except fleet_servers.FleetFailed:
            raise
        except FleetUnavailable as reason:
            pytest.skip(str(reason))  # no PostgreSQL or weed here: nothing to start
        with servers:
            assert not choices and servers.postgres_port != taken
            servers.new_database()  # it answers on the port it was given
