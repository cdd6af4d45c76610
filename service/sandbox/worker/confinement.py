"""The walls a worker puts up around itself once its inputs are open, before it parses a byte.

`confine(job)` puts them up in this order (`service.sandbox.worker.main.main` calls it; and
`make_undumpable` keeps the front end's and the fork server's memory out of
reach):

1. `keep_only_descriptors` (called first, by main): every inherited
   descriptor closed but its connection to the front end, its stderr pipe
   and /dev/null; stdout and stderr go to that pipe, which the front end
   reads, bounded, and logs as the worker's lines (never raw into the
   service's log). Then main opens the model file (the importer's
   `open_model`), as the service's own user, while the file is still in view;
2. its own cgroups (`service.sandbox.cgroups`: all of its memory counted, its tasks
   bounded), joined while the host's cgroup tree is still in view;
3. its own namespaces (`service.sandbox.worker.namespaces`): user (unless root), IPC,
   PID (it goes on as PID 1 of a new one, its parent standing by), mount,
   UTS, cgroup and network;
4. in its mount namespace, a minimal root (`service.sandbox.worker.minimal_root`): only the
   model's folder, its external-data folder and the Python code, read-only
   (a check worker given its model's external files: the code, and only the
   model file and those files, bound from the descriptors checked:
   `service.sandbox.worker.bound_files`; "files-mapped" in its isolation);
5. no privilege (`service.sandbox.worker.privileges`): its own uid and gid, every
   capability set empty, the bounding set too, no_new_privs. The external
   data files the parse names are opened by the front end for it
   (`service.sandbox.worker.file_broker`), as the service's user. Leaving
   root clears the death signal main armed (`service.sandbox.worker.lifeline`):
   it is set again;
6. Landlock's file policy (`service.sandbox.worker.landlock`): it may read the files
   beneath those folders (a mapped check worker: those files only) and create, write, link, rename, truncate, remove
   or run nothing anywhere; signals and abstract UNIX sockets scoped to
   itself. Before any thread starts, since a Landlock domain binds the
   thread that asks and what it starts afterwards;
7. the memory watchdog (`service.sandbox.memory_watch`) and, in a check
   worker, the smoke run's CPU watchdog (`service.checks.stages.cpu_budget`),
   both threads started before `set_limits` (RLIMIT_DATA, CPU, NOFILE,
   FSIZE 0, CORE 0, NPROC 0: no thread may start after it);
8. the seccomp filter (`service.sandbox.worker.seccomp`), last: an allow-list.

Each step the kernel refuses is left out, never fatal: what is in effect is
reported as the isolation string (`combine_isolation`: "user-namespace+
pid-namespace+...+landlock-7+seccomp"; `service.sandbox.supervisor.describe_isolation` reads
it back for /readyz), and the service logs at start what is missing.
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
from service.checks.stages.cpu_budget import start_watchdog
from service.sandbox.protocol import WorkerJob
from service.sandbox.worker import landlock
from service.sandbox.worker.bound_files import FILES_MAPPED, BoundFiles
from service.sandbox.worker.lifeline import host_parent, rearm
from service.sandbox.worker.memory_limit import open_own_status, watch_memory
from service.sandbox.worker.minimal_root import pivot_to_minimal_root
from service.sandbox.worker.namespaces import CLONE_NEWNS, enter_namespaces
from service.sandbox.worker.privileges import UNPRIVILEGED, drop_capabilities, drop_privileges, empty_bounding_set, unprivileged
from service.sandbox.worker.seccomp import install_worker_filter

NOFILE_MARGIN: Final = 64
PR_SET_DUMPABLE: Final = 4
MINIMAL_ROOT: Final = "minimal-root"
UNAVAILABLE: Final = "unavailable"
LANDLOCK_PREFIX: Final = "landlock-"  # "landlock-7": the ABI in force
UID_PREFIX: Final = "uid-"  # "uid-65534": the identity the worker parses as


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


def confine(job: WorkerJob, bound: BoundFiles | None = None) -> str:
    """Steps 2 to 8 above; what is in effect, as the isolation string. In the
    parent of a PID namespace made here this never returns (it leaves as its
    child does). `bound`: a check worker's model and external data files,
    bound into its minimal root in place of their folders (FILES_MAPPED in the
    isolation where they are; else their folders, as for any worker)."""
    cgroups = join_cgroups(job.cgroups)
    empty_bounding_set()  # while it may (as root, before it may have to leave root to make a user namespace)
    fork_server = host_parent()  # armed to die with it (main), so alive
    namespaces = enter_namespaces(job.worker_uid, job.worker_gid, stand_by=lambda: stand_by(fork_server))
    status_fd = open_own_status()  # this process's (PID 1 of its namespace), before /proc is out of view
    layers = [*namespaces.names, *cgroups]
    mapped: tuple[str, ...] = ()
    if namespaces.has(CLONE_NEWNS):
        try:
            mapped = bind_files(bound)
            if not mapped:
                pivot_to_minimal_root(input_folders(job))
            layers.append(MINIMAL_ROOT)
        except OSError:
            pass  # the kernel (or a container's policy) refused a mount: Landlock still confines reads
    parent = host_parent(status_fd)  # still armed to die with it, so alive
    drop_privileges(job.worker_uid, job.worker_gid, namespaces)
    rearm(parent, status_fd)  # leaving root cleared PR_SET_PDEATHSIG
    if unprivileged():
        layers.append(UNPRIVILEGED)
    layers.append(f"{UID_PREFIX}{os.getuid()}")
    layers.append(confine_files(job, mapped))
    if mapped:
        layers.append(FILES_MAPPED)
    watch_memory(job.memory, status_fd)  # before the limits: RLIMIT_NPROC 0 forbids new threads
    if job.task == "checks":
        start_watchdog()  # the smoke run's CPU budget, idle until a run is watched
    set_limits(job)
    layers.append(install_worker_filter())
    return combine_isolation(*layers)


def bind_files(bound: BoundFiles | None) -> tuple[str, ...]:
    """A minimal root of the code and `bound`'s files only: their paths; ()
    where there are none, or the kernel refuses a step of it (a procfs of
    `subset=pid` before Linux 5.8; a file swapped before it was bound)."""
    if bound is None:
        return ()
    try:
        pivot_to_minimal_root(CODE_FOLDERS, bound.targets)
    except OSError:
        return ()
    return tuple(bound.targets)


def stand_by(fork_server: int) -> None:
    """In the parent of a PID namespace made here, before it waits for its
    child: die with the fork server still (a root worker left root to make
    its user namespace, which cleared PR_SET_PDEATHSIG: else a `kill -9` of
    the service left it, and its child at work, running), and hold no privilege."""
    rearm(fork_server)
    drop_capabilities()


def network_isolation(layers: list[str]) -> str:
    """/readyz's network_isolation: "namespace", "user-namespace" (one made through a user namespace) or "unavailable"."""
    if "network-namespace" not in layers:
        return UNAVAILABLE
    return "user-namespace" if "user-namespace" in layers else "namespace"


def join_cgroups(groups: tuple[tuple[str, str], ...]) -> list[str]:
    """Move this process into its own cgroups ((controller, its `tasks` or
    `cgroup.procs`) pairs); the layers joined ("memory-cgroup", "pids-cgroup")."""
    joined = []
    for controller, procs in groups:
        try:
            with open(procs, "w", encoding="ascii") as file:
                file.write("0")
        except OSError:
            continue
        joined.append(f"{controller}-cgroup")
    return joined


def input_folders(job: WorkerJob) -> list[str]:
    """What the worker's minimal root holds: the code, and the job's input folders."""
    folders = list(CODE_FOLDERS)
    if job.task != "probe":
        folders.append(job.directory)
        if job.external_dir:
            folders.append(job.external_dir)
    return folders


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


def confine_files(job: WorkerJob, mapped: tuple[str, ...] = ()) -> str:
    """Landlock: read the job's inputs and the code, nothing else. "landlock-N" or "unavailable".

    The inputs are granted as folders (the model's, and its external-data
    folder), never as the model file itself: a rule holds its inode until the
    kernel frees the worker's domain, a little after the worker exits, and an
    evicted or deleted upload would keep its space that long. A check worker
    whose files are bound (`mapped`, their paths in its minimal root) is
    granted exactly those files instead, each to read (no folder to list):
    onnxruntime opens them by name; they keep their space that little longer."""
    try:
        return f"{LANDLOCK_PREFIX}{landlock.restrict_self(CODE_FOLDERS + mapped if mapped else input_folders(job))}"
    except landlock.LandlockUnavailable:
        return UNAVAILABLE


def narrow_to_code(mapped: tuple[str, ...] = ()) -> bool:
    """Landlock once more, for a worker whose inputs are open and mapped: from
    now on it may read only the code, not even its inputs' folders (a check
    worker, before onnxruntime sees the model: any file it tries to open of
    its own is refused), and the `mapped` files (bound for onnxruntime to
    open by name). False where Landlock is unavailable."""
    try:
        landlock.restrict_self(CODE_FOLDERS + mapped)
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


def combine_isolation(*parts: str) -> str:
    """What is in effect ("namespace+landlock-7+seccomp", "seccomp", ...), or "unavailable"."""
    return "+".join(part for part in parts if part != UNAVAILABLE) or UNAVAILABLE
