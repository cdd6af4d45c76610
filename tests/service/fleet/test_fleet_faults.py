"""A fleet replica when its database or its object storage is down.

A real replica over a real PostgreSQL and a real SeaweedFS (the session's
`fleet_servers`), one of which the test stops: imports and reads answer 503
`storage-unavailable` with `Retry-After`, never 500; `/readyz` fails while
`/healthz` still answers at once; and when the server is back everything
works again without restarting the replica. A replica started while one of
them is down stays up (`/healthz`), not ready (`/readyz` names what does not
answer), answers 503 `storage-unavailable`, and serves once the server
starts, without a restart: no crash loop at a cold start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.service_harness import SAMPLES, ServiceProcess, assert_problem
from support.small_models import weight_model
from test_fleet_replicas import HOOKS, Fleet, upload

READY_WITHIN_SECONDS = 20.0  # the readiness check runs every 5 s
OPEN_WITHIN_SECONDS = 30.0  # a replica started before its storage tries again at most 10 s apart


@pytest.fixture
def replica(fleet_servers: Any, tmp_path: Path) -> Iterator[ServiceProcess]:
    fleet = Fleet(fleet_servers, tmp_path, 1)
    yield fleet.replicas[0]
    fleet.stop()


def wait_for_readiness(client: httpx.Client, status: int, within: float = READY_WITHIN_SECONDS) -> None:
    deadline = time.monotonic() + within
    while client.get("/readyz").status_code != status:
        assert time.monotonic() < deadline, f"/readyz did not answer {status} within {within} s"
        time.sleep(0.5)


def assert_unavailable(response: httpx.Response) -> None:
    assert_problem(response, 503, "storage-unavailable")
    assert int(response.headers["Retry-After"]) > 0


@pytest.mark.parametrize("server", ["postgresql", "s3"])
def test_storage_down_answers_503_then_recovers_without_a_restart(fleet_servers: Any, replica: ServiceProcess, server: str) -> None:
    stop: Callable[[], None] = fleet_servers.stop_postgres if server == "postgresql" else fleet_servers.stop_s3
    start: Callable[[], None] = fleet_servers.start_postgres if server == "postgresql" else fleet_servers.start_s3
    stored = upload(replica, (SAMPLES / "add.onnx").read_bytes(), "add.onnx").json()["id"]
    with replica.client() as client:
        wait_for_readiness(client, 200)
        stop()
        try:
            assert_unavailable(upload(replica, weight_model(seed=1), "new.onnx"))
            assert_unavailable(client.get(f"/models/{stored}/tensors/W"))
            if server == "postgresql":  # the index answers these; object storage is not asked
                assert_unavailable(client.get(f"/models/{stored}"))
                assert_unavailable(client.get("/models"))
                assert_unavailable(client.delete(f"/models/{stored}"))
            wait_for_readiness(client, 503)
            began = time.monotonic()
            assert client.get("/healthz").status_code == 200
            assert time.monotonic() - began < 1.0  # liveness does not wait on the storage
        finally:
            start()
        wait_for_readiness(client, 200)
        assert upload(replica, weight_model(seed=2), "after.onnx").status_code == 201
        assert client.get(f"/models/{stored}/tensors/W").status_code == 200
        assert client.get(f"/models/{stored}").status_code == 200


@pytest.mark.parametrize(
    ("server", "missing"), [("postgresql", "the index's database does not answer"), ("s3", "object storage does not answer")]
)
def test_a_replica_started_before_its_storage_stays_up_then_serves_once_it_answers(
    fleet_servers: Any, tmp_path: Path, server: str, missing: str
) -> None:
    stop: Callable[[], None] = fleet_servers.stop_postgres if server == "postgresql" else fleet_servers.stop_s3
    start: Callable[[], None] = fleet_servers.start_postgres if server == "postgresql" else fleet_servers.start_s3
    fleet = Fleet(fleet_servers, tmp_path, 0)  # its bucket prefix and its database, made while both answer
    arguments = ("--store", fleet.store_url, "--database", fleet.database, "--cache-dir", str(tmp_path), "--workers", "2")
    replica = ServiceProcess(tmp_path, SAMPLES, *arguments, env={**fleet_servers.environ, **HOOKS})
    stop()
    try:
        replica.start(wait_for="/healthz")  # would raise if it exited
        with replica.client() as client:
            assert missing in assert_problem(client.get("/readyz"), 503, "not-ready")["detail"]
            refused = upload(replica, weight_model(seed=3), "early.onnx")
            assert_unavailable(refused)
            assert missing in refused.json()["detail"]
            assert_unavailable(client.get("/models"))
            start()
            wait_for_readiness(client, 200, OPEN_WITHIN_SECONDS)
            assert upload(replica, weight_model(seed=3), "early.onnx").status_code == 201
            assert replica.process is not None and replica.process.poll() is None  # the same process all along
    finally:
        start()
        replica.stop()
