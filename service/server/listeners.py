"""The service's listening sockets, made by the supervisor before anything
else starts, and the refusal of a port another process already serves.

Owns `open_listeners(host, port, count, backlog)` and `PortInUse`.

One front end: one socket, bound and listening without SO_REUSEPORT, so the
kernel itself refuses the port to every other process while it is open.

Several (`--http-workers N`): one listening socket per front end, each with
SO_REUSEPORT (the kernel spreads new connections evenly over them;
`service.server.front_ends`). SO_REUSEPORT would let any process of the same
user join that group, a second service among them, and take a share of the
connections; so the port is first claimed with a socket without
SO_REUSEPORT (refused while anything listens there, whoever it is), the N
sockets are bound beside the claim and listen, the claim is closed, and
then the kernel's table of listening sockets (/proc/net/tcp, tcp6) must
show no other on the port but ours: two services started in the same
instant both see the other and both refuse. The supervisor keeps the N
sockets for its whole life, so the group never has a moment without them.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path
from typing import Any

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


class PortInUse(Exception):
    """Another process (another service, or anything else) serves the address."""


def open_listeners(host: str, port: int, count: int, backlog: int) -> list[socket.socket]:
    """`count` listening sockets on host:port (port 0: one free port for all), or PortInUse."""
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    claim = _tcp_socket(family, reuse_port=False)
    try:
        _bind(claim, address, host, port)
        if count == 1:
            claim.listen(backlog)
            return [claim]
        address = claim.getsockname()  # port 0 resolved once
        listeners: list[socket.socket] = []
        try:
            for _ in range(count):
                listeners.append(_tcp_socket(family, reuse_port=True))
                _bind(listeners[-1], address, host, port)
                listeners[-1].listen(backlog)
        except BaseException:
            _close(listeners)
            raise
    except BaseException:
        claim.close()
        raise
    claim.close()
    if others_listening(listeners):
        _close(listeners)
        raise PortInUse(f"port {_shown(host, address[1])} is in use: another process listens there too (SO_REUSEPORT)")
    return listeners


def others_listening(ours: list[socket.socket]) -> list[int]:
    """The inodes of listening TCP sockets, not `ours`, that share their port
    and take connections for their address (the same, or either a wildcard)."""
    port = ours[0].getsockname()[1]
    inodes = {os.fstat(sock.fileno()).st_ino for sock in ours}
    entries = [entry for table in ("tcp", "tcp6") for entry in _listening(Path("/proc/net") / table, port)]
    addresses = {address for address, inode in entries if inode in inodes}
    return [
        inode
        for address, inode in entries
        if inode not in inodes and (address in addresses or _wildcard(address) or any(_wildcard(own) for own in addresses))
    ]


def _listening(table: Path, port: int) -> list[tuple[str, int]]:
    """(local address in hex, inode) of each listening socket on `port` in a /proc/net table."""
    try:
        lines = table.read_text().splitlines()[1:]
    except OSError:  # no IPv6 here
        return []
    found = []
    for line in lines:
        fields = line.split()
        address, _, hex_port = fields[1].partition(":")
        if fields[3] == LISTEN and int(hex_port, 16) == port:
            found.append((address, int(fields[9])))
    return found


def _wildcard(address: str) -> bool:
    return int(address, 16) == 0


def _tcp_socket(family: int, reuse_port: bool) -> socket.socket:
    # proto named: asyncio sets TCP_NODELAY only on sockets that say TCP (else a
    # response's head and body, two writes, wait 40 ms for a delayed ACK)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # connections of a previous run in TIME_WAIT do not hold the port
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    return sock


def _bind(sock: socket.socket, address: tuple[Any, ...], host: str, port: int) -> None:
    try:
        sock.bind(address)
    except OSError as error:
        sock.close()
        if error.errno == errno.EADDRINUSE:
            raise PortInUse(f"port {_shown(host, address[1] or port)} is in use by another process") from None
        raise


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _close(sockets: list[socket.socket]) -> None:
    for sock in sockets:
        sock.close()
