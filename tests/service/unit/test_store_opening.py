"""A replica whose storage does not answer at start, in process.

`service.store.opening`: the backoff between tries, the retries (only
`StorageUnavailable` is retried; another error ends them and stays the
problem /readyz names), and the whole app started while its store cannot
open: /healthz, /docs and the explorer answer, /readyz is 503 naming what is
missing, requests that need the store are 503 `storage-unavailable` with
Retry-After, and once the store answers the same app becomes ready and
imports, without a restart. The real replica over real servers started
before them: tests/service/fleet/test_fleet_faults.py.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from in_process import InProcessSandbox

import service.app
import service.store.opening
from service.app import create_app
from service.errors import StorageUnavailable
from service.settings import Settings
from service.store.model_store import Store
from service.store.opening import StoreOpening, backoff_delays

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "testdata" / "samples"
PROBLEMS = "https://onnx-import.example/problems/"
DATABASE_DOWN = "the index's database does not answer: the connection failed or was lost"


def test_the_backoff_doubles_from_half_a_second_to_ten_jittered_down_by_at_most_half() -> None:
    delays = list(itertools.islice(backoff_delays(rng=random.Random(7)), 8))
    for delay, nominal in zip(delays, [0.5, 1, 2, 4, 8, 10, 10, 10], strict=True):
        assert nominal / 2 <= delay <= nominal
    other = list(itertools.islice(backoff_delays(rng=random.Random(8)), 8))
    assert delays != other  # two replicas started together do not knock in step


def test_an_unreachable_store_is_tried_again_each_failed_try_undone_until_it_opens() -> None:
    tries: list[str] = []
    undone: list[int] = []
    opened: list[bool] = []

    def attempt() -> None:
        tries.append("try")
        if len(tries) < 3:
            raise StorageUnavailable(DATABASE_DOWN)

    async def when_open() -> None:
        opened.append(True)

    opening = StoreOpening(attempt, lambda: undone.append(len(tries)), delays=itertools.repeat(0.01))
    with pytest.raises(StorageUnavailable) as refused:
        opening.require()
    assert refused.value.retry_after >= 1
    asyncio.run(opening.run(when_open))
    assert (len(tries), undone, opened, opening.opened, opening.problem) == (3, [1, 2], [True], True, "")
    opening.require()  # open: no 503


def test_an_error_that_is_no_unreachable_dependency_ends_the_tries_and_stays_the_problem() -> None:
    tries: list[int] = []

    def attempt() -> None:
        tries.append(1)
        raise PermissionError("[Errno 13] Permission denied: '/cache/objects'")

    async def never() -> None:
        raise AssertionError("the store did not open")

    opening = StoreOpening(attempt, lambda: None, delays=itertools.repeat(0.01))
    asyncio.run(opening.run(never))
    assert (len(tries), opening.opened, opening.failed) == (1, False, True)
    assert "PermissionError" in opening.problem and "Permission denied" in opening.problem


def test_serving_waits_for_the_first_try_so_a_store_that_answers_is_open_before_the_first_request() -> None:
    async def started(attempt_seconds: float, fails: bool) -> tuple[bool, float]:
        def attempt() -> None:
            time.sleep(attempt_seconds)  # a slow machine's open
            if fails:
                raise StorageUnavailable(DATABASE_DOWN)

        async def when_open() -> None:
            pass

        opening = StoreOpening(attempt, lambda: None, delays=itertools.repeat(60.0))
        began = time.monotonic()
        async with opening.in_background(when_open):
            await opening.first_try()
            return opening.opened, time.monotonic() - began

    opened, waited = asyncio.run(started(0.5, fails=False))
    assert opened and waited >= 0.5
    opened, waited = asyncio.run(started(0.1, fails=True))
    assert not opened and waited < 5  # served after the first try, not after the next (60 s away)


def test_a_stop_during_a_try_waits_for_it_to_end_before_the_store_is_closed() -> None:
    events: list[str] = []

    def attempt() -> None:
        time.sleep(0.3)
        events.append("try ended")
        raise StorageUnavailable(DATABASE_DOWN)

    async def never() -> None:
        raise AssertionError("the store did not open")

    async def stopped_during_a_try() -> None:
        opening = StoreOpening(attempt, lambda: events.append("undone"), delays=itertools.repeat(60.0))
        async with opening.in_background(never):
            await asyncio.sleep(0.05)
        events.append("store closed")  # the lifespan's cleanup

    asyncio.run(stopped_during_a_try())
    assert events == ["try ended", "undone", "store closed"]


@pytest.fixture
def storage(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, bool]]:
    """The store is taken for a remote one whose database answers only once `up` is set."""
    state = {"up": False}
    really_open = Store.open

    def open_when_up(store: Store) -> None:
        if not state["up"]:
            raise StorageUnavailable(DATABASE_DOWN)
        really_open(store)

    monkeypatch.setattr(Store, "open", open_when_up)
    monkeypatch.setattr(service.app, "store_is_remote", lambda settings: True)
    monkeypatch.setattr(service.store.opening, "backoff_delays", lambda: itertools.repeat(0.05))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # the data root's bucket does not answer either
    yield state


def test_an_app_whose_store_does_not_open_serves_liveness_and_503s_then_becomes_ready(storage: dict[str, bool], tmp_path: Path) -> None:
    settings = Settings(
        data_root="s3://data/models",  # a data root in a bucket: nothing asked of it at start
        store=str(tmp_path / "store"),
        workers=1,
        store_min_free=0,
        mlflow_url="http://127.0.0.1:9",  # the registry hook starts too
        mlflow_webhook_secret="secret",
    )
    began = time.monotonic()
    with TestClient(create_app(settings, InProcessSandbox(settings))) as client:
        assert time.monotonic() - began < 5.0
        assert client.get("/healthz").status_code == 200
        assert client.get("/docs").status_code == 200
        assert client.get("/").status_code == 200
        not_ready = client.get("/readyz")
        assert (not_ready.status_code, not_ready.json()["type"]) == (503, PROBLEMS + "not-ready")
        assert DATABASE_DOWN in not_ready.json()["detail"]
        for refused in (
            client.post("/models", files={"model": ("add.onnx", (SAMPLES / "add.onnx").read_bytes())}),
            client.get("/models"),
            client.post("/uploads", headers={"Tus-Resumable": "1.0.0", "Upload-Length": "10"}),
            client.post("/hooks/mlflow", content=b"{}"),
            client.post("/hooks/oci", content=b"{}"),
        ):
            assert (refused.status_code, refused.json()["type"]) == (503, PROBLEMS + "storage-unavailable"), refused.text
            assert DATABASE_DOWN in refused.json()["detail"]
            assert int(refused.headers["Retry-After"]) >= 1
        storage["up"] = True
        deadline = time.monotonic() + 10
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, client.get("/readyz").text
            time.sleep(0.05)
        assert client.get("/models").status_code == 200
        imported = client.post("/models", files={"model": ("add.onnx", (SAMPLES / "add.onnx").read_bytes())})
        assert imported.status_code == 201, imported.text
