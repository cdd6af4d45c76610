"""The fleet's compose stack, built and run with a real container engine.

`docker compose -f compose.yaml -f compose.fleet.yaml` is built and started as
a user would (`build`, then `up`), under a project name of its own
(`onnx-fleettest-<pid>-<time>`), and always torn down with `down -v`, pass or
fail: three replicas of the service (`--store s3://...` on SeaweedFS,
`--database` on PostgreSQL, each with its own cache volume) behind HAProxy,
every image built here on the same base (tests/e2e/test_container.py's
choice: PYTHON_IMAGE, the official image when the engine has it, else
tools/base_image.sh's local Debian base). What differs from the defaults
comes through the variables compose.fleet.yaml reads (any free loopback port
for the load balancer and each replica, a bucket, keys and a password of this
run) and one override file, never compose.fleet.yaml itself: the replicas
run the packaged service with test faults, `python -m support.faulty_service`
(the X-Test-Pause-After-Upload header holds an upload between its objects
and its record: the service has no such pause of its own), from the
test-only entry points mounted read-only at /test-support
(`support.faults.copy_for_container`; the image holds no test code).

Over HTTP on the published loopback ports only: every replica and the load
balancer turn ready; a model posted to replica 1 is served by replica 2 and
deleted through replica 3; the load balancer spreads requests over all three
(HAProxy's own counters, read inside its container); the client's default
import of a 200 MB model (resumable: tus, above 64 MiB), made in the test,
succeeds through the load balancer, and its weight is served byte for byte. Then 20 uploads at once,
spread over the replicas, while replica 1 is killed with `docker kill -s KILL`
once its held uploads (X-Test-Pause-After-Upload) are between their objects
and their records: every upload answered 201, by any replica, the killed one
too, is served by both survivors and by the load balancer; the held ones left
objects no record names, and `python -m service gc --grace-seconds 0`, run in a
surviving replica (`docker compose exec`), removes exactly those; a second run
removes none, and the bucket then holds exactly what the index names.

Skipped, with the reason, as tests/e2e/test_container.py is: no engine, no
compose v2, no base image. With the images cached it takes about a minute;
on a fresh machine the builds (the service's, PostgreSQL's and HAProxy's apt
packages, SeaweedFS's wheel) add several minutes.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.deploy_files import COMPOSE
from support.faults import FAULTS_VARIABLE, copy_for_container
from support.paths import REPO
from support.small_models import weight_model
from test_container import base_image_or_skip, engine_or_skip, remove_stale_projects, run, wait_for_readyz

pytestmark = pytest.mark.slow

FLEET_COMPOSE = REPO / "compose.fleet.yaml"
REPLICAS = ("onnx-import-1", "onnx-import-2", "onnx-import-3")
BALANCER = "load-balancer"
# Not test_container.py's onnx-ctest-: its sweep of stale projects would take this one for its own.
PROJECT_PREFIX = "onnx-fleettest-"
BUILD_SECONDS = 1800
START_SECONDS = 240
COMMAND_SECONDS = 300
UPLOADS = 20
WEIGHTS = 20_000  # float32 values per model: 80 kB
LARGE_WEIGHTS = 50_000_000  # float32 values of the large model: 200 MB, past the client's 64 MiB (resumable)
TEST_SUPPORT = "/test-support"  # where the replicas find the test-only entry points (support.faulty_service)
HOLD_SECONDS = 30  # the victim's held uploads wait this long between their objects and their record: far longer than the kill takes
VICTIM = REPLICAS[0]
IMAGE_TITLES = ("onnx-import-service", "onnx-import-fleet-seaweedfs", "onnx-import-fleet-postgres", "onnx-import-fleet-haproxy")

ORPHANS = """
import json
from service.settings import load_settings
from service.store.backends import open_store
store = open_store(load_settings([]))
store.open_storage()
try:
    content, index = set(store.content.places()), store.index.places()
    print(json.dumps({"orphans": sorted(content - index), "missing": sorted(index - content), "models": store.model_count()}))
finally:
    store.close()
"""

BALANCER_STATS = """
import csv, io, json, urllib.request
text = urllib.request.urlopen('http://127.0.0.1:8404/stats;csv', timeout=5).read().decode()
rows = csv.DictReader(io.StringIO(text.lstrip('# ')))
servers = [row for row in rows if row['pxname'] == 'replicas' and row['svname'] != 'BACKEND']
print(json.dumps({row['svname']: {'requests': int(row['stot'] or 0), 'status': row['status']} for row in servers}))
"""


def weight_bytes(seed: int, values: int = WEIGHTS) -> bytes:
    return np.full((values,), seed, dtype="<f4").tobytes()


@dataclass
class Fleet:
    """One compose project of compose.yaml + compose.fleet.yaml (and the test's override)."""

    docker: str
    project: str
    folder: Path  # the override file
    environment: dict[str, str]
    notes: list[str] = field(default_factory=list)
    before_storage: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # replica -> /healthz, /readyz, its detail

    def compose(self, *arguments: str, timeout: float = COMMAND_SECONDS, check: bool = True) -> subprocess.CompletedProcess[str]:
        files = ["-f", str(COMPOSE), "-f", str(FLEET_COMPOSE), "-f", str(self.folder / "override.yaml")]
        result = run([self.docker, "compose", "-p", self.project, *files, *arguments], timeout=timeout, env=self.environment)
        if check:
            assert result.returncode == 0, f"docker compose {' '.join(arguments)}: exit {result.returncode}\n{result.stderr[-4000:]}"
        return result

    def container(self, service: str) -> str:
        (container,) = self.compose("ps", "-a", "-q", service).stdout.split() or [""]
        assert container, f"no container of {service} in {self.project}"
        return container

    def state(self, service: str) -> dict[str, Any]:
        result = run([self.docker, "inspect", "--format", "{{json .State}}", self.container(service)])
        assert result.returncode == 0, result.stderr
        state = json.loads(result.stdout)
        assert isinstance(state, dict)
        return state

    def url(self, service: str) -> str:
        published = self.compose("port", service, "8000").stdout.strip()
        host, _, port = published.rpartition(":")
        assert host == "127.0.0.1" and port.isdigit(), f"{service} published on {published!r}, not on the loopback"
        return f"http://127.0.0.1:{port}"

    def client(self, service: str) -> httpx.Client:
        return httpx.Client(base_url=self.url(service), timeout=120)

    def exec(self, service: str, *command: str) -> subprocess.CompletedProcess[str]:
        result = self.compose("exec", "-T", service, *command, check=False)
        assert result.returncode == 0, (
            f"{' '.join(command)[:200]} in {service}: exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        )
        return result

    def exec_python(self, service: str, code: str) -> Any:
        """`python -c code` in the service's container (as its user); its last stdout line, as JSON."""
        return json.loads(self.exec(service, "python", "-c", code).stdout.strip().splitlines()[-1])

    def logs(self, *services: str) -> str:
        return self.compose("logs", "--no-color", "--timestamps", "--tail", "60", *services, check=False).stdout[-8000:]

    def wait_ready(self, service: str, seconds: float = START_SECONDS) -> float:
        """Seconds until GET /readyz answers 200 on the service's published loopback port."""
        return wait_for_readyz(lambda: self.url(service), seconds, service, self.logs)

    def wait_alive(self, service: str, seconds: float = START_SECONDS) -> tuple[int, int, str]:
        """Once GET /healthz answers on the service's port: its status, /readyz's, and /readyz's detail."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError, AssertionError):
                live = httpx.get(self.url(service) + "/healthz", timeout=10)
                ready = httpx.get(self.url(service) + "/readyz", timeout=10)
                return live.status_code, ready.status_code, str(ready.json().get("detail", ""))
            time.sleep(0.5)
        pytest.fail(f"{service} never answered /healthz within {seconds} s:\n{self.logs(service)}")

    def wait_balanced(self, seconds: float = 60) -> dict[str, Any]:
        """HAProxy's figures of its servers once its checks have them all UP (a replica
        that was not ready when the balancer started needs two good checks, 2 s apart)."""
        deadline = time.monotonic() + seconds
        while True:
            servers = self.exec_python(BALANCER, BALANCER_STATS)
            assert isinstance(servers, dict)
            if len(servers) == len(REPLICAS) and all(row["status"] == "UP" for row in servers.values()):
                return servers
            assert time.monotonic() < deadline, f"the load balancer's servers are not all UP: {servers}\n{self.logs(BALANCER)}"
            time.sleep(1)


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    docker = engine_or_skip()
    notes: list[str] = []
    base = base_image_or_skip(docker, notes)
    remove_stale_projects(docker, PROJECT_PREFIX)
    folder = Path(tempfile.mkdtemp(prefix=PROJECT_PREFIX))
    support = copy_for_container(folder / "test-support")
    faulty = "".join(
        f"  {replica}:\n"
        '    entrypoint: ["python", "-m", "support.faulty_service"]\n'
        f"    environment:\n      PYTHONPATH: {TEST_SUPPORT}\n      {FAULTS_VARIABLE}: '{{}}'\n"
        f"    volumes:\n      - {{type: bind, source: {support}, target: {TEST_SUPPORT}, read_only: true}}\n"
        for replica in REPLICAS
    )
    (folder / "override.yaml").write_text(
        "# tests/e2e/test_container_fleet.py: the service with test faults (X-Test-Pause-After-Upload), on the replicas of "
        f"this run only.\nservices:\n{faulty}"
    )
    environment = {key: value for key, value in os.environ.items() if not key.startswith(("ONNX_SERVICE_", "ONNX_FLEET_"))}
    environment |= {
        "PYTHON_IMAGE": base,
        "ONNX_SERVICE_PUBLISH_PORT": "0",
        **{f"ONNX_FLEET_PORT_{index}": "0" for index in (1, 2, 3)},
        "ONNX_FLEET_BUCKET": "onnx-fleettest",
        "ONNX_FLEET_PREFIX": "models",
        "ONNX_FLEET_S3_ACCESS_KEY": f"fleettest-{secrets.token_hex(4)}",
        "ONNX_FLEET_S3_SECRET_KEY": secrets.token_hex(20),
        "ONNX_FLEET_DB_USER": "fleettest",
        "ONNX_FLEET_DB_PASSWORD": secrets.token_urlsafe(18) + "'\"$",  # quotes and a dollar reach initdb's SQL safely
        "ONNX_FLEET_DB_NAME": "fleettest",
    }
    project = f"{PROJECT_PREFIX}{os.getpid()}-{int(time.time())}"
    started = Fleet(docker, project, folder, environment, notes)
    try:
        began = time.monotonic()
        started.compose("build", timeout=BUILD_SECONDS)
        notes.append(f"fleet: images built in {time.monotonic() - began:.0f} s")
        began = time.monotonic()
        # A cold start in the worst order: the replicas first, their database and
        # object storage not started yet (what test_replicas_started_before_their_storage_... checks).
        first = started.compose("up", "--detach", "--no-deps", *REPLICAS, timeout=BUILD_SECONDS, check=False)
        assert first.returncode == 0, f"docker compose up {' '.join(REPLICAS)}: exit {first.returncode}\n{first.stderr[-3000:]}"
        for replica in REPLICAS:
            started.before_storage[replica] = started.wait_alive(replica)
        time.sleep(5)  # their retries go on meanwhile: still up afterwards, not exited
        up = started.compose("up", "--detach", "--build", timeout=BUILD_SECONDS, check=False)  # as a user starts it (the build cached)
        assert up.returncode == 0, f"docker compose up: exit {up.returncode}\n{up.stderr[-3000:]}\n{started.logs()}"
        for service in (*REPLICAS, BALANCER):
            started.wait_ready(service)
        started.wait_balanced()
        notes.append(f"fleet: up, every replica and the load balancer ready, in {time.monotonic() - began:.1f} s")
        yield started
    finally:
        with contextlib.suppress(Exception):
            started.compose("down", "-v", "--timeout", "10", "--remove-orphans", timeout=COMMAND_SECONDS, check=False)
        # Compose labels each service's build with the project and the service: the
        # images an earlier build tagged (one per service and run) are left untagged.
        for title in IMAGE_TITLES:
            with contextlib.suppress(Exception):
                run([docker, "image", "prune", "--force", "--filter", f"label=org.opencontainers.image.title={title}"])
        shutil.rmtree(folder, ignore_errors=True)


def upload(url: str, data: bytes, name: str, headers: dict[str, str] | None = None) -> httpx.Response:
    with httpx.Client(base_url=url, timeout=180) as client:
        return client.post("/models", files={"model": (name, data)}, headers=headers or {})


def test_every_replica_and_the_load_balancer_turn_ready(fleet: Fleet, report: list[str]) -> None:
    for service in (*REPLICAS, BALANCER):
        with fleet.client(service) as client:
            assert client.get("/healthz").json() == {"status": "ok", "importer_build": "compiled"}, service
            ready = client.get("/readyz")
            assert ready.status_code == 200 and ready.json()["status"] == "ready", (service, ready.text)
    for service in (*REPLICAS, BALANCER, "postgres", "seaweedfs"):
        state = fleet.state(service)
        assert state["Running"] is True, (service, state)
    assert fleet.state("s3-init")["ExitCode"] == 0, "the bucket was created"
    report.extend(fleet.notes)


def test_replicas_started_before_their_storage_turn_ready_once_it_starts(fleet: Fleet) -> None:
    """No crash loop at a cold start: started before PostgreSQL and SeaweedFS, each
    replica answered /healthz at once and /readyz 503 naming what was missing, stayed
    up (never restarted), and turned ready once the rest of the stack came up (the fixture)."""
    for replica in REPLICAS:
        live, ready, detail = fleet.before_storage[replica]
        assert (live, ready) == (200, 503), (replica, live, ready, detail)
        assert "database" in detail or "object storage" in detail, (replica, detail)
        assert fleet.state(replica)["Running"] is True, replica
        restarts = run([fleet.docker, "inspect", "--format", "{{.RestartCount}}", fleet.container(replica)])
        assert restarts.stdout.strip() == "0", (replica, restarts.stdout)


def test_a_model_posted_to_one_replica_is_fetched_from_another_and_deleted_through_a_third(fleet: Fleet) -> None:
    first, second, third = REPLICAS
    posted = upload(fleet.url(first), (REPO / "testdata" / "samples" / "add.onnx").read_bytes(), "add.onnx")
    assert posted.status_code == 201, posted.text
    model_id = posted.json()["id"]
    with fleet.client(second) as client:
        assert client.get(f"/models/{model_id}").json()["input"] == "add.onnx"
        assert model_id in {item["id"] for item in client.get("/models").json()["items"]}
        served = client.get(f"/models/{model_id}/tensors/W")
        assert served.status_code == 200 and served.content
        ranged = client.get(f"/models/{model_id}/tensors/W", headers={"Range": "bytes=4-11"})
        assert ranged.status_code == 206 and ranged.content == served.content[4:12]
        assert client.get(f"/models/{model_id}/graph").status_code == 200
    with fleet.client(BALANCER) as client:
        assert client.get(f"/models/{model_id}/tensors/W").content == served.content
    with fleet.client(third) as client:
        assert client.delete(f"/models/{model_id}").status_code == 204
    for service in (*REPLICAS, BALANCER):
        with fleet.client(service) as client:
            assert client.get(f"/models/{model_id}").status_code == 404, service
            assert client.get(f"/models/{model_id}/tensors/W").status_code == 404, service


def test_the_load_balancer_spreads_requests_over_the_replicas(fleet: Fleet) -> None:
    url = fleet.url(BALANCER)
    posted = upload(url, weight_model(seed=1, values=WEIGHTS), "spread.onnx")
    assert posted.status_code == 201, posted.text
    model_id = posted.json()["id"]
    before = fleet.wait_balanced()
    for _ in range(30):  # a connection each: round robin, whatever the client's keep-alive
        response = httpx.get(f"{url}/models/{model_id}/tensors/W", timeout=60)
        assert response.status_code == 200 and response.content == weight_bytes(1)
    after = fleet.exec_python(BALANCER, BALANCER_STATS)
    served = {name: after[name]["requests"] - before[name]["requests"] for name in before}
    assert all(count >= 8 for count in served.values()), served


def test_the_clients_resumable_import_of_a_large_model_goes_through_the_load_balancer(
    fleet: Fleet, tmp_path: Path, report: list[str]
) -> None:
    """The client's default import of a model over 64 MiB is a resumable upload
    (tus): its creation, PATCHes, HEADs and import go to whichever replica the
    load balancer picks, and each goes on with the upload where another left it
    (the bytes in the bucket, the offset in the database)."""
    weight = np.random.default_rng(37).random(LARGE_WEIGHTS, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "large",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [LARGE_WEIGHTS])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [LARGE_WEIGHTS])],
        [numpy_helper.from_array(weight, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = tmp_path / "large.onnx"
    path.write_bytes(model.SerializeToString())
    del model, graph
    url = fleet.url(BALANCER)
    command = [sys.executable, "-m", "service.client", "--url", url, "import", str(path), "--resume-store", str(tmp_path / "resume")]
    began = time.monotonic()
    imported = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=COMMAND_SECONDS, check=False)
    assert imported.returncode == 0, f"exit {imported.returncode}\n{imported.stderr[-4000:]}\n{fleet.logs(*REPLICAS, BALANCER)}"
    seconds = time.monotonic() - began
    report.append(f"fleet: a {path.stat().st_size / 1e6:.0f} MB model imported resumably through the load balancer in {seconds:.1f} s")
    summary = json.loads(imported.stdout)
    assert summary["input"] == "large.onnx"
    with fleet.client(BALANCER) as client:
        served = client.get(f"/models/{summary['id']}/tensors/W")
        assert served.status_code == 200 and served.content == weight.tobytes()
        assert client.delete(f"/models/{summary['id']}").status_code == 204


def test_uploads_while_a_replica_is_killed_lose_no_acknowledged_model_and_gc_leaves_no_orphan(fleet: Fleet, report: list[str]) -> None:
    urls = {service: fleet.url(service) for service in (*REPLICAS, BALANCER)}
    seeds = list(range(300, 300 + UPLOADS))
    target = {seed: REPLICAS[index % len(REPLICAS)] for index, seed in enumerate(seeds)}
    victims = [seed for seed in seeds if target[seed] == VICTIM]
    held = set(victims[::2])  # the others the victim answers before it dies
    started = time.monotonic()

    def post(seed: int) -> httpx.Response | None:
        headers = {"X-Test-Pause-After-Upload": str(HOLD_SECONDS)} if seed in held else {}
        try:
            return upload(urls[target[seed]], weight_model(seed, WEIGHTS), f"m{seed}.onnx", headers)
        except httpx.HTTPError:
            return None  # the victim's connection dropped: not acknowledged

    with concurrent.futures.ThreadPoolExecutor(UPLOADS) as pool:
        futures = {seed: pool.submit(post, seed) for seed in seeds}
        # The kill lands once the victim has answered its other uploads and holds
        # every held one between its objects and its record (admitted, no worker
        # running): twice in a row, half a second apart.
        deadline, settled = time.monotonic() + 120, 0
        last: dict[str, Any] = {}
        while settled < 2:
            assert time.monotonic() < deadline, f"the victim never held its uploads: {last}\n{fleet.logs(VICTIM)}"
            time.sleep(0.5)
            answered = all(futures[seed].done() for seed in victims if seed not in held)
            with contextlib.suppress(httpx.HTTPError):
                last = httpx.get(urls[VICTIM] + "/readyz", timeout=10).json()
            holding = last.get("imports_running") == 0 and last.get("imports_waiting") == len(held) and last.get("uploads_receiving") == 0
            settled = settled + 1 if answered and holding else 0
        killed_at = time.monotonic() - started
        killed = run([fleet.docker, "kill", "-s", "KILL", fleet.container(VICTIM)], timeout=60)
        assert killed.returncode == 0, killed.stderr
        answers = {seed: future.result(timeout=300) for seed, future in futures.items()}
    uploads_took = time.monotonic() - started

    state = fleet.state(VICTIM)
    assert state["Running"] is False and state["ExitCode"] == 137, state
    statuses = {seed: (answer.status_code if answer is not None else None) for seed, answer in answers.items()}
    assert all(statuses[seed] is None for seed in held), statuses
    acknowledged = {seed: answer.json()["id"] for seed, answer in answers.items() if answer is not None and answer.status_code == 201}
    assert set(acknowledged) == set(seeds) - held, statuses
    for service in (*REPLICAS[1:], BALANCER):
        with fleet.client(service) as client:
            for seed, model_id in acknowledged.items():
                served = client.get(f"/models/{model_id}/tensors/W")
                assert served.status_code == 200 and served.content == weight_bytes(seed), (service, seed, target[seed], served.status_code)

    survivor, other = REPLICAS[1], REPLICAS[2]
    before = fleet.exec_python(survivor, ORPHANS)
    assert len(before["orphans"]) == len(held) and not before["missing"], before  # the held uploads' objects, recorded nowhere
    collected = fleet.exec(survivor, "python", "-m", "service", "gc", "--grace-seconds", "0").stdout.splitlines()
    assert collected[0] == f"removed {len(held)} unrecorded contents", collected
    assert sorted(line.strip() for line in collected[1:]) == before["orphans"]
    again = fleet.exec(other, "python", "-m", "service", "gc", "--grace-seconds", "0").stdout.splitlines()
    assert again == ["removed 0 unrecorded contents"], again
    after = fleet.exec_python(other, ORPHANS)
    assert after == {"orphans": [], "missing": [], "models": before["models"]}, after
    with fleet.client(BALANCER) as client:
        assert client.get("/readyz").status_code == 200
        for seed, model_id in acknowledged.items():
            assert client.get(f"/models/{model_id}/tensors/W").content == weight_bytes(seed), seed
    report.append(
        f"fleet: {UPLOADS} uploads over 3 replicas, {VICTIM} killed {killed_at:.1f} s in holding {len(held)}: "
        f"{len(acknowledged)} acknowledged, all served by the survivors; gc removed {len(held)} orphans; "
        f"{uploads_took:.1f} s for the uploads"
    )
