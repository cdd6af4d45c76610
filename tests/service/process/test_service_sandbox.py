"""The worker sandbox over HTTP: a worker killed mid-import (WorkerCrashed),
the wall-clock deadline (ResourceLimit), the bounded queue (503 with
Retry-After), the workers held by test faults (support/faults.py: the
service started as `python -m support.faulty_service`), and no test hook in
`python -m service`.

Why a process: the sandbox's supervision of real worker processes under a
service process: a worker killed by a signal mid-import, deadlines and CPU
limits ending it, the bounded queue with a worker held busy, and settings
refused at the start of `python -m service`.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.faults import FAULTS
from support.paths import REPO
from support.service_harness import SAMPLES, ServiceProcess, assert_problem

SLEEP = "x-test-worker-sleep"


def _with_test_hooks(store: Path, *args: str) -> Iterator[ServiceProcess]:
    """The service on the samples with one worker, `args` and test faults; stopped on the way out."""
    service = ServiceProcess(store, SAMPLES, "--workers", "1", *args, env=FAULTS).start()
    try:
        yield service
    finally:
        service.stop()


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One worker, one waiting place, a 3 s deadline, 1 s of CPU, test faults."""
    store = tmp_path_factory.mktemp("service-sandbox") / "store"
    yield from _with_test_hooks(store, "--queue", "1", "--worker-timeout", "3", "--worker-cpu-seconds", "1")


@pytest.fixture(scope="module")
def cpu_limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """1 s of CPU within a 60 s deadline: on a busy machine the CPU limit, not the clock, ends a spinning worker."""
    store = tmp_path_factory.mktemp("service-cpu") / "store"
    yield from _with_test_hooks(store, "--worker-timeout", "60", "--worker-cpu-seconds", "1")


def _post_sleeping(service: ServiceProcess, seconds: float | str, path: str = "add.onnx") -> httpx.Response:
    with service.client() as client:
        return client.post("/models", json={"path": path}, headers={SLEEP: str(seconds)})


def _wait_for_worker(service: ServiceProcess, timeout: float = 10.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = service.sleeping_workers()  # the import's, never the readiness probe's beside it
        if pids:
            return pids[0]
        time.sleep(0.01)
    raise AssertionError("no worker appeared")


def test_a_worker_killed_mid_import_is_worker_crashed(hooked: ServiceProcess) -> None:
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_post_sleeping, hooked, 2.5)
        os.kill(_wait_for_worker(hooked), signal.SIGKILL)
        response = pending.result()
    body = assert_problem(response, 500, "worker-crashed")
    assert body["kind"] == "WorkerCrashed" and "SIGKILL" in body["detail"]
    with hooked.client() as client:  # the service goes on
        assert client.post("/models", json={"path": "typed_fields.onnx"}).status_code in (200, 201)
    assert hooked.temporary_files() == []


def test_the_deadline_is_a_resource_limit(hooked: ServiceProcess) -> None:
    started = time.monotonic()
    body = assert_problem(_post_sleeping(hooked, 30), 422, "resource-limit")
    assert body["kind"] == "ResourceLimit" and body["limit"] == "time"
    assert time.monotonic() - started < 10
    assert hooked.sleeping_workers() == []
    assert hooked.temporary_files() == []


def test_the_cpu_limit_is_a_resource_limit(cpu_limited: ServiceProcess) -> None:
    body = assert_problem(_post_sleeping(cpu_limited, "spin:2.5"), 422, "resource-limit")
    assert body["kind"] == "ResourceLimit" and body["limit"] == "cpu", body
    assert cpu_limited.temporary_files() == []


def test_queue_overflow_is_503_with_retry_after(hooked: ServiceProcess) -> None:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        running = pool.submit(_post_sleeping, hooked, 1.5)
        _wait_for_worker(hooked)
        waiting = pool.submit(_post_sleeping, hooked, 0, "if_subgraph.onnx")
        time.sleep(0.3)
        with hooked.client() as client:
            overflow = client.post("/models", json={"path": "external/model.onnx"})
            body = assert_problem(overflow, 503, "overloaded")
            assert int(overflow.headers["retry-after"]) >= 1
            assert "running" in body["detail"]
            assert client.get("/healthz").status_code == 200  # reads are not queued
        assert running.result().status_code in (200, 201)
        assert waiting.result().status_code in (200, 201)


def test_the_service_has_no_test_hook(tmp_path: Path) -> None:
    """`python -m service` knows no --debug-worker-sleep, and holds no worker for an X-Test-Worker-Sleep header."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONNX_SERVICE_")}
    command = [sys.executable, "-m", "service", "--store", str(tmp_path / "s"), "--debug-worker-sleep", "1"]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "--debug-worker-sleep" in result.stderr
    assert not (tmp_path / "s").exists()
    service = ServiceProcess(tmp_path / "store", SAMPLES, "--workers", "1", "--worker-timeout", "3").start()
    try:
        started = time.monotonic()
        assert _post_sleeping(service, 30).status_code in (200, 201)
        assert time.monotonic() - started < 10
    finally:
        service.stop()


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--port", "70000"), ("--workers", "0"), ("--worker-memory", "1MiB"), ("--max-upload", "lots"), ("--data-root", "/nonexistent")],
)
def test_unsafe_or_invalid_settings_are_refused(tmp_path: Path, flag: str, value: str) -> None:
    command = [sys.executable, "-m", "service", "--store", str(tmp_path / "s"), flag, value]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and flag in result.stderr
