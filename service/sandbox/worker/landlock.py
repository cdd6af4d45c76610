"""Landlock: the worker's file policy, through the kernel's three system calls.

Owns `abi_version()` and `restrict_self(read_trees)`. Landlock is
an unprivileged Linux security module (5.13 and later): a process declares
which access rights it handles, adds rules that grant some of them beneath
some files or folders, and restricts itself; from then on every handled
right is refused everywhere else, for it and every thread or child it
starts afterwards, whatever its uid or capabilities. Called on a worker
(`service.sandbox.worker.main.main`) before it reads anything and before it starts any
thread, it leaves the worker able to:

- read files and list folders (`READ_FILE`, `READ_DIR`) beneath `read_trees`
  (the model's folder, the external-data folder, and the Python code it may
  import lazily);
- nothing else of the file system: it creates, writes, truncates, links,
  renames, removes and executes nothing anywhere (every file right of the
  kernel's ABI is handled), opens no device for ioctls (ABI 5);
- where the ABI allows: no TCP bind or connect (ABI 4), and no signal and no
  abstract UNIX socket to any process outside its own Landlock domain (ABI 6,
  `scoped`): not the front end, the fork server or another worker.

Written over ctypes rather than a library: PyPI's `landlock` is a pre-release,
and the three calls and two structures are small and stable (the kernel's
`include/uapi/linux/landlock.h`). Where Landlock is missing (an old kernel,
disabled at boot, a seccomp profile that refuses it), `abi_version()` is 0 and
`restrict_self` raises `LandlockUnavailable`; the caller reports that.
"""

from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterable
from typing import Final

SYS_CREATE_RULESET: Final = 444  # the same numbers on every architecture (asm-generic)
SYS_ADD_RULE: Final = 445
SYS_RESTRICT_SELF: Final = 446
CREATE_RULESET_VERSION: Final = 1 << 0
RULE_PATH_BENEATH: Final = 1
PR_SET_NO_NEW_PRIVS: Final = 38

# File-system rights (LANDLOCK_ACCESS_FS_*), with the ABI that brought each.
EXECUTE: Final = 1 << 0
WRITE_FILE: Final = 1 << 1
READ_FILE: Final = 1 << 2
READ_DIR: Final = 1 << 3
FS_RIGHTS_BY_ABI: Final = {
    1: (1 << 13) - 1,  # EXECUTE to MAKE_SYM: execute, write, read, list, remove, make any kind of file
    2: 1 << 13,  # REFER: link or rename across folders
    3: 1 << 14,  # TRUNCATE
    5: 1 << 15,  # IOCTL_DEV
}
NET_RIGHTS_ABI: Final = 4
NET_BIND_TCP: Final = 1 << 0
NET_CONNECT_TCP: Final = 1 << 1
SCOPED_ABI: Final = 6
SCOPE_ABSTRACT_UNIX_SOCKET: Final = 1 << 0
SCOPE_SIGNAL: Final = 1 << 1
FILE_RIGHTS: Final = EXECUTE | WRITE_FILE | READ_FILE | (1 << 14) | (1 << 15)  # what a rule on a file (not a folder) may grant


class LandlockUnavailable(OSError):
    """The kernel offers no Landlock, or refused the ruleset."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = (("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64))


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = (("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32))


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(number: int, *args: object) -> int:
    result = int(_libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise LandlockUnavailable(code, os.strerror(code))
    return result


def abi_version() -> int:
    """The Landlock ABI the running kernel offers (0: none)."""
    try:
        return _call(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    except LandlockUnavailable:
        return 0


def handled_fs_rights(abi: int) -> int:
    """Every file-system right the ABI knows: all of them are refused unless a rule grants them."""
    return sum(rights for since, rights in FS_RIGHTS_BY_ABI.items() if abi >= since)


def restrict_self(read_trees: Iterable[str]) -> int:
    """Restrict the calling thread (and what it starts later) to reading the
    trees beneath `read_trees`; returns the ABI in force. A path that does not
    exist, or that the caller may not reach, is left out (nothing beneath it
    can be read); one that is a file
    grants reading that file only.
    Irreversible. Raises `LandlockUnavailable` where the kernel offers none."""
    abi = abi_version()
    if abi < 1:
        raise LandlockUnavailable(0, "the kernel offers no Landlock")
    handled = handled_fs_rights(abi)
    attributes = _RulesetAttr(
        handled_access_fs=handled,
        handled_access_net=(NET_BIND_TCP | NET_CONNECT_TCP) if abi >= NET_RIGHTS_ABI else 0,
        scoped=(SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL) if abi >= SCOPED_ABI else 0,
    )
    size = ctypes.sizeof(_RulesetAttr) if abi >= SCOPED_ABI else 16 if abi >= NET_RIGHTS_ABI else 8
    ruleset = _call(SYS_CREATE_RULESET, ctypes.byref(attributes), ctypes.c_size_t(size), ctypes.c_uint32(0))
    try:
        for path in read_trees:
            _allow(ruleset, path, (READ_FILE | READ_DIR) & handled)
        if _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:  # Landlock's condition for an unprivileged restriction
            code = ctypes.get_errno()
            raise LandlockUnavailable(code, f"PR_SET_NO_NEW_PRIVS: {os.strerror(code)}")
        _call(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
    finally:
        os.close(ruleset)
    return abi


def _allow(ruleset: int, path: str, rights: int) -> None:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, PermissionError):
        return
    try:
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= FILE_RIGHTS
        rule = _PathBeneathAttr(allowed_access=rights, parent_fd=fd)
        _call(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH), ctypes.byref(rule), ctypes.c_uint32(0))
    finally:
        os.close(fd)
