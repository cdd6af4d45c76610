"""The worker's own namespaces: nothing of the host's processes, IPC objects,
mounts, host name, cgroup tree or network.

Owns `prepare_fork_server()` and `enter_namespaces(uid, gid)`.

The fork server (`service.sandbox.worker.fork_server`, its first preloaded module) calls
`prepare_fork_server` once. As root, before each fork (`os.register_at_fork`,
so after every preloaded module, some of which start threads) it unshares a
new PID namespace for that child alone, and goes back to its own after it
(setns): every worker is born the first process (PID 1) of a PID namespace
of its own, at no cost but two system calls. It sees no other process, and
no signal, `ptrace` or `sched_setaffinity` can name one; the kernel ends
every process in it when the worker ends. (Not as another user: going back
would need CAP_SYS_ADMIN over the host's PID namespace. Its workers make
their PID namespace themselves, below.)

The worker calls `enter_namespaces` once its inputs are open. It unshares,
in one call, the IPC, mount, UTS, cgroup and network namespaces (and the PID
namespace, where the fork server could not give it one):

- as root with CAP_SYS_ADMIN (on a host), without a user namespace: it later
  leaves root for its own uid and gid (`service.sandbox.worker.privileges`), a real
  unprivileged identity on the host;
- otherwise (a service user; root in a container without CAP_SYS_ADMIN) in
  a new user namespace too, in which its uid and gid map to themselves (one
  uid, as an unprivileged process may map); the capabilities that namespace
  grants are dropped once the mounts are made. As root it first leaves root
  for its worker identity, so that the namespace's owner is that identity;
- where the kernel (or a container's seccomp profile) refuses that, a
  network namespace alone (with a user namespace if needed), else none: the
  worker reports what it got.

Without a PID namespace from the fork server, the worker forks once more
after unsharing one: the child is PID 1 and does the job; the parent drops
every capability it holds, then (`_stand_by`) only waits for the child and
leaves the way it left (the same exit status, or the same signal), so the
supervisor sees one worker. The child dies with it (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import ctypes
import os
import resource
import select
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

CLONE_NEWNS: Final = 0x00020000
CLONE_NEWCGROUP: Final = 0x02000000
CLONE_NEWUTS: Final = 0x04000000
CLONE_NEWIPC: Final = 0x08000000
CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWPID: Final = 0x20000000
CLONE_NEWNET: Final = 0x40000000
PR_SET_PDEATHSIG: Final = 1
PR_SET_DUMPABLE: Final = 4
# The reported names, in the order /readyz lists them.
NAMES: Final = {
    CLONE_NEWUSER: "user-namespace",
    CLONE_NEWPID: "pid-namespace",
    CLONE_NEWIPC: "ipc-namespace",
    CLONE_NEWNS: "mount-namespace",
    CLONE_NEWUTS: "uts-namespace",
    CLONE_NEWCGROUP: "cgroup-namespace",
    CLONE_NEWNET: "network-namespace",
}
UNCATCHABLE: Final = (signal.SIGKILL, signal.SIGSTOP)
ALL_BUT_USER: Final = CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWCGROUP | CLONE_NEWNET

_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Namespaces:
    """The namespaces the worker entered (CLONE_NEW* flags)."""

    flags: int

    def has(self, flag: int) -> bool:
        return bool(self.flags & flag)

    @property
    def names(self) -> list[str]:
        return [name for flag, name in NAMES.items() if self.flags & flag]


def prepare_fork_server() -> None:
    """In the fork server, before it starts any thread (see the module's text)."""
    if os.geteuid() != 0:
        return  # going back to its own PID namespace after a fork would need CAP_SYS_ADMIN over the host's
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    fork_server = os.getpid()  # the hooks are inherited by every worker: they act in the fork server alone
    os.register_at_fork(before=lambda: _next_child_in_a_new_pid_namespace(fork_server), after_in_parent=lambda: _back_to(fork_server, own))


def _next_child_in_a_new_pid_namespace(fork_server: int) -> None:
    """A fresh PID namespace for the child about to be forked (refused: it is
    born in the fork server's own, and unshares one itself). Until `_back_to`,
    the fork server can start no thread (a thread must be in its process's
    PID namespace)."""
    if os.getpid() == fork_server:
        _unshare(CLONE_NEWPID)


def _back_to(fork_server: int, namespace: int) -> None:
    """Children in the fork server's own PID namespace again: the next unshare may make a new one."""
    if os.getpid() == fork_server:
        _libc.setns(ctypes.c_int(namespace), ctypes.c_int(CLONE_NEWPID))


def enter_namespaces(uid: int, gid: int, stand_by: Callable[[], None]) -> Namespaces:
    """Unshare what the kernel allows (see the module's text). In the parent
    of a PID namespace made here this never returns: it calls `stand_by`
    (which leaves it no privilege), then waits for its child and leaves as it did."""
    born_first = os.getpid() == 1  # the fork server gave this worker a PID namespace of its own
    inherited = CLONE_NEWPID if born_first else 0
    wanted = ALL_BUT_USER & ~CLONE_NEWPID if born_first else ALL_BUT_USER
    if os.geteuid() == 0 and _unshare(wanted):
        return _into_pid_namespace(Namespaces(wanted | inherited), not born_first, stand_by)
    if os.geteuid() == 0:  # the user namespace is to be the worker identity's, not root's
        leave_root(uid, gid)
    own_uid, own_gid = os.geteuid(), os.getegid()
    for flags in (CLONE_NEWUSER | wanted, CLONE_NEWUSER | CLONE_NEWNET):
        if _unshare(flags):
            _map_identity(own_uid, own_gid)
            return _into_pid_namespace(Namespaces(flags | inherited), not born_first, stand_by)
    return Namespaces((CLONE_NEWNET if _unshare(CLONE_NEWNET) else 0) | inherited)


def leave_root(uid: int, gid: int) -> None:
    """Every user and group id to `uid`:`gid`, no supplementary groups. From
    root this empties the permitted and effective capabilities too."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def _unshare(flags: int) -> bool:
    return bool(_libc.unshare(ctypes.c_int(flags)) == 0)


def _map_identity(uid: int, gid: int) -> None:
    """In a new user namespace: the caller's uid and gid map to themselves, and
    setgroups is refused (as it must be for an unprivileged gid map). The
    worker is not dumpable (`confinement.make_undumpable`), which makes its
    /proc files root's: dumpable again for the three writes, then not.
    Written as bytes through os.open: a text file's codec may not be loaded
    yet, and a root worker has left root by now, so Python's library may be
    out of its reach (an interpreter under /root, a pyenv)."""
    _libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    try:
        for name, text in (("setgroups", b"deny"), ("uid_map", b"%d %d 1\n" % (uid, uid)), ("gid_map", b"%d %d 1\n" % (gid, gid))):
            fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, text)
            finally:
                os.close(fd)
    finally:
        _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)


def _into_pid_namespace(entered: Namespaces, fork: bool, stand_by: Callable[[], None]) -> Namespaces:
    """Fork the PID namespace's first process (if this worker unshared one)
    and return in it; the parent stands by."""
    if not (fork and entered.has(CLONE_NEWPID)):
        return entered
    alive_reader, alive_writer = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(alive_writer)
        if _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            os._exit(1)
        if select.select([alive_reader], [], [], 0)[0]:  # the parent died before the line above: its end is closed
            os._exit(1)
        os.close(alive_reader)
        return entered
    stand_by()
    _stand_by(child, alive_writer)
    raise AssertionError("unreachable")  # _stand_by leaves the process


def _stand_by(child: int, alive_writer: int) -> None:
    """The parent's part: hold nothing, wait for `child`, leave as it left."""
    os.closerange(0, alive_writer)
    os.closerange(alive_writer + 1, 1 << 20)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # it may leave by the child's SIGSYS or SIGABRT: no core
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number not in UNCATCHABLE:  # signal.signal refuses them (EINVAL): their action is always the default
            signal.signal(number, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [number])
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # a signal that does not end a process by default
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)
