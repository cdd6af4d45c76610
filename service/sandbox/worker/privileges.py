"""The worker's privileges, emptied before it parses a byte of its model.

Owns `drop_privileges(uid, gid, namespaces)` and `unprivileged()`. Called once
the worker's inputs are open and its mounts are made, it leaves:

- a uid and gid of its own, not 0: as root, `--worker-uid` and
  `--worker-gid` (no supplementary groups); otherwise the service's own
  identity, mapped to itself in the worker's user namespace (group 0 among
  its supplementary groups is refused too);
- no capability at all: the effective, permitted and inheritable sets empty
  (capset), the ambient set cleared, and every capability dropped from the
  bounding set, so that nothing it runs could ever regain one;
- `no_new_privs`: no set-uid program, file capability or LSM transition
  could raise it again (nor could it run one: the seccomp filter refuses
  execve).

`unprivileged()` reads that back from the kernel (capget, PR_CAPBSET_READ,
PR_GET_NO_NEW_PRIVS, the ids): the worker reports "unprivileged" only when
every part holds. A bounding set that cannot be emptied (a process without
CAP_SETPCAP, outside any user namespace of its own) is left as it is, and
the worker does not report "unprivileged".
"""

from __future__ import annotations

import ctypes
import errno
import os
from typing import Final

from service.sandbox.worker.namespaces import CLONE_NEWUSER, Namespaces, leave_root

PR_CAPBSET_READ: Final = 23
PR_CAPBSET_DROP: Final = 24
PR_SET_NO_NEW_PRIVS: Final = 38
PR_GET_NO_NEW_PRIVS: Final = 39
PR_CAP_AMBIENT: Final = 47
PR_CAP_AMBIENT_IS_SET: Final = 1
PR_CAP_AMBIENT_CLEAR_ALL: Final = 4
CAPABILITY_VERSION_3: Final = 0x20080522
MAX_CAPABILITIES: Final = 64
UNPRIVILEGED: Final = "unprivileged"

_libc = ctypes.CDLL(None, use_errno=True)


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_privileges(uid: int, gid: int, namespaces: Namespaces) -> None:
    """Leave every privilege (see the module's text). The bounding set was
    emptied before (`confinement.confine`), while this process still could."""
    if os.geteuid() == 0 and not namespaces.has(CLONE_NEWUSER):
        leave_root(uid, gid)
    drop_capabilities()


def drop_capabilities() -> None:
    """Every capability set empty (the bounding set too, where it may) and no_new_privs."""
    empty_bounding_set()
    _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = _Header(CAPABILITY_VERSION_3, 0)
    empty = (_Data * 2)()
    if _libc.capset(ctypes.byref(header), empty) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")


def empty_bounding_set() -> None:
    """Drop every capability from the bounding set, where the caller may (CAP_SETPCAP)."""
    for capability in range(MAX_CAPABILITIES):
        if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            number = ctypes.get_errno()
            if number == errno.EINVAL:  # past the kernel's last capability
                return
            if number == errno.EPERM:  # no CAP_SETPCAP: the set stays as it is (reported)
                return
            raise OSError(number, "prctl(PR_CAPBSET_DROP)")


def unprivileged() -> bool:
    """Whether the calling process holds no privilege at all (see the module's text)."""
    if 0 in (*os.getresuid(), *os.getresgid(), *os.getgroups()):
        return False
    header = _Header(CAPABILITY_VERSION_3, 0)
    sets = (_Data * 2)()
    if _libc.capget(ctypes.byref(header), sets) != 0:
        return False
    if any(part.effective or part.permitted or part.inheritable for part in sets):
        return False
    for capability in range(MAX_CAPABILITIES):
        held = _libc.prctl(PR_CAPBSET_READ, capability, 0, 0, 0)
        if held < 0:
            break  # past the last capability
        if held or _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, capability, 0, 0) == 1:
            return False
    return bool(_libc.prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1)
