"""The import worker's seccomp filter: an allow-list of what a worker may ask the kernel.

Owns `install_worker_filter()`, which a worker (`service.sandbox.worker.confinement.confine`)
calls on itself last, once its namespaces, minimal root, privileges,
Landlock and limits are in place and before it parses a byte. Built with
libseccomp (through `pyseccomp`, ctypes bindings with the API of libseccomp's
own Python module), never hand-written BPF. It needs no privileges: the
filter sets no_new_privs (libseccomp's default), so it works as an
unprivileged user and inside a container.

The default action refuses: ERRNO(ENOSYS), as if the kernel had no such call
(a library probing for a newer call falls back to an older one). The allowed
set (`ALLOWED`, with the conditions below) is what the parse, onnx's checker
and shape inference, onnxruntime's session and run, SQLite and Python need
once the walls are up, measured with `strace -f` over the backend sweep
through the check worker, the held-in real models (import, checks and graph
tasks), the check tests and the sandbox's process tests (46 distinct calls
in all), plus the read-only and per-process queries of the same families
that another glibc may use instead (`statx` for `newfstatat`, `ppoll` for
`poll`, ...). With conditions:

- `clone` only for a thread (CLONE_THREAD, no namespace flag); `clone3`
  ENOSYS (its flags are in memory the filter cannot see: glibc falls back);
- `openat`/`open` only without a flag that writes or creates (`openat2`
  ENOSYS, its flags being in memory);
- `mmap` and `mprotect` never executable but for a file (no anonymous
  executable memory: a parser bug cannot map code of its own);
- `kill`, `tgkill`, `rt_sigqueueinfo`, `rt_tgsigqueueinfo` only to the
  worker itself; `prlimit64` only its own, and only to read;
- `prctl` only PR_SET_NO_NEW_PRIVS (a second Landlock layer needs it) and
  queries (PR_GET_*, PR_CAPBSET_READ, PR_CAP_AMBIENT_IS_SET); `fcntl` only
  the descriptor and status flags, duplicates and record locks; `ioctl` only
  TCGETS, FIONREAD, FIONBIO, FIOCLEX and FIONCLEX.

Named refusals (documentation as much as policy; the default refuses them too):

- KILL_PROCESS (the worker is stopped at once, and its parent sees SIGSYS):
  calls no library it uses makes, so an attempt means the import went wrong
  in a way we must not let run on: new sockets, running a program,
  other processes' memory (`ptrace`, `process_vm_readv`, `process_vm_writev`,
  `pidfd_getfd`), new processes, namespaces, mounts and the root (`unshare`,
  `setns`, `mount`, `umount2`, `pivot_root`, `chroot`, the new mount API),
  kernel code;
- ERRNO(EPERM): fanotify, inotify, every `sched_set*`, `ioprio_set`,
  `setpriority`, System V IPC (`shm*`, `msg*`, `sem*`) and POSIX message
  queues, `memfd_create`, `perf_event_open`, `bpf`, `userfaultfd`, the
  kernel keyring (`add_key`, `keyctl`, `request_key`), file handles, a change
  of identity, system administration, and every change to the file system;
- ERRNO(ENOSYS): `io_uring_*`, `clone3`, `openat2`.

Other architectures' system calls (the 32-bit ABI on x86-64; x32) end the
worker too (the bad-architecture action). The filter is synchronised to
every thread of the worker (the memory watchdog's thread exists before it).
If libseccomp cannot be loaded, or the kernel refuses the filter, the worker
runs without it and reports "unavailable" (the sandbox logs why at start).
`python -m service.sandbox.worker.seccomp` prints the filter in libseccomp's
pseudo-filter code.
"""

from __future__ import annotations

import errno
import mmap
import os
import sys
import termios
from typing import Any, Final

from service.sandbox.worker.namespaces import ALL_BUT_USER, CLONE_NEWUSER

SECCOMP = "seccomp"
UNAVAILABLE = "unavailable"

CLONE_THREAD: Final = 0x00010000
CLONE_NAMESPACES: Final = CLONE_NEWUSER | ALL_BUT_USER
PROT_EXEC: Final = mmap.PROT_EXEC
MAP_ANONYMOUS: Final = mmap.MAP_ANONYMOUS
LOW_32_BITS: Final = 0xFFFFFFFF

# Allowed as they are: memory, reading files, the pipe to the front end, time, threads' housekeeping, queries of itself.
ALLOWED: Final = (
    # the measured calls (strace -f over the sweep, the held-in models and the check and sandbox tests)
    "read", "write", "pread64", "close", "newfstatat", "readlink", "lseek", "getdents64",
    "brk", "munmap", "mremap", "madvise",
    "futex", "set_robust_list", "rseq", "rt_sigprocmask", "rt_sigreturn", "rt_sigaction",
    "getpid", "gettid", "geteuid", "getrandom", "clock_nanosleep", "exit", "exit_group",
    "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
    # the same families, as another glibc or another path may ask
    "readv", "writev", "preadv", "preadv2", "fstat", "stat", "lstat", "statx", "fstatfs", "statfs",
    "readlinkat", "access", "faccessat", "faccessat2", "getcwd", "dup", "dup2", "dup3",
    "poll", "ppoll", "select", "pselect6", "msync", "membarrier", "set_tid_address", "sigaltstack",
    "restart_syscall", "rt_sigsuspend", "rt_sigtimedwait", "sched_yield", "sched_getaffinity",
    "sched_getparam", "sched_getscheduler", "sched_get_priority_max", "sched_get_priority_min", "getpriority",
    "getppid", "getuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups", "getpgrp", "getpgid", "getsid",
    "uname", "sysinfo", "getrusage", "times", "clock_gettime", "clock_getres", "gettimeofday", "time", "nanosleep",
    "getcpu", "arch_prctl", "capget", "getrlimit", "futex_waitv", "get_mempolicy",
    # the file broker's socket pair (made before the filter; no socket can be made after it)
    "sendmsg", "recvmsg", "sendto", "recvfrom",
)  # fmt: skip
# Allowed only with the conditions in build_filter.
CONDITIONAL: Final = (
    "clone", "openat", "open", "mmap", "mprotect", "kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
    "prlimit64", "prctl", "fcntl", "ioctl",
)  # fmt: skip

# The worker is stopped (SIGSYS).
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
# ENOSYS by name: the caller falls back as on an older kernel.
NOT_IMPLEMENTED: Final = ("clone3", "openat2", "io_uring_setup", "io_uring_enter", "io_uring_register")
# EPERM: refused as a privilege check would refuse them.
NOT_PERMITTED: Final = (
    # watching or blocking the file system, even the worker's own minimal root
    "fanotify_init", "fanotify_mark", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
    # scheduling and priorities, of any process
    "sched_setaffinity", "sched_setscheduler", "sched_setparam", "sched_setattr", "ioprio_set", "ioprio_get", "setpriority",
    # System V IPC and POSIX message queues; anonymous files
    "shmget", "shmat", "shmdt", "shmctl", "msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl",
    "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr", "memfd_create", "memfd_secret",
    # kernel facilities a parser never needs
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key", "open_by_handle_at", "name_to_handle_at",
    "kcmp", "process_madvise", "process_mrelease", "move_pages", "migrate_pages", "mbind", "set_mempolicy",
    "set_mempolicy_home_node", "mincore", "mlock", "mlock2", "mlockall", "munlock", "munlockall", "seccomp",
    "pidfd_open", "pidfd_send_signal", "tkill", "get_robust_list", "personality", "vhangup", "quotactl", "quotactl_fd",
    # identity
    "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setfsuid", "setfsgid", "setgroups", "capset",
    # system administration
    "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "sethostname", "setdomainname", "syslog", "iopl", "ioperm", "setrlimit",
    # every change to the file system (a third wall, behind the read-only root and Landlock)
    "link", "linkat", "symlink", "symlinkat", "rename", "renameat", "renameat2", "unlink", "unlinkat", "rmdir",
    "mkdir", "mkdirat", "mknod", "mknodat", "truncate", "ftruncate", "fallocate", "creat",
    "chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
    "utime", "utimes", "utimensat", "futimesat",
    "setxattr", "lsetxattr", "fsetxattr", "removexattr", "lremovexattr", "fremovexattr",
)  # fmt: skip
# open flags that write or create (a worker opens files to read them only)
WRITE_OPEN_FLAGS: Final = tuple(
    flag for flag in (os.O_WRONLY, os.O_RDWR, os.O_CREAT, os.O_TRUNC, os.O_APPEND, getattr(os, "O_TMPFILE", 0)) if flag
)
# prctl: PR_SET_NO_NEW_PRIVS (Landlock's condition), and queries of itself
PRCTL_OPTIONS: Final = (
    38,  # PR_SET_NO_NEW_PRIVS
    39,  # PR_GET_NO_NEW_PRIVS
    3,  # PR_GET_DUMPABLE
    16,  # PR_GET_NAME
    23,  # PR_CAPBSET_READ
    21,  # PR_GET_SECCOMP
    15,  # PR_SET_NAME: a thread's own name
)
PR_CAP_AMBIENT: Final = 47
PR_CAP_AMBIENT_IS_SET: Final = 1
# fcntl: F_DUPFD, F_GETFD, F_SETFD, F_GETFL, F_SETFL, F_GETLK, F_SETLK, F_SETLKW, F_DUPFD_CLOEXEC
FCNTL_COMMANDS: Final = (0, 1, 2, 3, 4, 5, 6, 7, 1030)
IOCTL_REQUESTS: Final = (termios.TCGETS, termios.FIONREAD, termios.FIONBIO, termios.FIOCLEX, termios.FIONCLEX)

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


def build_filter(pid: int) -> Any:
    """The worker's filter (a `pyseccomp.SyscallFilter`) for the process `pid`; not loaded."""
    if _seccomp is None:
        raise RuntimeError(UNAVAILABLE_REASON)
    s = _seccomp
    allow, kill = s.ALLOW, s.KILL_PROCESS
    eperm, enosys = s.ERRNO(errno.EPERM), s.ERRNO(errno.ENOSYS)
    rules = s.SyscallFilter(enosys)
    rules.set_attr(s.Attr.ACT_BADARCH, kill)
    rules.set_attr(s.Attr.CTL_NNP, 1)
    rules.set_attr(s.Attr.CTL_TSYNC, 1)

    def add(action: int, name: str, *args: Any) -> None:
        number = s.resolve_syscall(s.Arch.NATIVE, name)
        if number == -1 or action == enosys:  # not a call of this architecture (open on arm64); the default's own
            return
        rules.add_rule(action, number, *args)

    for name in ALLOWED:
        add(allow, name)
    for name in KILL:
        add(kill, name)
    for name in NOT_IMPLEMENTED:
        add(enosys, name)
    for name in NOT_PERMITTED:
        add(eperm, name)
    flags = _clone_flags_argument()
    add(allow, "clone", s.Arg(flags, s.MASKED_EQ, CLONE_THREAD | CLONE_NAMESPACES, CLONE_THREAD))
    add(kill, "clone", s.Arg(flags, s.MASKED_EQ, CLONE_THREAD, 0))  # a new process
    add(kill, "clone", s.Arg(flags, s.MASKED_EQ, CLONE_THREAD | CLONE_NAMESPACES, CLONE_THREAD | CLONE_NAMESPACES))
    _allow_reading_opens(add, s, eperm)
    _allow_memory(add, s, eperm)
    for name in ("kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"):
        add(allow, name, s.Arg(0, s.EQ, pid))
        add(eperm, name, s.Arg(0, s.NE, pid))
    add(allow, "prlimit64", s.Arg(0, s.EQ, 0), s.Arg(2, s.EQ, 0))  # its own limits, read only
    add(eperm, "prlimit64", s.Arg(0, s.NE, 0))
    add(eperm, "prlimit64", s.Arg(2, s.NE, 0))
    for option in PRCTL_OPTIONS:
        add(allow, "prctl", s.Arg(0, s.EQ, option))
    add(allow, "prctl", s.Arg(0, s.EQ, PR_CAP_AMBIENT), s.Arg(1, s.EQ, PR_CAP_AMBIENT_IS_SET))
    for command in FCNTL_COMMANDS:
        add(allow, "fcntl", s.Arg(1, s.EQ, command))
    for request in IOCTL_REQUESTS:
        add(allow, "ioctl", s.Arg(1, s.MASKED_EQ, LOW_32_BITS, request))
    return rules


def _allow_reading_opens(add: Any, s: Any, eperm: int) -> None:
    """open and openat without a flag that writes or creates; with one, EPERM."""
    writing = 0
    for flag in WRITE_OPEN_FLAGS:
        writing |= flag & ~os.O_DIRECTORY  # O_TMPFILE holds O_DIRECTORY's bit, which a plain folder's open has too
        add(eperm, "open", s.Arg(1, s.MASKED_EQ, flag, flag))
        add(eperm, "openat", s.Arg(2, s.MASKED_EQ, flag, flag))
    add(s.ALLOW, "open", s.Arg(1, s.MASKED_EQ, writing, 0))
    add(s.ALLOW, "openat", s.Arg(2, s.MASKED_EQ, writing, 0))


def _allow_memory(add: Any, s: Any, eperm: int) -> None:
    """mmap: anything but anonymous executable memory; mprotect: never executable."""
    add(s.ALLOW, "mmap", s.Arg(2, s.MASKED_EQ, PROT_EXEC, 0))
    add(s.ALLOW, "mmap", s.Arg(2, s.MASKED_EQ, PROT_EXEC, PROT_EXEC), s.Arg(3, s.MASKED_EQ, MAP_ANONYMOUS, 0))  # a library's code
    add(eperm, "mmap", s.Arg(2, s.MASKED_EQ, PROT_EXEC, PROT_EXEC), s.Arg(3, s.MASKED_EQ, MAP_ANONYMOUS, MAP_ANONYMOUS))
    add(s.ALLOW, "mprotect", s.Arg(2, s.MASKED_EQ, PROT_EXEC, 0))
    add(eperm, "mprotect", s.Arg(2, s.MASKED_EQ, PROT_EXEC, PROT_EXEC))


def install_worker_filter() -> str:
    """Load the filter on the calling process (all its threads): "seccomp", or
    "unavailable" where libseccomp or the kernel's seccomp is missing. Irreversible."""
    if _seccomp is None:
        return UNAVAILABLE
    try:
        build_filter(os.getpid()).load()
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
