"""Processes that die with their parent: PR_SET_PDEATHSIG, SIGKILL.

Owns `die_with_parent(parent)`, `die_with_fork_server()`, `host_parent()` and
`rearm(parent, status_fd)`.

Each front end arms it against the supervisor (`service.server.front_ends`),
each worker against the fork server (`service.sandbox.worker.main`), so
that a `kill -9` of the supervisor takes every front end with it, and with
them their ports; a front end's fork server leaves at once when the front
end is gone (multiprocessing's own: its end of the front end's pipe reads
EOF), and with it every worker still running. The kernel sends the signal
when the thread that forked the process ends: the supervisor starts its
front ends from its main thread, the fork server forks from its only one.

Arming races the parent's death: after it, the parent must still be the one
expected (else the process leaves at once). A worker born PID 1 of its own
namespace sees 0 as its parent, so its parent is read from the host's
/proc (`host_parent`). Changing its user or group ids clears the setting,
as a root worker does when it leaves root: `rearm` sets it again after.
"""

from __future__ import annotations

import ctypes
import os
import signal
from typing import Final

PR_SET_PDEATHSIG: Final = 1
PR_GET_PDEATHSIG: Final = 2

_libc = ctypes.CDLL(None, use_errno=True)
_fork_server: list[int] = []  # its pid, set in the fork server (`expect_forks_here`), inherited by each worker


def die_with_parent(parent: int, status_fd: int | None = None) -> None:
    """SIGKILL this process when `parent` ends; leave at once if it has already."""
    if _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if host_parent(status_fd) != parent:
        os._exit(1)  # orphaned before the line above: nothing would end us


def expect_forks_here() -> None:
    """In the fork server: the parent each of its workers checks (`die_with_fork_server`)."""
    _fork_server[:] = [os.getpid()]


def die_with_fork_server() -> None:
    """In a worker, first thing: die with the fork server (nothing where it was not one that forked us)."""
    if _fork_server and _fork_server[0] != os.getpid():
        die_with_parent(_fork_server[0])


def rearm(parent: int, status_fd: int | None = None) -> None:
    """After a change of ids: the signal set again if it was cleared (`parent`:
    the host's pid of the parent, read before the change, while it was armed)."""
    armed = ctypes.c_int(0)
    if _libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(armed), 0, 0, 0) == 0 and armed.value == signal.SIGKILL:
        return
    die_with_parent(parent, status_fd)


def host_parent(status_fd: int | None = None) -> int:
    """The parent's pid as the host's /proc shows it (the process's status file,
    or `status_fd`, one opened while /proc was in view); getppid() where /proc is not."""
    try:
        if status_fd is None:
            with open("/proc/self/status", "rb") as status:
                text = status.read()
        else:
            text = os.pread(status_fd, 1 << 14, 0)
    except OSError:
        return os.getppid()
    for line in text.splitlines():
        if line.startswith(b"PPid:"):
            return int(line.split()[1])
    return os.getppid()
