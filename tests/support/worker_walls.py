"""The worker-attacks script (worker_attacks.py, beside this file) as the tests
run it, and how its outcomes are judged: by tests/service/process/test_worker_walls.py
on this machine (as root and as an unprivileged user), and by
tests/e2e/test_container.py in the running container."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ATTACKS = Path(__file__).resolve().with_name("worker_attacks.py")
# Refused to the control too unless it may trace any process (CAP_SYS_PTRACE): the front end is not dumpable.
PROTECTED_EVEN_UNCONFINED = {
    "read the front end's memory",
    "read the front end's environment",
    "read the front end's memory (process_vm_readv)",
    "trace the front end (ptrace)",
    "trace the fork server (ptrace)",
}
# Refused to an unprivileged control by the kernel's own rules (capabilities, sysctls), whatever the sandbox.
NEEDS_PRIVILEGE = {
    "make itself real-time (SCHED_FIFO 50)",
    "make itself nice -20",
    "block every open on a mount (fanotify)",
    "mount a file system",
    "load a BPF map (bpf)",
    "open a userfaultfd",
}
# Refused to a control in a container by the runtime's own seccomp profile and dropped capabilities.
CONTAINER_REFUSES = {
    "a new user namespace (unshare)",  # the service's profile lets the workers make them: its control may too
    "open a performance counter (perf_event_open)",
    "set up an io_uring",
    "add a key to the user keyring",
    "System V shared memory (300 MiB, mode 0666)",  # compose's ipc: none still has an IPC namespace; a profile may refuse
    "a System V message queue",
    "a System V semaphore set",
}
# The walls every worker has where the kernel allows namespaces (this machine, and the container with its profile).
EXPECTED_WALLS = (
    "pid-namespace", "ipc-namespace", "mount-namespace", "network-namespace", "minimal-root", "unprivileged", "landlock", "seccomp",
)  # fmt: skip
# Stopped only by the minimal root (the worker's own mount namespace): stat needs no read right Landlock could refuse.
# A check worker's bound files too: without a mount namespace nothing is bound, and its inputs' folders are granted.
NEEDS_MINIMAL_ROOT = {
    "stat the API-key file", "stat /etc/shadow", "stat another tenant's stored model",
    "read a file beside the bound files", "list the bound files' folder",
}  # fmt: skip
# Can this user make a mount and a PID namespace (with a user namespace if it must)? Not in a container under the
# runtime's default seccomp profile (the bare-container stage of .ci/run): the workers then have Landlock and seccomp.
CAN_UNSHARE = (
    "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
    "os._exit(0 if libc.unshare(0x20000 | 0x20000000) == 0 or libc.unshare(0x10000000 | 0x20000 | 0x20000000) == 0 else 1)"
)


def namespaces_available() -> bool:
    return subprocess.run([sys.executable, "-c", CAN_UNSHARE], timeout=60).returncode == 0


@contextmanager
def public_copy(*files: Path) -> Iterator[Path]:
    """A folder any user may reach (mode 0755, under /tmp) holding copies of
    `files` (folders with what they hold; every file mode 0644), beside a world-readable file outside it
    (`OUTSIDE_NAME` in its parent, also 0755). For test code that a worker
    runs by path once its walls are up: where namespaces are refused (a
    container under its runtime's default seccomp profile) a root worker has
    no minimal root and reads the host's own files as its worker uid (65534),
    to which a checkout under a private folder (/root) is closed. The worker's
    task never does (it reads its model through the descriptor opened before
    the walls, and external data through the front end's file broker); test
    code that opens by path does, and needs a folder that uid may read: then
    what refuses a read is the walls, not the file's mode."""
    parent = Path(tempfile.mkdtemp(prefix="worker-walls-", dir="/tmp"))
    try:
        parent.chmod(0o755)
        folder = parent / "inputs"
        folder.mkdir(mode=0o755)
        for file in files:
            if file.is_dir():
                shutil.copytree(file, folder / file.name)
            else:
                shutil.copyfile(file, folder / file.name)
        for copied in folder.rglob("*"):
            copied.chmod(0o755 if copied.is_dir() else 0o644)
        outside = parent / OUTSIDE_NAME
        outside.write_text("readable by anyone, outside the worker's folders\n")
        outside.chmod(0o644)
        yield folder
    finally:
        shutil.rmtree(parent, ignore_errors=True)


OUTSIDE_NAME = "outside.txt"


def check_attack_outcomes(outcomes: dict[str, dict[str, str]], may_trace: bool, privileged: bool = True, container: bool = False) -> None:
    """Every attack refused (or the worker killed) with every expected wall up;
    each control (the same code without walls) worked, but where the kernel
    refuses it to this caller anyway: a process it may not trace
    (`may_trace`), a privilege it lacks (`privileged`), or a container's own
    profile (`container`)."""
    sandbox = outcomes.pop("sandbox")
    isolation = sandbox["isolation"]
    layers = set(isolation.replace("landlock-", "landlock+").split("+"))
    namespaces = namespaces_available()
    missing = [wall for wall in EXPECTED_WALLS if wall not in layers and (namespaces or wall in ("landlock", "seccomp"))]
    assert not missing, f"walls missing: {missing} (isolation {isolation})"
    if namespaces and "bound" in sandbox:  # the bound files' attacks met a check worker with its files bound
        assert "files-mapped" in sandbox["bound"].split("+"), sandbox["bound"]
    assert len(outcomes) >= 40
    if not namespaces:  # left to the walls there are; shown in full where namespaces can be had
        outcomes = {name: outcome for name, outcome in outcomes.items() if name not in NEEDS_MINIMAL_ROOT}
        # a container's own profile and capabilities refuse to the control what they refuse to the workers
        privileged, container = False, True
    held = {name: outcome["confined"] for name, outcome in outcomes.items() if outcome["confined"] == "done"}
    assert not held, f"attacks that worked inside a worker: {held}"
    for name, outcome in outcomes.items():
        assert outcome["confined"].startswith(("refused", "killed")), (name, outcome)
        if not may_trace and name in PROTECTED_EVEN_UNCONFINED:
            continue
        if not privileged and name in NEEDS_PRIVILEGE:
            continue
        if container and name in CONTAINER_REFUSES:
            continue
        assert outcome["control"] == "done", f"the control of {name!r} failed, so the attack proves nothing: {outcome}"
