"""The workers' seccomp filter (service/sandbox/worker/seccomp.py), with real processes.

A real `Sandbox` (its own fork server; its workers the test-only entry point,
support/fault_worker.py) runs workers that try, after their sandbox is in
place, what it must stop (`FaultSandbox.job(..., test_action=...)`):
a socket, a program, ptrace, a child process. Each is stopped by SIGSYS and
reported as a crashed worker naming the forbidden system call; the program the
exec would have run never ran. A thread cannot be started (RLIMIT_NPROC), an
import still works, the worker holds no socket it could use instead, signals
reach only the worker itself, and /readyz over HTTP reports seccomp in
`worker_sandbox`.
Skipped only where libseccomp cannot be loaded.

Why a process: walls: system calls a worker process makes after its filter is
in place are stopped by the kernel (SIGSYS), in workers forked by a real fork
server.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.service_harness import SAMPLES, ServiceProcess, children_of, open_files, started_sandbox

from service.sandbox.protocol import WorkerJob
from service.sandbox.supervisor import Sandbox, WorkerOutcome, describe_isolation
from service.sandbox.worker import seccomp as seccomp_filter
from service.settings import Settings

pytestmark = pytest.mark.skipif(
    seccomp_filter.UNAVAILABLE_REASON is not None, reason=f"no seccomp filter here: {seccomp_filter.UNAVAILABLE_REASON}"
)

STOPPED = "stopped by its sandbox: it made a forbidden system call (SIGSYS)"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    with started_sandbox() as started:
        yield started


def _import_job(sandbox: Sandbox, **details: object) -> WorkerJob:
    return sandbox.job("import", directory=str(SAMPLES), model="add.onnx", display_name="add.onnx", **details)


def _run(sandbox: Sandbox, job: WorkerJob, folder: Path) -> WorkerOutcome:
    return sandbox.run(job, [folder / "catalog", folder / "converted"])


def test_the_probe_reports_seccomp(sandbox: Sandbox) -> None:
    assert "seccomp" in sandbox.isolation.split("+")
    assert "seccomp" in sandbox.worker_sandbox
    assert sandbox.network_isolation in ("namespace", "user-namespace", "unavailable")


@pytest.mark.parametrize("action", ["socket", "ptrace", "fork"])
def test_a_forbidden_call_stops_the_worker(sandbox: Sandbox, tmp_path: Path, action: str) -> None:
    outcome = _run(sandbox, _import_job(sandbox, test_action=action), tmp_path)
    assert outcome.status == "crashed", outcome
    assert STOPPED in outcome.detail
    assert list(tmp_path.iterdir()) == []


def test_an_exec_never_runs_the_program(sandbox: Sandbox, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    program = tmp_path / "program.sh"
    program.write_text(f'#!/bin/sh\n: > "{marker}"\n')  # a shell builtin: no fork needed
    program.chmod(program.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    subprocess.run([str(program)], check=True, timeout=30)  # the control: run unconfined, it leaves its marker
    assert marker.exists()
    marker.unlink()
    job = sandbox.job("import", directory=str(tmp_path), model=program.name, display_name="program", test_action="exec")
    outcome = sandbox.run(job, [tmp_path / "catalog", tmp_path / "converted"])
    assert outcome.status == "crashed", outcome
    assert STOPPED in outcome.detail
    assert not marker.exists()


def test_a_thread_cannot_be_started(sandbox: Sandbox, tmp_path: Path) -> None:
    """The worker parses as an unprivileged user under RLIMIT_NPROC 0 (and, where
    the service may make one, a pids cgroup): no thread, and no stop by the filter."""
    outcome = _run(sandbox, _import_job(sandbox, test_action="thread"), tmp_path)
    assert outcome.status == "crashed" and "SIGSYS" not in outcome.detail, outcome


def test_an_import_works_under_the_filter(sandbox: Sandbox, tmp_path: Path) -> None:
    outcome = _run(sandbox, _import_job(sandbox), tmp_path)
    assert outcome.status == "ok", outcome
    assert outcome.header is not None and "seccomp" in outcome.header.isolation.split("+")
    assert (tmp_path / "catalog").stat().st_size > 0


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_the_worker_holds_no_socket_but_its_file_broker(sandbox: Sandbox, tmp_path: Path) -> None:
    """The filter lets `sendmsg` and the like through; they find no socket to
    use but the one the front end opens external data files through."""
    result: list[WorkerOutcome] = []
    running = threading.Thread(target=lambda: result.append(_run(sandbox, _import_job(sandbox, sleep=3.0), tmp_path)))
    running.start()
    try:
        deadline = time.monotonic() + 10
        workers: list[int] = []
        while not workers and time.monotonic() < deadline:  # the fork server's child (and its child, where it made its PID namespace)
            servers = [child for child in children_of(os.getpid()) if b"multiprocessing.forkserver" in _command_line(child)]
            workers = [worker for server in servers for worker in children_of(server)]
            workers = [leaf for worker in workers for leaf in children_of(worker)] or workers
            time.sleep(0.02)
        assert workers, "no worker appeared"
        time.sleep(1.0)  # its walls up: the job sleeps 3 s once they are
        try:
            targets = open_files(workers[0])
        except PermissionError:  # the worker is not dumpable: only CAP_SYS_PTRACE sees its descriptors
            pytest.skip("the worker's descriptors cannot be read here (it is not dumpable, and this root has no CAP_SYS_PTRACE)")
        sockets = [target for target in targets if target.startswith("socket:")]
        assert len(sockets) == 1, targets  # the file broker's socket pair (service/sandbox/worker/file_broker.py)
    finally:
        running.join()
    assert result and result[0].status == "ok", result


def _in_filtered_child(check: str) -> int:
    """Fork this process; the child installs the filter, runs `check` and
    exits 0 if it held. The child's exit code (negative: its signal)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 3
        try:
            code = 2 if seccomp_filter.install_worker_filter() != "seccomp" else (0 if _check(check) else 1)
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _check(check: str) -> bool:
    if check == "signal-self":
        os.kill(os.getpid(), 0)
        return True
    if check == "signal-other":
        try:
            os.kill(os.getppid(), 0)
        except PermissionError:
            return True
        return False
    if check == "socket":
        socket.socket()
    return False


def test_signals_reach_only_the_worker_itself() -> None:
    assert _in_filtered_child("signal-self") == 0
    assert _in_filtered_child("signal-other") == 0  # EPERM: the front end, the fork server, other workers
    assert _in_filtered_child("socket") == -31  # SIGSYS


def test_isolation_reports_are_read_back() -> None:
    assert describe_isolation("network-namespace+seccomp") == ("namespace", ["network-namespace", "seccomp"], 0)
    both = ("user-namespace", ["user-namespace", "network-namespace", "seccomp"], 0)
    assert describe_isolation("user-namespace+network-namespace+seccomp") == both
    assert describe_isolation("seccomp") == ("unavailable", ["seccomp"], 0)
    assert describe_isolation("unavailable") == ("unavailable", [], 0)
    every = "pid-namespace+ipc-namespace+mount-namespace+uts-namespace+cgroup-namespace+network-namespace"
    every += "+memory-cgroup+pids-cgroup+minimal-root+unprivileged+uid-65534+landlock-7+seccomp"
    network, layers, abi = describe_isolation(every)
    assert (network, abi) == ("namespace", 7)
    assert layers == [
        "pid-namespace", "ipc-namespace", "mount-namespace", "uts-namespace", "cgroup-namespace", "network-namespace",
        "minimal-root", "unprivileged", "memory-cgroup", "pids-cgroup", "landlock", "seccomp",
    ]  # fmt: skip


def test_the_services_own_sandbox_takes_no_test_action() -> None:
    """The actions are the test-only worker entry's: a job of the service's sandbox has no field for them."""
    with pytest.raises(TypeError, match="test_action"):
        Sandbox(Settings()).job("import", directory=str(SAMPLES), model="add.onnx", test_action="socket")


def test_readiness_reports_seccomp_over_http(tmp_path: Path) -> None:
    service = ServiceProcess(tmp_path / "store", SAMPLES).start()
    try:
        with service.client() as client:
            body = client.get("/readyz").json()
    finally:
        service.stop()
    assert "seccomp" in body["worker_sandbox"], body
    assert body["network_isolation"] in ("namespace", "user-namespace", "unavailable")
    assert ("network-namespace" in body["worker_sandbox"]) == (body["network_isolation"] != "unavailable")
    assert "worker sandbox in effect: " in service.log.read_text()


CONTAINER_PROFILE = """\
# Installed at interpreter start (PYTHONPATH): what a container runtime's
# default seccomp profile does to a process without CAP_SYS_ADMIN.
import errno

import pyseccomp

profile = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
for name in ("unshare", "setns"):
    profile.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
profile.load()
"""


def test_seccomp_holds_where_no_namespace_can_be_made(tmp_path: Path) -> None:
    """As under Docker's default profile: unshare refused, the workers still filter
    themselves (and, as root, still leave root before they parse)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(CONTAINER_PROFILE)
    service = ServiceProcess(tmp_path / "store", SAMPLES, env={"PYTHONPATH": str(site)}).start()
    try:
        with service.client() as client:
            body = client.get("/readyz").json()
            imported = client.post("/models", json={"path": "add.onnx"})
    finally:
        service.stop()
    assert body["network_isolation"] == "unavailable", body
    assert not [layer for layer in body["worker_sandbox"] if layer.endswith("-namespace") or layer == "minimal-root"], body
    assert "seccomp" in body["worker_sandbox"], body
    assert imported.status_code in (200, 201), imported.text
