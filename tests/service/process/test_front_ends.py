"""Several front-end processes on one port (`--http-workers`): each serves
HTTP, they share one import capacity and one set of metrics, SIGHUP reloads
the keys in every one of them without a restart, a killed one is replaced,
and SIGTERM stops them all.

Why a process: several front-end processes share one port and one import
capacity: processes forked by the supervisor, SIGHUP and SIGTERM sent to them,
one killed and replaced, the port held and refused.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from support.faults import FAULTS
from support.paths import REPO
from support.service_harness import ServiceProcess, assert_problem, children_of, copy_samples, serving

from service.access.keys import new_key

FRONT_ENDS = 2


def front_ends(server: ServiceProcess) -> list[int]:
    """The front-end processes: the children of the supervisor that serve HTTP
    (uvicorn's spawn start also leaves a resource tracker, which has no children)."""
    assert server.process is not None
    return [pid for pid in children_of(server.process.pid) if children_of(pid)]


def all_ready(server: ServiceProcess) -> bool:
    """Every front end has started (each logs its "ready:" line once its app is up)."""
    return server.log.read_text().count(" ready: data root ") >= FRONT_ENDS


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def wait_for(condition: object, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def metric(text: str, name: str, labels: str) -> float:
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(labels)}\}} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


@contextlib.contextmanager
def several_front_ends(folder: Path) -> Iterator[ServiceProcess]:
    """A service of FRONT_ENDS front ends, one import place and no queue, once all of them are ready."""
    root = copy_samples(folder / "root")
    args = ("--http-workers", str(FRONT_ENDS), "--workers", "1", "--queue", "0")
    with serving(folder / "store", root, *args, env=FAULTS) as service:
        wait_for(lambda: len(front_ends(service)) == FRONT_ENDS and all_ready(service))
        yield service


@pytest.fixture(scope="module")
def several(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    """One such service for the tests that leave it as they found it."""
    with several_front_ends(tmp_path_factory.mktemp("several")) as service:
        yield service


@pytest.fixture()
def several_to_kill(tmp_path: Path) -> Iterator[ServiceProcess]:
    """One such service for a test that kills its processes."""
    with several_front_ends(tmp_path) as service:
        yield service


def test_every_front_end_serves_requests(several: ServiceProcess) -> None:
    with several.client() as client:
        model_id = client.post("/models", json={"path": "add.onnx"}).json()["id"]
    pids = front_ends(several)
    before = {pid: cpu_ticks(pid) for pid in pids}

    def fetch(_: int) -> int:
        with several.client() as client:  # a connection of its own: the kernel spreads them over the front ends
            return sum(client.get(f"/models/{model_id}/tensors/W").status_code == 200 for _ in range(50))

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(fetch, range(16))) == 16 * 50
    # 20 ms of CPU or more: an idle front end takes next to none in this time; one that served a share of the 800 GETs takes
    # 40 ms and more (CI under load: 26 and 4 ticks, the kernel's spread of new connections is not even)
    busy = [pid for pid in pids if cpu_ticks(pid) - before[pid] >= 2]
    assert len(busy) == FRONT_ENDS, {pid: cpu_ticks(pid) - before[pid] for pid in pids}


def test_the_import_capacity_holds_across_front_ends(several: ServiceProcess) -> None:
    """--workers 1 --queue 0: while one import runs, every other is refused, whichever front end takes it."""
    holder = threading.Thread(
        target=lambda: httpx.post(several.url + "/models", json={"path": "add.onnx"}, headers={"X-Test-Worker-Sleep": "60"}, timeout=90)
    )
    holder.start()
    try:
        wait_for(lambda: len(several.sleeping_workers()) == 1, 20)
        refused = []
        for _ in range(8):  # new connections: both front ends get some
            with several.client() as client:
                refused.append(client.post("/models", json={"path": "if_subgraph.onnx"}))
                assert client.get("/readyz").json()["imports_running"] == 1  # every front end sees the running import
        for response in refused:
            assert_problem(response, 503, "overloaded")
    finally:  # the holder's worker is held until here, however slow the machine: its end frees the place
        for pid in several.sleeping_workers():
            os.kill(pid, signal.SIGKILL)
        holder.join()
    with several.client() as client:
        assert client.post("/models", json={"path": "if_subgraph.onnx"}).status_code == 201


def test_metrics_add_up_across_front_ends(several: ServiceProcess) -> None:
    def healthz_answered() -> float:
        with several.client() as client:
            return metric(client.get("/metrics").text, "onnx_import_http_requests_total", 'method="GET",route="/healthz",status="200"')

    before = healthz_answered()
    requests = 40
    for _ in range(requests):
        with several.client() as client:  # new connections: both front ends answer some
            assert client.get("/healthz").status_code == 200
    for _ in range(4):  # whichever front end answers the scrape
        assert healthz_answered() == before + requests


def test_sighup_reloads_the_keys_of_every_front_end_without_a_restart(tmp_path: Path) -> None:
    root = copy_samples(tmp_path / "root")
    first_secret, first = new_key("team-a", ["read"])
    key_file = tmp_path / "keys.toml"
    key_file.write_text(first)
    with serving(tmp_path / "store", root, "--http-workers", str(FRONT_ENDS), "--api-keys", str(key_file)) as service:
        wait_for(lambda: len(front_ends(service)) == FRONT_ENDS and all_ready(service))
        assert service.process is not None
        pids = set(front_ends(service))
        secret, table = new_key("team-c", ["read"])
        key_file.write_text(first + "\n" + table)
        service.process.send_signal(signal.SIGHUP)

        def accepted_by_all() -> bool:
            answers = []
            for _ in range(12):  # new connections: each front end answers some
                with service.client(headers={"Authorization": f"Bearer {secret}"}) as client:
                    answers.append(client.get("/models").status_code)
            return set(answers) == {200}

        wait_for(accepted_by_all, 15)
        key_file.write_text("[[key]]\nsha256 = 'broken")  # a broken file keeps the keys in force
        service.process.send_signal(signal.SIGHUP)
        time.sleep(1)
        for _ in range(8):
            with service.client(headers={"Authorization": f"Bearer {first_secret}"}) as client:
                assert client.get("/models").status_code == 200
        assert set(front_ends(service)) == pids  # reloaded in place, not restarted


def test_a_killed_front_end_is_replaced_and_sigterm_stops_them_all(several_to_kill: ServiceProcess) -> None:
    several = several_to_kill
    victim = front_ends(several)[0]
    its_children = children_of(victim)  # its fork server
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: victim not in front_ends(several) and len(front_ends(several)) == FRONT_ENDS)
    wait_for(lambda: not [pid for pid in its_children if Path(f"/proc/{pid}").exists()], 15)  # no orphan left
    for _ in range(10):
        with several.client() as client:
            assert client.get("/healthz").status_code == 200
    every = [*front_ends(several), *[child for pid in front_ends(several) for child in children_of(pid)]]
    assert several.process is not None
    several.process.send_signal(signal.SIGTERM)
    several.process.wait(30)
    wait_for(lambda: not [pid for pid in every if Path(f"/proc/{pid}").exists()], 15)


def test_port_0_is_resolved_once_and_logged_for_every_front_end(tmp_path: Path) -> None:
    """`--port 0` with several front ends: one free port, named in uvicorn's usual line, which all of them serve."""
    root = copy_samples(tmp_path / "root")
    log = tmp_path / "service.log"
    command = [sys.executable, "-m", "service", "--port", "0", "--http-workers", str(FRONT_ENDS), "--store", str(tmp_path / "store")]
    with log.open("wb") as output:
        process = subprocess.Popen([*command, "--data-root", str(root)], cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log.read_text()) is not None)
        wait_for(lambda: log.read_text().count(" ready: data root ") >= FRONT_ENDS)
        listening = re.findall(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log.read_text())
        assert len(listening) == 1 and listening[0] != "0", listening
        for _ in range(6):
            assert httpx.get(f"http://127.0.0.1:{listening[0]}/healthz", timeout=10).status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(30)


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (front ends, resource tracker, fork servers, workers)."""
    found = children_of(pid)
    for child in list(found):
        found.extend(descendants(child))
    return found


def alive(pid: int) -> bool:
    """Running (a zombie, ended but not yet reaped by init, is not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_second(port: int, tmp_path: Path, http_workers: int) -> subprocess.CompletedProcess[str]:
    """A second `python -m service` on `port`: it must leave by itself, so a time limit."""
    root = copy_samples(tmp_path / "second-root")
    command = [sys.executable, "-m", "service", "--port", str(port), "--http-workers", str(http_workers)]
    command += ["--store", str(tmp_path / "second-store"), "--data-root", str(root)]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=30)


def assert_refused(second: subprocess.CompletedProcess[str], port: int) -> None:
    assert second.returncode == 2, (second.returncode, second.stderr[-2000:])
    lines = second.stderr.strip().splitlines()
    assert lines == [f"python -m service: port 127.0.0.1:{port} is in use by another process"], second.stderr[-2000:]


@pytest.mark.parametrize("http_workers", [1, FRONT_ENDS])
def test_a_second_service_on_the_port_is_refused_and_the_first_keeps_it(several: ServiceProcess, tmp_path: Path, http_workers: int) -> None:
    """Processes: the port is the kernel's to share or refuse, between two real
    services (SO_REUSEPORT would let the second's front ends join the first's)."""
    assert_refused(start_second(several.port, tmp_path, http_workers), several.port)
    for number in range(20):  # new connections, each answered by a front end of the first: its log names the request
        request_id = f"after-second-{http_workers}-{number}"
        response = httpx.get(several.url + "/healthz", headers={"X-Request-ID": request_id}, timeout=10)
        assert response.status_code == 200 and response.headers["x-request-id"] == request_id
        wait_for(lambda request_id=request_id: f" {request_id} GET /healthz 200 " in several.log.read_text(), 10)


@pytest.mark.parametrize("reuse_port", [False, True], ids=["plain", "reuseport"])
@pytest.mark.parametrize("http_workers", [1, FRONT_ENDS])
def test_a_port_another_program_listens_on_is_refused(tmp_path: Path, http_workers: int, reuse_port: bool) -> None:
    """Processes: the service as started from the command line, against a
    listener of another program (with SO_REUSEPORT, a group it could join)."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, int(reuse_port))
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        assert_refused(start_second(port, tmp_path, http_workers), port)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            accepted, _ = other.accept()  # it still listens, and takes the port's connections
            accepted.close()


@pytest.mark.parametrize("http_workers", [1, FRONT_ENDS])
def test_a_killed_supervisor_takes_every_process_and_the_port_with_it(tmp_path: Path, http_workers: int) -> None:
    """Processes: `kill -9` of the real supervisor, with a worker busy in a
    fork server of a front end; then the kernel's view of what is left."""
    root = copy_samples(tmp_path / "root")
    args = ("--http-workers", str(http_workers))
    with serving(tmp_path / "store", root, *args, env=FAULTS) as service:
        assert service.process is not None
        supervisor = service.process.pid
        wait_for(lambda: http_workers == 1 or (len(front_ends(service)) == FRONT_ENDS and all_ready(service)))
        spin = {"X-Test-Worker-Sleep": "spin:20"}  # a worker past its walls, burning CPU (it left root, if it was root)

        def import_spinning() -> None:
            with contextlib.suppress(httpx.HTTPError):  # its service is killed under it
                httpx.post(service.url + "/models", json={"path": "add.onnx"}, headers=spin, timeout=60)

        threading.Thread(target=import_spinning, daemon=True).start()
        fork_servers = 1 if http_workers == 1 else FRONT_ENDS
        worker_depth = 2 if http_workers == 1 else 3

        def a_worker_spins() -> bool:
            """A worker at its depth, or one deeper: a worker that makes its own PID namespace (a service not root, or
            root without CAP_SYS_ADMIN, in a container) stands by while its child, the namespace's first, does the job."""
            level, spinning = [supervisor], []
            for depth in range(1, worker_depth + 2):
                level = [child for pid in level for child in children_of(pid)]
                if depth >= worker_depth:
                    spinning += [pid for pid in level if alive(pid) and cpu_ticks(pid) >= 20]
            return bool(spinning)

        wait_for(a_worker_spins, 30)
        processes = descendants(supervisor)
        assert len(processes) >= (http_workers if http_workers > 1 else 0) + fork_servers + 1, processes
        os.kill(supervisor, signal.SIGKILL)
        service.process.wait(5)
        deadline = time.monotonic() + 2.0
        while True:  # the port, bound as a server binds it
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    probe.bind(("127.0.0.1", service.port))
                    break
                except OSError:
                    assert time.monotonic() < deadline, "the port is still held 2 s after the supervisor's kill"
            time.sleep(0.05)
        wait_for(lambda: not [pid for pid in processes if alive(pid)], 5)
