"""The service's listening sockets (`service.server.listeners`), in process:
one port for all front ends, refused where anything listens already, and
the check that closes the race of two services started in the same instant
(each sees the other's SO_REUSEPORT sockets in the kernel's table)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest

from service.server.listeners import PortInUse, open_listeners, others_listening


def reuse_port_listener(port: int = 0) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.fixture()
def ours() -> Iterator[list[socket.socket]]:
    listeners = open_listeners("127.0.0.1", 0, 3, backlog=16)
    yield listeners
    for listener in listeners:
        listener.close()


def test_the_front_ends_sockets_share_one_port_and_no_one_else(ours: list[socket.socket]) -> None:
    assert len({listener.getsockname() for listener in ours}) == 1
    assert all(listener.getsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT) for listener in ours)
    assert others_listening(ours) == []


def test_a_socket_that_joined_the_group_is_seen(ours: list[socket.socket]) -> None:
    """What a second service started in the same instant would find: its sockets and ours in one group."""
    with reuse_port_listener(ours[0].getsockname()[1]) as intruder:
        assert others_listening(ours) == [os.fstat(intruder.fileno()).st_ino]


def test_a_listener_on_another_address_of_the_port_is_not_in_the_way(ours: list[socket.socket]) -> None:
    port = ours[0].getsockname()[1]
    with socket.socket() as elsewhere:
        try:
            elsewhere.bind(("127.0.0.2", port))
        except OSError as error:
            pytest.skip(f"127.0.0.2 cannot be bound here: {error}")
        elsewhere.listen()
        assert others_listening(ours) == []


@pytest.mark.parametrize("count", [1, 3])
def test_a_port_in_use_is_refused_whoever_holds_it(count: int) -> None:
    with reuse_port_listener() as other:
        port = other.getsockname()[1]
        with pytest.raises(PortInUse, match=rf"^port 127\.0\.0\.1:{port} is in use by another process$"):
            open_listeners("127.0.0.1", port, count, backlog=16)
