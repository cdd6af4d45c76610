"""The worker's walls in depth, with real workers: what a model that ran code
in a worker would try, tried (tests/support/worker_attacks.py runs each attack in a
fresh worker at the moment it would parse its model, with every wall up,
and once more without walls as the control), as root and as an unprivileged
user, leaving nothing behind on the host (no System V IPC object, no cgroup,
no process); the privileges a worker holds as it parses (none); shared
memory past the worker's cap ending it as out of memory, with its cgroup and
with its memory watch alone; the worker's descriptors; its output kept out
of the service's log; /readyz reporting Landlock's ABI. Skipped only where
the kernel offers no Landlock (then /readyz says so, and the service still
starts unless --require-landlock).

Why a process: walls: attacks run inside real worker processes (as root and as
an unprivileged user), their privileges, descriptors, memory caps and what
they leave on the host, read by the kernel's own accounts.
"""

from __future__ import annotations

import errno
import itertools
import json
import logging
import os
import pwd
import shutil
import site
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from support.fault_worker import ProbeAnswer
from support.faults import FaultSandbox as Sandbox  # the test-only worker entry: jobs with test_code
from support.paths import REPO
from support.service_harness import SAMPLES, ServiceProcess, started_sandbox
from support.worker_walls import ATTACKS, OUTSIDE_NAME, check_attack_outcomes, namespaces_available, public_copy

from service.api.schemas import Readiness
from service.sandbox.worker import landlock

pytestmark = pytest.mark.skipif(landlock.abi_version() < 1, reason="this kernel offers no Landlock")

NOBODY = 65534
# what the fork server runs as it starts
START_AGAIN = "import subprocess, sys, service.sandbox.supervisor; subprocess.run([sys.executable, '-c', ''], check=True)"
AS_NOBODY = ("setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups")
CAP_SYS_PTRACE = 19
CAP_SYS_ADMIN = 21
CAP_SYS_NICE = 23


def _effective_capabilities() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("CapEff:")), 16)


def may_trace_anything() -> bool:
    """This process has CAP_SYS_PTRACE in effect (root on a host; not root in a container by default)."""
    return bool(_effective_capabilities() >> CAP_SYS_PTRACE & 1)


def in_a_container() -> bool:
    """Docker's marker file: its runtime's profile may refuse a control what a host allows (CONTAINER_REFUSES)."""
    return Path("/.dockerenv").exists()


def holds_privilege() -> bool:
    """Root with CAP_SYS_ADMIN and CAP_SYS_NICE in effect, which the controls of NEEDS_PRIVILEGE's attacks
    need (root on a host; not root in a container with the runtime's default capabilities)."""
    effective = _effective_capabilities()
    return os.geteuid() == 0 and all(effective >> capability & 1 for capability in (CAP_SYS_ADMIN, CAP_SYS_NICE))


def _attack_folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="worker-attacks-", dir="/tmp"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


attack_folder = pytest.fixture(_attack_folder)


def _run_attacks(folder: Path, python: list[str] | None = None, env: dict[str, str] | None = None) -> dict[str, dict[str, str]]:
    """The attacks script's outcomes: as this user, or as nobody with `python` (and `env`)."""
    command = [*AS_NOBODY, *python, str(ATTACKS), str(folder)] if python else [sys.executable, str(ATTACKS), str(folder)]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd="/", env=env)
    assert ran.returncode == 0, ran.stderr[-4000:]
    outcomes: dict[str, dict[str, str]] = json.loads(ran.stdout)
    return outcomes


def _runs_as_nobody(python: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*AS_NOBODY, python, "-c", START_AGAIN], capture_output=True, text=True, timeout=60, cwd="/", env=env)


def python_for_nobody(folder: Path) -> tuple[list[str], dict[str, str]] | str:
    """An interpreter nobody may run with this checkout and its packages: this
    one; else, where this one lies in a private folder (a pyenv under /root),
    a venv of the system's Python of the same version (its ABI) reading this
    venv's packages (a .pth file) and the checkout (PYTHONPATH). Else why not."""
    if _runs_as_nobody(sys.executable).returncode == 0:
        return [sys.executable], dict(os.environ)
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    system = shutil.which(f"python{version}", path="/usr/bin:/usr/local/bin:/bin")
    if system is None:
        return f"uid {NOBODY} cannot run this Python (a folder on the way is private), and there is no system python{version}"
    venv = folder / "nobody-venv"
    subprocess.run([system, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    (next(venv.glob("lib/python*/site-packages")) / "checkout-packages.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    folder.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    probe = _runs_as_nobody(str(venv / "bin" / "python"), env)
    if probe.returncode != 0:
        closed = {_closed_on_the_way(path) for path in (REPO, Path(site.getsitepackages()[0]))} - {None}
        said = (probe.stderr.strip().splitlines() or ["no message"])[-1][-300:]
        why = "; ".join(f"{folder} is closed to other users" for folder in sorted(map(str, closed))) or said
        return f"uid {NOBODY} cannot run this checkout: {why} ({said})"
    return [str(venv / "bin" / "python")], env


def _closed_on_the_way(path: Path) -> Path | None:
    """The first folder on the way to `path` that other users may not enter (a checkout under /root), or None."""
    return next((folder for folder in [*reversed(path.parents), path] if not folder.stat().st_mode & 0o001), None)


def host_traces() -> dict[str, set[str]]:
    """What a worker could leave on the host: System V IPC objects (key and id), worker cgroups, processes of the worker uid."""
    ipc = {kind: _ipc_objects(kind) for kind in ("shm", "msg", "sem")}
    groups = {str(path) for path in Path("/sys/fs/cgroup").glob("**/onnx-worker-*")}
    workers = {status.parent.name for status in Path("/proc").glob("[0-9]*/status") if _uid_of(status) == NOBODY}
    return {**ipc, "cgroups": groups, "worker processes": workers}


def _ipc_objects(kind: str) -> set[str]:
    """Key and id of the System V IPC objects of `kind`, but those the `postgres` account created: a test's
    PostgreSQL (tools/fleet_servers.py, as that account when root) may start or stop beside this test."""
    try:
        postgres = str(pwd.getpwnam("postgres").pw_uid)
    except KeyError:
        postgres = None
    header, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
    creator = header.split().index("cuid")
    return {" ".join(row.split()[:2]) for row in rows if row.split()[creator] != postgres}


def assert_no_trace_left(before: dict[str, set[str]]) -> None:
    """Nothing on the host that was not there `before`, once the script's own processes (its fork server) have gone
    (other processes of this machine, a test's PostgreSQL, may have removed theirs meanwhile)."""
    deadline = time.monotonic() + 10
    while (
        left := {kind: found - before[kind] for kind, found in host_traces().items() if found - before[kind]}
    ) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def _uid_of(status: Path) -> int | None:
    try:
        line = next(line for line in status.read_text().splitlines() if line.startswith("Uid:"))
    except (OSError, StopIteration):
        return None
    return int(line.split()[1])


def test_every_attack_fails_inside_a_worker_as_this_user(attack_folder: Path) -> None:
    before = host_traces()
    check_attack_outcomes(
        _run_attacks(attack_folder), may_trace=may_trace_anything(), privileged=holds_privilege(), container=in_a_container()
    )
    assert_no_trace_left(before)


@pytest.mark.skipif(os.geteuid() != 0, reason="not root: the test above is the unprivileged run")
def test_every_attack_fails_inside_a_worker_as_an_unprivileged_user(attack_folder: Path) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("no setpriv (util-linux) to run as another user")
    interpreter = Path(tempfile.mkdtemp(prefix="worker-attacks-python-", dir="/tmp"))
    try:
        found = python_for_nobody(interpreter)
        if isinstance(found, str):
            pytest.skip(found)
        python, env = found
        before = host_traces()
        check_attack_outcomes(_run_attacks(attack_folder, python, env), may_trace=False, privileged=False)
        assert_no_trace_left(before)
    finally:
        shutil.rmtree(interpreter, ignore_errors=True)


# -- the same sandbox in this process, for what the script does not show


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with started_sandbox() as started:
        yield started


def _code(sandbox: Sandbox, code: str) -> str:
    return _probe(sandbox, code, SAMPLES).test_result or ""


def _probe(sandbox: Sandbox, code: str, folder: Path) -> ProbeAnswer:
    """Run `code` in an import worker of add.onnx in `folder`, its walls up: its header (isolation, test_result)."""
    job = sandbox.job("import", directory=str(folder), model="add.onnx", display_name="add.onnx", test_code=code)
    return sandbox.run_probe(job, timeout=20.0)


OPEN_DESCRIPTORS = """
import os, stat
kinds = {}
for fd in range(4096):
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        continue
    kinds[fd] = "socket" if stat.S_ISSOCK(mode) else "pipe" if stat.S_ISFIFO(mode) else "char" if stat.S_ISCHR(mode) else "file"
result = repr(kinds)
"""


PRIVILEGES = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
header = (ctypes.c_uint32 * 2)(0x20080522, 0)
sets = (ctypes.c_uint32 * 6)()
assert libc.capget(header, sets) == 0
bounding = [capability for capability in range(64) if libc.prctl(23, capability, 0, 0, 0) == 1]
ambient = [capability for capability in range(64) if libc.prctl(47, 1, capability, 0, 0) == 1]

def read(path):
    try:
        with open(path, "rb") as file:
            file.read(1)
    except OSError as error:
        return type(error).__name__
    return "read"

result = repr({
    "uids": os.getresuid(), "gids": os.getresgid(), "groups": os.getgroups(), "pid": os.getpid(),
    "capabilities": list(sets), "bounding": bounding, "ambient": ambient, "no_new_privs": libc.prctl(39, 0, 0, 0, 0),
    "seccomp": libc.prctl(21, 0, 0, 0, 0),
    "model open": sorted(os.listdir(FOLDER)), "model read": read(os.path.join(FOLDER, "add.onnx")), "outside": read(OUTSIDE),
})
"""


def test_a_worker_holds_no_privilege_as_it_reads_its_model(sandbox: Sandbox) -> None:
    """A worker reads its model's folder with no privilege, its filter in
    force, and Landlock refusing a world-readable file beside that folder.
    The model is handed in a folder any user may reach: where a container's
    policy refuses namespaces (Docker's default seccomp profile), a root
    worker has no minimal root and reads the host's files as uid 65534, to
    which a checkout under a private folder (/root) is closed; there the walls
    that remain are what this shows (and no network: there it is seccomp's,
    a new socket stops the worker, test_worker_seccomp.py)."""
    namespaces = namespaces_available()
    with public_copy(SAMPLES / "add.onnx") as folder:
        code = PRIVILEGES.replace("FOLDER", repr(str(folder))).replace("OUTSIDE", repr(str(folder.parent / OUTSIDE_NAME)))
        header = _probe(sandbox, code, folder)
    held: dict[str, Any] = eval(header.test_result or "")
    isolation = header.isolation.split("+")
    assert 0 not in (*held["uids"], *held["gids"], *held["groups"]), held
    if os.geteuid() == 0:
        assert held["uids"] == (NOBODY,) * 3 and held["gids"] == (NOBODY,) * 3 and held["groups"] == [], held
    assert held["capabilities"] == [0] * 6 and held["ambient"] == [] and held["no_new_privs"] == 1, held
    if os.geteuid() == 0 or namespaces:  # else: no CAP_SETPCAP to empty it with
        assert held["bounding"] == [], held
    assert "unprivileged" in isolation, isolation
    assert held["seccomp"] == 2 and "seccomp" in isolation, (held, isolation)  # its filter, in force
    assert any(layer.startswith("landlock-") for layer in isolation), isolation
    # beside its folder: out of view in a minimal root; else in view, and Landlock refuses it
    assert held["outside"] == ("FileNotFoundError" if "minimal-root" in isolation else "PermissionError"), (held, isolation)
    if namespaces:
        assert held["pid"] == 1, held  # the first process of a PID namespace of its own
    else:
        assert not [layer for layer in isolation if layer.endswith("namespace")], isolation  # what this case is
    assert held["model open"] == ["add.onnx"] and held["model read"] == "read", held


NICENESS = """
import os
try:
    os.setpriority(os.PRIO_PROCESS, 0, 0)
    undone = "undone"
except OSError as error:
    undone = error.errno
result = repr((os.getpriority(os.PRIO_PROCESS, 0), undone))
"""


def test_a_worker_runs_at_a_lower_cpu_priority_than_the_front_end(sandbox: Sandbox) -> None:
    """Its fork server's niceness (service.sandbox.worker.fork_server), which it may not undo: a front end wanting a core gets it first."""
    niceness, undone = eval(_code(sandbox, NICENESS))
    assert niceness == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10) and undone == errno.EPERM, (niceness, undone)


SHARED_MEMORY = """
import mmap
mapping = mmap.mmap(-1, {size}, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
for offset in range(0, {size}, mmap.PAGESIZE):
    mapping[offset] = 1
result = "not stopped"
"""


@pytest.mark.parametrize("cgroup", [True, False], ids=["memory cgroup", "memory watch alone"])
def test_shared_memory_past_the_cap_ends_the_worker_as_out_of_memory(sandbox: Sandbox, tmp_path: Path, cgroup: bool) -> None:
    if cgroup and sandbox.cgroups is None:
        pytest.skip("the service may make no cgroup here (not root, or a read-only cgroup file system)")
    limit = 256 << 20
    code = SHARED_MEMORY.format(size=limit * 3 // 2)
    job = sandbox.job("import", directory=str(SAMPLES), model="add.onnx", display_name="add.onnx", memory=limit, test_code=code)
    groups, sandbox.cgroups = sandbox.cgroups, sandbox.cgroups if cgroup else None
    try:
        outcome = sandbox.run(job, [tmp_path / "catalog", tmp_path / "converted"])
    finally:
        sandbox.cgroups = groups
    assert outcome.status == "resource_limit" and outcome.limit == "memory", outcome
    if cgroup:
        assert outcome.header is None or "memory-cgroup" in outcome.header.isolation


def test_a_worker_holds_only_its_own_descriptors(sandbox: Sandbox) -> None:
    kinds: dict[int, str] = eval(_code(sandbox, OPEN_DESCRIPTORS))
    # stdin (/dev/null), stdout and stderr (the output pipe), the connection, /proc/self/status,
    # the file broker's socket (a socket pair's end: the front end opens external data through it).
    assert len(kinds) <= 6, kinds
    assert kinds[0] == "char" and kinds[1] == kinds[2] == "pipe", kinds
    assert list(kinds.values()).count("socket") == 1, kinds


FORGED = (
    "import os\n"
    "os.write(2, b'plain\\n2026-11-30 12:00:00,000 INFO service.audit: delete by admin: ok\\x1b[2J\\n' + b'x' * 100000)\n"
    "result = 'wrote'"
)


def test_worker_output_is_logged_as_the_workers_and_bounded(sandbox: Sandbox, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="service.sandbox"):
        assert _code(sandbox, FORGED) == "wrote"
    lines = [record.getMessage() for record in caplog.records if record.name == "service.sandbox"]
    assert lines and all(line.startswith("worker ") for line in lines), lines
    forged = next(line for line in lines if "delete by admin" in line)
    assert forged.split(": ", 1)[1].startswith("2026-11-30") and "\x1b" not in forged and "\\x1b" in forged
    assert any("more bytes of output not logged" in line for line in lines)
    assert sum(len(line) for line in lines) < 80_000


def test_each_workers_answer_carries_its_profile_step_by_step(sandbox: Sandbox, tmp_path: Path) -> None:
    """An import worker and a check worker say how long each of their steps
    took, from the front end's asking for the worker on (what the validation
    benchmark's profiles read in the log)."""
    job = sandbox.job("import", directory=str(SAMPLES), model="add.onnx", display_name="add.onnx", checks=("schema", "security", "shape"))
    imported = sandbox.run(job, [tmp_path / "catalog", tmp_path / "converted"])
    assert imported.status == "ok" and imported.header is not None
    assert list(imported.header.steps) == ["fork", "open", "walls", "read", "stages", "catalogue", "hashes"]
    assert all(0 <= seconds <= imported.seconds for seconds in imported.header.steps.values())
    reports, checked = sandbox.run_checks(replace(job, task="checks"))
    assert [report.stage for report in reports] == ["shape"] and checked.header is not None
    assert list(checked.header.steps) == ["fork", "open", "walls", "read", "narrow", "refusals", "shape"]
    assert checked.header.steps["shape"] >= reports[0].seconds


@pytest.mark.skipif(os.geteuid() != 0, reason="workers change identity only when the service runs as root")
def test_a_root_worker_takes_its_own_identity_once_its_inputs_are_open(sandbox: Sandbox, tmp_path: Path) -> None:
    job = sandbox.job("import", directory=str(SAMPLES), model="add.onnx", display_name="add.onnx")
    outcome = sandbox.run(job, [tmp_path / "catalog", tmp_path / "converted"])
    assert outcome.status == "ok", outcome
    assert outcome.header is not None and f"uid-{NOBODY}" in outcome.header.isolation.split("+")


def test_readyz_reports_landlock_and_its_abi_from_a_background_check(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path / "store", SAMPLES, "--require-landlock").start()
    try:
        with service.client() as client:
            answers = [client.get("/readyz").json() for _ in range(40)]
            workers = service.worker_pids()
    finally:
        service.stop()
    body = answers[-1]
    assert Readiness.model_validate(body).status == "ready"  # the documented fields, exactly
    assert set(body) == set(Readiness.model_fields), body
    assert body["landlock_abi"] == landlock.abi_version(), body
    assert "landlock" in body["worker_sandbox"], body
    # 40 calls in a row fork no worker each: they report one check (at most one renewal every 5 s)
    ages = [answer["checked_seconds_ago"] for answer in answers]
    assert sum(1 for before, after in itertools.pairwise(ages) if after < before) <= 1, ages
    assert len(workers) <= 1, workers


def test_require_landlock_refuses_to_start_without_it(tmp_path: Path) -> None:
    """A kernel without Landlock, as a container profile that refuses its calls makes it (ENOSYS)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(NO_LANDLOCK)
    store = tmp_path / "store"
    refused = subprocess.run(
        [sys.executable, "-m", "service", "--store", str(store), "--port", "0", "--require-landlock"],
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert refused.returncode == 2 and "--require-landlock" in refused.stderr, refused.stderr
    service = ServiceProcess(store, SAMPLES, env={"PYTHONPATH": str(site)}).start()  # without the flag: it starts, and says so
    try:
        with service.client() as client:
            body = client.get("/readyz").json()
    finally:
        service.stop()
    assert body["landlock_abi"] == 0 and "landlock" not in body["worker_sandbox"], body
    assert "Landlock unavailable" in service.log.read_text()


NO_LANDLOCK = """\
# Installed at interpreter start (PYTHONPATH): Landlock's system calls answer ENOSYS.
import errno

import pyseccomp

profile = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
for name in ("landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self"):
    profile.add_rule(pyseccomp.ERRNO(errno.ENOSYS), name)
profile.load()
"""
