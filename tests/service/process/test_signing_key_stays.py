"""The signing key stays in the front end: `python -m service --signing-key FILE`
holds the key in its own memory, and neither its fork server nor a worker
running an import ever holds it (their memory read whole through
/proc/PID/mem: no form of the private key's bytes); the service's log
names none of it either.

Why a process: what a process holds is the point: the front end reads the
key at start, and its fork server is a fresh interpreter it execs, whose
workers are forks of it; only real processes, their memory read by the
kernel's /proc, show the key never crossed (a worker held by a test fault,
support.faults, while its memory is read).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from support.attestations import key_material, key_pair
from support.faults import FAULTS
from support.service_harness import SAMPLES, ServiceProcess, children_of

MAPPING = re.compile(rb"^([0-9a-f]+)-([0-9a-f]+) (r)\S* ", re.MULTILINE)
CHUNK = 16 << 20


def memory_holds(pid: int, needles: list[bytes]) -> list[bytes]:
    """The needles found anywhere in the readable memory of process `pid`."""
    longest = max(len(needle) for needle in needles)
    found: set[bytes] = set()
    maps = Path(f"/proc/{pid}/maps").read_bytes()
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        for match in MAPPING.finditer(maps):
            start, end = int(match[1], 16), int(match[2], 16)
            tail = b""
            for offset in range(start, end, CHUNK):
                try:
                    memory.seek(offset)
                    block = tail + memory.read(min(CHUNK, end - offset))
                except OSError:  # a mapping the kernel does not read out ([vvar], a guard page)
                    break
                found.update(needle for needle in needles if needle in block)
                tail = block[-longest:]
    return [needle for needle in needles if needle in found]


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


@pytest.fixture
def signing_service(tmp_path: Path) -> Iterator[tuple[ServiceProcess, list[bytes]]]:
    key_file, _, key = key_pair(tmp_path, "ed25519")
    service = ServiceProcess(tmp_path / "store", SAMPLES, "--workers", "1", "--signing-key", str(key_file), env=FAULTS).start()
    try:
        yield service, key_material(key, key_file)
    finally:
        service.stop()


def test_neither_the_fork_server_nor_a_worker_holds_the_key(signing_service: tuple[ServiceProcess, list[bytes]]) -> None:
    service, material = signing_service
    assert service.process is not None
    front_end = service.process.pid
    fork_servers = [child for child in children_of(front_end) if b"multiprocessing.forkserver" in _command_line(child)]
    assert len(fork_servers) == 1, [_command_line(child) for child in children_of(front_end)]
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(
            lambda: httpx.post(service.url + "/models", json={"path": "add.onnx"}, headers={"x-test-worker-sleep": "20"}, timeout=60)
        )
        deadline = time.monotonic() + 20
        while not (workers := service.sleeping_workers()):
            assert time.monotonic() < deadline, "no worker appeared"
            time.sleep(0.02)
        try:
            in_front_end = memory_holds(front_end, material)
            in_fork_server = memory_holds(fork_servers[0], material)
            in_worker = memory_holds(workers[0], material)
        except PermissionError:  # the processes are not dumpable: only CAP_SYS_PTRACE reads them
            pytest.skip("the service's memory cannot be read here (its processes are not dumpable, and this root has no CAP_SYS_PTRACE)")
        finally:
            for worker in service.sleeping_workers():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker, signal.SIGKILL)  # the import ends (WorkerCrashed); its answer is not the point
            pending.result()
    assert in_front_end, "the front end's memory shows no form of the key: the search would find nothing anywhere"
    assert in_fork_server == [] and in_worker == []
    for pid in (fork_servers[0], workers[0]):
        with contextlib.suppress(OSError):  # the worker has gone
            assert not any(needle in Path(f"/proc/{pid}/environ").read_bytes() for needle in material)
    log = service.log.read_bytes()
    assert log and not any(needle in log for needle in material)
