"""Three replicas over one bucket and one database are one service.

Real processes: three `python -m service` given the same `--store s3://...`
(a real SeaweedFS) and `--database` (a real PostgreSQL), each with its own
cache folder, started by the session's `fleet_servers` (skipped with the
reason where those servers cannot be had). What a registry running a fleet
relies on: an import on one replica is listed, served and deletable on every
other at once; the same bytes posted to all three at once give one content
and one 201; the byte total is exact after concurrent imports and eviction;
a replica killed with SIGKILL mid-commit loses no acknowledged import, and
what it left is collected by `python -m service gc`.
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
from typing import Any

import httpx
import pytest
from support.faults import FAULTS
from support.paths import REPO
from support.service_harness import SAMPLES, ServiceProcess, children_of, model_id_of
from support.small_models import weight_model

from service.settings import Settings
from service.store.backends import open_store
from service.store.model_store import Store

HOOKS = FAULTS  # the X-Test-* headers (support/faults.py)


class Fleet:
    """Replicas sharing one store URL and one database URL."""

    def __init__(self, servers: Any, folder: Path, count: int, *args: str) -> None:
        self.servers = servers
        self.folder = folder
        self.store_url, self.database = servers.new_store_url(), servers.new_database()
        self.args = args
        self.replicas = [self.replica(index) for index in range(count)]

    def replica(self, index: int) -> ServiceProcess:
        cache = self.folder / f"replica-{index}"
        cache.mkdir(parents=True, exist_ok=True)
        arguments = ("--store", self.store_url, "--database", self.database, "--cache-dir", str(cache), "--workers", "2", *self.args)
        return ServiceProcess(cache, SAMPLES, *arguments, env={**self.servers.environ, **HOOKS}).start()

    def inspect(self) -> Store:
        """The store as the replicas see it, opened in this process (no garbage collection)."""
        for name, value in self.servers.environ.items():
            os.environ.setdefault(name, value)
        store = open_store(Settings(store=self.store_url, database=self.database, cache_dir=self.folder / "inspect"))
        store.open_storage()
        return store

    def gc(self, grace_seconds: float = 0.0) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "service", "gc", "--grace-seconds", str(grace_seconds)]
        command += ["--store", self.store_url, "--database", self.database, "--cache-dir", str(self.folder / "gc")]
        environment = {**os.environ, **self.servers.environ}
        return subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=120, check=False)

    def stop(self) -> None:
        for replica in self.replicas:
            replica.stop()


@pytest.fixture(scope="module")
def fleet(fleet_servers: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    started = Fleet(fleet_servers, tmp_path_factory.mktemp("fleet"), 3)
    yield started
    started.stop()


def upload(replica: ServiceProcess, data: bytes, name: str = "m.onnx", headers: dict[str, str] | None = None) -> httpx.Response:
    with replica.client() as client:
        return client.post("/models", files={"model": (name, data)}, headers=headers or {})


def test_a_model_posted_to_one_replica_is_fetched_from_another_and_deleted_through_a_third(fleet: Fleet) -> None:
    first, second, third = fleet.replicas
    posted = upload(first, (SAMPLES / "add.onnx").read_bytes(), "add.onnx")
    assert posted.status_code == 201, posted.text
    model_id = posted.json()["id"]
    with second.client() as client:
        assert client.get(f"/models/{model_id}").json()["input"] == "add.onnx"
        assert model_id in {item["id"] for item in client.get("/models").json()["items"]}
        served = client.get(f"/models/{model_id}/tensors/W")
        assert served.status_code == 200
        ranged = client.get(f"/models/{model_id}/tensors/W", headers={"Range": "bytes=4-11"})
        assert ranged.status_code == 206 and ranged.content == served.content[4:12]
        assert client.get(f"/models/{model_id}/graph").status_code == 200  # rendered from the upload's objects
    with first.client() as client:
        assert client.get(f"/models/{model_id}/tensors/W").content == served.content
    with third.client() as client:
        assert client.delete(f"/models/{model_id}").status_code == 204
    for replica in (first, second, third):
        with replica.client() as client:
            assert client.get(f"/models/{model_id}").status_code == 404
            assert client.get(f"/models/{model_id}/tensors/W").status_code == 404
    store = fleet.inspect()
    try:
        assert not store.has(model_id) and all(not place.startswith(model_id) for place in store.content.places())
    finally:
        store.close()


def test_the_same_bytes_posted_to_three_replicas_at_once_are_one_content(fleet: Fleet) -> None:
    data = weight_model(seed=7)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda replica: upload(replica, data, "same.onnx"), fleet.replicas))
    assert sorted(answer.status_code for answer in answers) == [200, 200, 201], [a.text for a in answers]
    assert len({answer.json()["id"] for answer in answers}) == 1
    model_id = answers[0].json()["id"]
    store = fleet.inspect()
    try:
        assert [place for place in store.content.places() if place.startswith(model_id)] == [store.read_record(model_id).place]  # type: ignore[union-attr]
    finally:
        store.close()


def test_the_byte_total_is_exact_after_concurrent_imports_and_eviction(fleet_servers: Any, tmp_path: Path) -> None:
    capped = Fleet(fleet_servers, tmp_path, 3, "--store-max-bytes", "1MiB")
    try:
        models = [weight_model(seed, values=40_000) for seed in range(100, 112)]  # about 160 KB each: 12 pass the cap
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda pair: upload(capped.replicas[pair[0] % 3], pair[1]), enumerate(models)))
        assert all(answer.status_code == 201 for answer in answers), [answer.text for answer in answers]
        store = capped.inspect()
        try:
            kept = store.index.places()
            assert 0 < store.model_count() < len(models)  # eviction ran
            assert store.usage() == sum(store.index.size(model_id) for model_id in store.index.by_last_use()) <= 1 << 20
            assert set(store.content.places()) == kept  # every evicted model's objects are gone, every kept one's there
        finally:
            store.close()
    finally:
        capped.stop()


def wait_for_unrecorded_content(fleet: Fleet, model_ids: set[str], seconds: float = 60.0) -> None:
    """Until one of `model_ids` has objects no record names (its commit holds between the two)."""
    store = fleet.inspect()
    try:
        deadline = time.monotonic() + seconds
        while not {place.partition("/")[0] for place in set(store.content.places()) - store.index.places()} & model_ids:
            assert time.monotonic() < deadline, "no upload reached the point between its objects and its record"
            time.sleep(0.2)
    finally:
        store.close()


def test_a_replica_killed_mid_commit_loses_no_acknowledged_import_and_gc_leaves_no_orphan(fleet_servers: Any, tmp_path: Path) -> None:
    killed = Fleet(fleet_servers, tmp_path, 3)
    try:
        victim = killed.replicas[0]
        models = [weight_model(seed, values=20_000) for seed in range(200, 220)]

        def post(index: int) -> httpx.Response | None:
            replica = killed.replicas[index % 3]
            # The victim's uploads wait between their objects and their record: the kill lands mid-commit.
            headers = {"X-Test-Pause-After-Upload": "5"} if replica is victim else {}
            try:
                return upload(replica, models[index], f"m{index}.onnx", headers)
            except httpx.HTTPError:
                return None  # the victim's connection dropped: not acknowledged

        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            futures = [pool.submit(post, index) for index in range(len(models))]
            held = {model_id_of(models[index], {}) for index in range(0, len(models), 3)}  # the victim's
            wait_for_unrecorded_content(killed, held)  # the victim holds uploaded objects no record names yet
            assert victim.process is not None
            os.kill(victim.process.pid, signal.SIGKILL)
            answers = [future.result() for future in futures]
        acknowledged = [answer.json()["id"] for answer in answers if answer is not None and answer.status_code == 201]
        assert len(acknowledged) >= 12, [answer.status_code if answer else None for answer in answers]
        survivor = killed.replicas[1]
        with survivor.client() as client:
            for model_id in acknowledged:
                assert client.get(f"/models/{model_id}/tensors/W").status_code == 200, model_id
        store = killed.inspect()
        try:
            orphans = set(store.content.places()) - store.index.places()
            assert orphans, "the kill left no uploaded, unrecorded content: the test proves nothing"
        finally:
            store.close()
        collected = killed.gc(grace_seconds=0)
        assert collected.returncode == 0, collected.stderr
        removed = {line.strip() for line in collected.stdout.splitlines()[1:]}
        assert orphans <= removed, collected.stdout  # and marks of commits killed before their first object
        store = killed.inspect()
        try:
            assert set(store.content.places()) == store.index.places()
            assert set(acknowledged) <= set(store.index.by_last_use())
        finally:
            store.close()
    finally:
        killed.stop()


def test_import_workers_hold_none_of_the_storage_secrets(fleet_servers: Any, tmp_path: Path) -> None:
    """The object-storage keys and the database's password (here from PGPASSWORD, not the
    URL) stay in the front end: the fork server and its workers start without them."""
    store_url, database = fleet_servers.new_store_url(), fleet_servers.new_database()
    password = database.split("//", 1)[1].split("@", 1)[0].split(":", 1)[1]
    without_password = database.replace(f":{password}@", "@", 1)
    environment = {**fleet_servers.environ, **HOOKS, "PGPASSWORD": password, "ONNX_SERVICE_DATABASE": without_password}
    arguments = ("--store", store_url, "--cache-dir", str(tmp_path / "cache"), "--workers", "1")
    replica = ServiceProcess(tmp_path / "cache", SAMPLES, *arguments, env=environment).start()
    secrets = [password.encode(), fleet_servers.environ["AWS_SECRET_ACCESS_KEY"].encode(), b"ONNX_SERVICE_DATABASE="]
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            sleeping = pool.submit(upload, replica, weight_model(seed=300), "slow.onnx", {"X-Test-Worker-Sleep": "3"})
            deadline = time.monotonic() + 10
            while not replica.worker_pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert replica.process is not None
            fork_servers = [pid for pid in children_of(replica.process.pid) if children_of(pid)]
            environments = {}
            for pid in [*fork_servers, *replica.worker_pids()]:
                try:
                    environments[pid] = Path(f"/proc/{pid}/environ").read_bytes()
                except PermissionError as error:  # a worker that made itself undumpable, seen without CAP_SYS_PTRACE
                    pytest.skip(f"/proc/{pid}/environ cannot be read here: {error}")
            assert fork_servers and len(environments) >= 2, environments.keys()
            for pid, environ in environments.items():
                assert not [secret for secret in secrets if secret in environ], pid
            assert sleeping.result().status_code == 201  # the database's password from PGPASSWORD works
    finally:
        replica.stop()
