"""The import worker's seccomp filter: what a worker may not ask the kernel.

Owns `install_worker_filter()`, which a worker (`service.sandbox.worker.main.main`) calls on
itself after it has entered its network namespace and set its limits, and
before it reads anything. Built with libseccomp (through `pyseccomp`, ctypes
bindings with the API of libseccomp's own Python module), never hand-written
BPF. It needs no privileges: the filter sets no_new_privs (libseccomp's
default), so it works as an unprivileged user and inside a container with the
default seccomp profile, where a network namespace often cannot be made.

The filter is a deny-list (default: allow): the worker runs Python, glibc,
numpy and SQLite, whose exact system calls vary by version; what matters is
closed by name:

- KILL_PROCESS (the worker is stopped at once, and its parent sees SIGSYS):
  calls the worker never makes and no library it uses probes, so an attempt
  means the import went wrong in a way we must not let run on. New sockets
  (`socket`, `socketpair`, `connect`, `bind`, `listen`, `accept`, `accept4`,
  `socketcall`: also Unix sockets, which a network namespace does not close,
  such as the fork server's own); running programs (`execve`, `execveat`);
  other processes' memory (`ptrace`, `process_vm_readv`, `process_vm_writev`,
  `pidfd_getfd`); new processes (`fork`, `vfork`, and `clone` without
  CLONE_THREAD or with a namespace flag: threads stay possible); namespaces,
  mounts and the root (`unshare`, `setns`, `mount`, `umount2`, `pivot_root`,
  `chroot` and the new mount API); kernel code (`kexec_load`,
  `kexec_file_load`, `init_module`, `finit_module`, `delete_module`).
- ERRNO(ENOSYS), as if the kernel were older: `clone3` (glibc then falls back
  to `clone`, whose flags the filter can see; clone3 passes them in memory)
  and `io_uring_*` (a library probing for it falls back to ordinary calls).
- ERRNO(EPERM), refused as a privilege check would be, for what a library may
  probe or what is harmless to refuse: `bpf`, `perf_event_open`,
  `userfaultfd`, the kernel keyring (`keyctl`, `add_key`, `request_key`),
  file handles (`open_by_handle_at`, `name_to_handle_at`), a change of
  identity (the `set*id` family, `setgroups`) except the one the worker
  makes as root once its inputs are open (every id to `--worker-uid` and
  `--worker-gid`, no supplementary groups), `personality` except the
  query, system administration (`reboot`, `swapon`, `swapoff`, `acct`,
  setting the clock, host and domain names, `syslog`, `quotactl`, `iopl`,
  `ioperm`), signals to any process but the worker itself (`kill`, `tgkill`,
  `rt_sigqueueinfo`, `rt_tgsigqueueinfo` with another pid; `tkill`,
  `pidfd_open`, `pidfd_send_signal`: the front end, the fork server and the
  other workers run as the same user), limits and priorities of any
  process but itself (`prlimit64` but for pid 0, `setpriority` but for
  who 0) and any new limit at all (`setrlimit`, `prlimit64` with a new
  limit: they are set before the filter), the terminal-injecting ioctls
  `TIOCSTI` and `TIOCLINUX`, and every change to the file system, as a
  second wall behind Landlock: `link`, `symlink`, `rename`, `unlink`,
  `rmdir`, `mkdir`, `mknod`, `truncate`, `ftruncate`, `fallocate`, the
  `chmod`, `chown` and `utime` families, extended attributes, `creat`, and
  `open`/`openat` with a flag that writes or creates (`O_WRONLY`, `O_RDWR`,
  `O_CREAT`, `O_TRUNC`, `O_APPEND`, `O_TMPFILE`); `openat2`, whose flags the
  filter cannot see, answers ENOSYS.

Other architectures' system calls (the 32-bit ABI on x86-64; x32) end the
worker too (the bad-architecture action), so the deny-list cannot be
sidestepped through them. The filter is synchronised to every thread of the
worker (the memory watchdog's thread exists before it). What the worker needs
and keeps: reading and mapping files, memory, its pipe to the parent, threads,
and signals to itself.

If libseccomp cannot be loaded, or the kernel refuses the filter, the worker
runs without it and reports "unavailable" (the sandbox logs why at start).
`python -m service.sandbox.worker.seccomp` prints the filter in libseccomp's
pseudo-filter code.
"""

from __future__ import annotations

import errno
import os
import sys
import termios
from typing import Any, Final

from service.settings import WORKER_ID

SECCOMP = "seccomp"
UNAVAILABLE = "unavailable"

CLONE_THREAD: Final = 0x00010000
CLONE_NAMESPACES: Final = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
PERSONALITY_QUERY: Final = 0xFFFFFFFF
LOW_32_BITS: Final = 0xFFFFFFFF

# The worker is stopped (SIGSYS): it never makes these, and no library it uses probes them.
KILL: Final = (
    # new sockets: network, and Unix sockets (the fork server's) that no namespace closes
    "socket", "socketpair", "connect", "bind", "listen", "accept", "accept4", "socketcall",
    # running another program
    "execve", "execveat",
    # other processes' memory
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    # new processes (clone: see CLONE_THREAD below)
    "fork", "vfork",
    # namespaces, mounts, the root
    "unshare", "setns", "mount", "umount", "umount2", "pivot_root", "chroot",
    "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
    # kernel code
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
)  # fmt: skip
# ENOSYS: the caller falls back as on an older kernel.
NOT_IMPLEMENTED: Final = ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register")
# EPERM: refused as a privilege check would refuse them.
NOT_PERMITTED: Final = (
    "bpf", "perf_event_open", "userfaultfd",
    "keyctl", "add_key", "request_key",
    "open_by_handle_at", "name_to_handle_at",
    "setuid", "setgid", "setreuid", "setregid", "setfsuid", "setfsgid",
    "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "sethostname", "setdomainname", "syslog", "quotactl", "iopl", "ioperm",
    "tkill", "pidfd_open", "pidfd_send_signal",
)  # fmt: skip
# EPERM unless the first argument (a pid, a thread group) is the worker itself.
SIGNALS_TO_SELF_ONLY: Final = ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo")
# EPERM: every call that changes the file system (Landlock refuses them too; this holds without it).
CHANGES_FILES: Final = (
    "link", "linkat", "symlink", "symlinkat", "rename", "renameat", "renameat2", "unlink", "unlinkat", "rmdir",
    "mkdir", "mkdirat", "mknod", "mknodat", "truncate", "ftruncate", "fallocate",
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "utimensat", "futimesat", "creat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
)  # fmt: skip
# open flags that write or create: EPERM (a worker opens files to read them only)
WRITE_OPEN_FLAGS: Final = tuple(
    flag for flag in (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND, getattr(os, "O_TMPFILE", 0)) if flag
)
TERMINAL_IOCTLS: Final = tuple(getattr(termios, name) for name in ("TIOCSTI", "TIOCLINUX") if hasattr(termios, name))

_seccomp: Any = None  # the pyseccomp module, where it loads
UNAVAILABLE_REASON: str | None = None
try:
    import pyseccomp  # type: ignore[import-untyped]
except Exception as error:  # no pyseccomp, no libseccomp.so.2 (RuntimeError), a libseccomp without a symbol, ...
    UNAVAILABLE_REASON = f"libseccomp cannot be loaded ({type(error).__name__}: {error})"
else:
    _seccomp = pyseccomp


def _clone_flags_argument() -> int:
    """The argument that holds clone's flags: the second on s390 (CLONE_BACKWARDS2), else the first."""
    native = _seccomp.system_arch()
    return 1 if native in (_seccomp.Arch.S390, _seccomp.Arch.S390X) else 0


def build_filter(pid: int, uid: int = WORKER_ID, gid: int = WORKER_ID) -> Any:
    """The worker's filter (a `pyseccomp.SyscallFilter`) for the process `pid`,
    which may change its identity to `uid`:`gid` only; not loaded."""
    if _seccomp is None:
        raise RuntimeError(UNAVAILABLE_REASON)
    s = _seccomp
    kill = s.KILL_PROCESS
    eperm = s.ERRNO(errno.EPERM)
    enosys = s.ERRNO(errno.ENOSYS)
    rules = s.SyscallFilter(s.ALLOW)
    rules.set_attr(s.Attr.ACT_BADARCH, kill)
    rules.set_attr(s.Attr.CTL_NNP, 1)
    rules.set_attr(s.Attr.CTL_TSYNC, 1)

    def add(action: int, name: str, *args: Any) -> None:
        number = s.resolve_syscall(s.Arch.NATIVE, name)
        if number == -1:  # __NR_SCMP_ERROR: this libseccomp does not know the call; nor, then, does this code
            return
        rules.add_rule(action, number, *args)

    for name in KILL:
        add(kill, name)
    flags = _clone_flags_argument()
    add(kill, "clone", s.Arg(flags, s.MASKED_EQ, CLONE_THREAD, 0))  # a new process, not a thread
    for flag in CLONE_NAMESPACES:
        add(kill, "clone", s.Arg(flags, s.MASKED_EQ, flag, flag))
    for name in NOT_IMPLEMENTED:
        add(enosys, name)
    for name in NOT_PERMITTED:
        add(eperm, name)
    add(eperm, "personality", s.Arg(0, s.NE, PERSONALITY_QUERY))
    for name in SIGNALS_TO_SELF_ONLY:
        add(eperm, name, s.Arg(0, s.NE, pid))
    # Limits and priorities: the worker's own only (pid 0, as glibc asks), and no limit set or raised.
    add(eperm, "prlimit64", s.Arg(0, s.NE, 0))
    add(eperm, "prlimit64", s.Arg(2, s.NE, 0))
    add(eperm, "setrlimit")  # the limits are set before the filter; none may be raised or changed after
    add(eperm, "setpriority", s.Arg(1, s.NE, 0))
    # Files: nothing changed, nothing opened for writing.
    for name in CHANGES_FILES:
        add(eperm, name)
    add(enosys, "openat2")  # its flags are in memory the filter cannot see: callers fall back to openat
    for flag in WRITE_OPEN_FLAGS:
        add(eperm, "open", s.Arg(1, s.MASKED_EQ, flag, flag))
        add(eperm, "openat", s.Arg(2, s.MASKED_EQ, flag, flag))
    # Identity: only the one change drop_identity makes (every id to uid/gid, no supplementary groups).
    for argument in range(3):
        add(eperm, "setresuid", s.Arg(argument, s.NE, uid))
        add(eperm, "setresgid", s.Arg(argument, s.NE, gid))
    add(eperm, "setgroups", s.Arg(0, s.NE, 0))
    for request in TERMINAL_IOCTLS:
        add(eperm, "ioctl", s.Arg(1, s.MASKED_EQ, LOW_32_BITS, request))
    return rules


def install_worker_filter(uid: int = WORKER_ID, gid: int = WORKER_ID) -> str:
    """Load the filter on the calling process (all its threads), which may then
    change its identity to `uid`:`gid` only: "seccomp", or "unavailable" where
    libseccomp or the kernel's seccomp is missing. Irreversible."""
    if _seccomp is None:
        return UNAVAILABLE
    try:
        build_filter(os.getpid(), uid, gid).load()
    except Exception:  # the kernel refused it (no seccomp, EINVAL), or the library misbehaved: run without, never crash
        return UNAVAILABLE
    return SECCOMP


def main() -> None:
    """Print the filter a worker would load, in libseccomp's pseudo-filter code."""
    if _seccomp is None:
        raise SystemExit(UNAVAILABLE_REASON)
    sys.stdout.flush()
    build_filter(os.getpid()).export_pfc(sys.stdout)


if __name__ == "__main__":
    main()
