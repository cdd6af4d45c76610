"""Several front-end processes on one port (`--http-workers`): each serves
HTTP, they share one import capacity and one set of metrics, SIGHUP reloads
the keys in every one of them without a restart, a killed one is replaced,
and SIGTERM stops them all."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
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


@pytest.fixture()
def several(tmp_path: Path) -> Iterator[ServiceProcess]:
    root = copy_samples(tmp_path / "root")
    args = ("--http-workers", str(FRONT_ENDS), "--workers", "1", "--queue", "0")
    with serving(tmp_path / "store", root, *args, env={"ONNX_SERVICE_TEST_HOOKS": "1"}) as service:
        wait_for(lambda: len(front_ends(service)) == FRONT_ENDS and all_ready(service))
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
    busy = [pid for pid in pids if cpu_ticks(pid) - before[pid] >= 5]  # 50 ms of CPU or more
    assert len(busy) == FRONT_ENDS, {pid: cpu_ticks(pid) - before[pid] for pid in pids}


def test_the_import_capacity_holds_across_front_ends(several: ServiceProcess) -> None:
    """--workers 1 --queue 0: while one import runs, every other is refused, whichever front end takes it."""
    holder = threading.Thread(
        target=lambda: httpx.post(several.url + "/models", json={"path": "add.onnx"}, headers={"X-Test-Worker-Sleep": "4"}, timeout=60)
    )
    holder.start()
    try:
        wait_for(lambda: httpx.get(several.url + "/readyz", timeout=10).json()["imports_running"] == 1, 20)
        refused = []
        for _ in range(8):  # new connections: both front ends get some
            with several.client() as client:
                refused.append(client.post("/models", json={"path": "if_subgraph.onnx"}))
                assert client.get("/readyz").json()["imports_running"] == 1  # every front end sees the running import
        for response in refused:
            assert_problem(response, 503, "overloaded")
    finally:
        holder.join()
    with several.client() as client:
        assert client.post("/models", json={"path": "if_subgraph.onnx"}).status_code == 201


def test_metrics_add_up_across_front_ends(several: ServiceProcess) -> None:
    requests = 40
    for _ in range(requests):
        with several.client() as client:  # new connections: both front ends answer some
            assert client.get("/healthz").status_code == 200
    for _ in range(4):  # whichever front end answers the scrape
        with several.client() as client:
            text = client.get("/metrics").text
        assert metric(text, "onnx_import_http_requests_total", 'method="GET",route="/healthz",status="200"') == requests


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


def test_a_killed_front_end_is_replaced_and_sigterm_stops_them_all(several: ServiceProcess) -> None:
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
