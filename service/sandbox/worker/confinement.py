"""The walls a worker puts up around itself before it reads anything of its job.

In the order `service.sandbox.worker.main.main` calls them (and
`make_undumpable`, which keeps the front end's and the fork server's memory
out of reach):

1. `isolate_network`: a new network namespace (unprivileged: with a new user
   namespace), or "unavailable" where neither is permitted;
2. `keep_only_descriptors`: every inherited descriptor closed but its
   connection to the front end, its stderr pipe and /dev/null; stdout and
   stderr go to that pipe, which the front end reads, bounded, and logs as the
   worker's lines (never raw into the service's log);
3. `confine_files` (Landlock, `service.sandbox.worker.landlock`): it may read the files
   beneath its model's folder and its external-data folder (its inputs) and
   the Python code it may import lazily, and create, write, link, rename,
   truncate, remove or run nothing anywhere; signals and abstract UNIX
   sockets scoped to itself.
   Before any thread starts, since a Landlock domain binds the thread that
   asks and what it starts afterwards;
4. the memory watchdog (`service.sandbox.memory_watch`), then `set_limits`
   (RLIMIT_DATA, CPU, NOFILE, FSIZE 0, CORE 0, NPROC 0);
5. the seccomp filter (`service.sandbox.worker.seccomp`), last.

Then the worker opens its inputs (the importer), and `drop_identity` leaves
root for an unprivileged uid and gid of the worker's own (`--worker-uid`,
`--worker-gid`) where the service runs as root; the filter lets exactly that
change through. What is in effect is reported as the isolation string
(`combine_isolation`; `service.sandbox.supervisor.describe_isolation` reads it back).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
import sysconfig
from typing import Final

import importer
import service
from service.sandbox.protocol import WorkerJob
from service.sandbox.worker import landlock

NOFILE_MARGIN: Final = 64
CLONE_NEWUSER: Final = 0x10000000
CLONE_NEWNET: Final = 0x40000000
PR_SET_DUMPABLE: Final = 4
UNAVAILABLE: Final = "unavailable"
LANDLOCK_PREFIX: Final = "landlock-"  # "landlock-7": the ABI in force
UID_PREFIX: Final = "uid-"  # "uid-65534": the identity a root worker took once its inputs were open


def _code_folders() -> tuple[str, ...]:
    """Where the worker's Python code lives (read-only to it: no data is kept there)."""
    paths = sysconfig.get_paths()
    folders = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    folders.update(os.path.dirname(package.__file__ or "") for package in (importer, service))
    return tuple(sorted(folder for folder in folders if folder))


CODE_FOLDERS: Final = _code_folders()  # computed once in the fork server


def make_undumpable() -> None:
    """PR_SET_DUMPABLE 0: no process of the same uid may open this one's
    /proc/<pid>/mem or environ or attach to it (nor read a core of it). The
    front end calls it at start; the fork server when it loads the worker's
    module, so every worker it forks starts that way too."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")


def isolate_network() -> str:
    """Enter a new network namespace: "namespace", "user-namespace" or "unavailable"."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(CLONE_NEWNET) == 0:
            return "namespace"
        if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
            return "user-namespace"
    except (OSError, AttributeError):
        pass
    return UNAVAILABLE


def keep_only_descriptors(keep: set[int], output: int | None) -> None:
    """Send stdout and stderr to `output` (the front end's pipe; else /dev/null),
    then close every descriptor but 0, 1, 2 and `keep`."""
    target = output if output is not None else os.open(os.devnull, os.O_WRONLY)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(target, 1)
    os.dup2(target, 2)
    kept = sorted({0, 1, 2} | keep)
    for low, high in zip(kept, [*kept[1:], 1 << 20], strict=True):
        if high > low + 1:
            os.closerange(low + 1, high)  # close_range(2) where the kernel has it


def confine_files(job: WorkerJob) -> str:
    """Landlock: read the job's inputs and the code, nothing else. "landlock-N" or "unavailable".

    The inputs are granted as folders (the model's, and its external-data
    folder), never as the model file itself: a rule holds its inode until the
    kernel frees the worker's domain, a little after the worker exits, and an
    evicted or deleted upload would keep its space that long."""
    read_trees = list(CODE_FOLDERS)
    if job.task != "probe":
        read_trees.append(job.directory)
        if job.external_dir:
            read_trees.append(job.external_dir)
    try:
        return f"{LANDLOCK_PREFIX}{landlock.restrict_self(read_trees)}"
    except landlock.LandlockUnavailable:
        return UNAVAILABLE


def narrow_to_code() -> bool:
    """Landlock once more, for a worker whose inputs are open and mapped: from
    now on it may read only the code, not even its inputs' folders (a check
    worker, before onnxruntime sees the model: any file it tries to open of
    its own is refused). False where Landlock is unavailable."""
    try:
        landlock.restrict_self(CODE_FOLDERS)
    except landlock.LandlockUnavailable:
        return False
    return True


def set_limits(job: WorkerJob) -> None:
    memory = job.memory
    cpu = job.cpu_seconds
    nofile = job.max_external_files + NOFILE_MARGIN
    resource.setrlimit(resource.RLIMIT_DATA, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile if hard == resource.RLIM_INFINITY else min(nofile, hard)))
    resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))


def drop_identity(uid: int, gid: int) -> bool:
    """Leave root for `uid`:`gid` (no supplementary groups) once the inputs are
    open; nothing to do for any other user. True if the identity changed."""
    if os.geteuid() != 0:
        return False
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    return True


def combine_isolation(*parts: str) -> str:
    """What is in effect ("namespace+landlock-7+seccomp", "seccomp", ...), or "unavailable"."""
    return "+".join(part for part in parts if part != UNAVAILABLE) or UNAVAILABLE
