"""The MLflow gate's state shared by a fleet, over each database the index
runs on: SQLite (a file in a temporary folder) and a real PostgreSQL
(`fleet_servers`: skipped where none can be run).

A delivery is taken once, whichever index object (a front end, a replica)
or process is given it, and its marker goes once older than any timestamp
the signature check lets through. The alias only moves forward: a version
that passes after a newer one holds the alias leaves it there (its tag says
so), and two validations ending at once, on two replicas, leave it on the
newer one, where without the claim the slower write would win. A claim is
held by one holder at a time and lapses with its lease.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from service.registry.alias import AliasRule
from service.registry.deliveries import KEEP_SECONDS, Deliveries
from service.registry.mlflow_api import MlflowApi, MlflowRefused
from service.store.postgres.postgres_index import PostgresIndex
from service.store.sql.index import SqlIndex
from service.store.sqlite.sqlite_index import SqliteIndex

if TYPE_CHECKING:
    from fleet_servers import FleetServers  # tools/ (tests/support/fleet.py's fixture)


def open_index(database: str) -> SqlIndex:
    """The index of `database`: a PostgreSQL URL, or the folder of an SQLite one."""
    index: SqlIndex = PostgresIndex(database, timeout=3.0) if database.startswith("postgresql:") else SqliteIndex(Path(database))
    index.open()
    return index


@pytest.fixture(params=("sqlite", "postgres"))
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        servers: FleetServers = request.getfixturevalue("fleet_servers")
        return servers.new_database()
    return str(tmp_path / "store")


@pytest.fixture
def indexes(database: str) -> Iterator[tuple[SqlIndex, SqlIndex]]:
    """Two index objects over one database: two front ends, or two replicas."""
    first, second = open_index(database), open_index(database)
    yield first, second
    first.close()
    second.close()


def _take(database: str, delivery_id: str, results: Any) -> None:
    index = open_index(database)
    try:
        results.put(Deliveries(index.registry_rows()).first(delivery_id))
    finally:
        index.close()


def test_a_delivery_is_taken_once_by_the_whole_fleet(database: str, indexes: tuple[SqlIndex, SqlIndex]) -> None:
    """Eight processes given the same delivery: one takes it; then a replay to either index object is a duplicate."""
    context = multiprocessing.get_context("fork")
    results = context.Queue()
    processes = [context.Process(target=_take, args=(database, "same-id", results)) for _ in range(8)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(30)
    assert sorted(results.get(timeout=5) for _ in processes) == [False] * 7 + [True]
    one, other = (Deliveries(index.registry_rows()) for index in indexes)
    assert not one.first("same-id") and not other.first("same-id")
    assert one.first("another-id") and not other.first("another-id")


def test_markers_go_once_older_than_any_delivery_the_signature_lets_through(indexes: tuple[SqlIndex, SqlIndex]) -> None:
    index = indexes[0]
    deliveries = Deliveries(index.registry_rows())
    assert deliveries.first("old") and deliveries.first("recent")
    dialect = index.database.dialect
    aged = f"UPDATE onnx_registry_deliveries SET taken = {dialect.from_unix} WHERE id = %s"
    index.database.change(aged, (time.time() - KEEP_SECONDS - 5, hashlib.sha256(b"old").hexdigest()))
    assert deliveries.prune() == 1
    assert deliveries.prune() == 0
    assert deliveries.first("old")  # gone: a replay this late is refused as stale by the signature check
    assert not deliveries.first("recent")  # the recent one is kept


def test_a_claim_has_one_holder_until_it_is_released_or_its_lease_lapses(indexes: tuple[SqlIndex, SqlIndex]) -> None:
    one, other = (index.registry_rows() for index in indexes)
    assert one.claim("alias-key", "holder-a", 30.0)
    assert not other.claim("alias-key", "holder-b", 30.0)
    other.release("alias-key", "holder-b")  # not its holder: nothing
    assert not other.claim("alias-key", "holder-b", 30.0)
    one.release("alias-key", "holder-a")
    assert other.claim("alias-key", "holder-b", 0.2)
    assert other.claim("another-key", "holder-b", 30.0)  # a claim per key
    time.sleep(0.4)
    assert one.claim("alias-key", "holder-a", 30.0)  # holder-b's lease lapsed (its process died, say)


class Registry(MlflowApi):
    """MLflow's alias of one registered model, each call taking the time given."""

    def __init__(self, held: str = "", read_seconds: float = 0.0, set_seconds: dict[str, float] | None = None) -> None:
        super().__init__("http://127.0.0.1:1", environ={})
        self.held = held
        self.read_seconds = read_seconds
        self.set_seconds = set_seconds or {}
        self.moves: list[str] = []

    async def version_by_alias(self, name: str, alias: str) -> dict[str, Any]:
        await asyncio.sleep(self.read_seconds)
        if not self.held:  # as MLflow 3 answers it
            raise MlflowRefused(400, f"INVALID_PARAMETER_VALUE Registered model alias {alias} not found.")
        return {"name": name, "version": self.held}

    async def set_alias(self, name: str, alias: str, version: str) -> None:
        await asyncio.sleep(self.set_seconds.get(version, 0.0))
        self.held = version
        self.moves.append(version)


def test_an_older_version_passing_later_leaves_the_alias_on_the_newer(indexes: tuple[SqlIndex, SqlIndex]) -> None:
    rule = AliasRule(indexes[0].registry_rows())
    registry = Registry()
    assert asyncio.run(rule.advance(registry, "m", "validated", "2")) == "moved here (no version held it)"
    assert asyncio.run(rule.advance(registry, "m", "validated", "1")) == "kept on version 2 (newer)"
    assert registry.held == "2" and registry.moves == ["2"]
    assert asyncio.run(rule.advance(registry, "m", "validated", "2")) == "already here"
    assert asyncio.run(rule.advance(registry, "m", "validated", "10")) == "moved here (from version 2)"  # by number, not as text
    assert registry.held == "10"


async def _both(rules: tuple[AliasRule, AliasRule], registry: Registry, versions: tuple[str, str]) -> list[str]:
    """The two versions' alias moves at once, each by its own replica's rule."""
    moves = (rule.advance(registry, "m", "validated", version) for rule, version in zip(rules, versions, strict=True))
    return list(await asyncio.gather(*moves))


def test_two_validations_ending_at_once_on_two_replicas_leave_the_alias_on_the_newer(indexes: tuple[SqlIndex, SqlIndex]) -> None:
    """Both read the alias before either moves it, and version 1's move is the slower: without the claim, 1 would win."""
    rules = (AliasRule(indexes[0].registry_rows()), AliasRule(indexes[1].registry_rows()))
    for versions in (("1", "2"), ("2", "1")):
        registry = Registry(read_seconds=0.05, set_seconds={"1": 0.3, "2": 0.01})
        said = asyncio.run(_both(rules, registry, versions))
        assert registry.held == "2", (versions, said, registry.moves)
        assert "kept on version 2 (newer)" in said or registry.moves == ["1", "2"], (said, registry.moves)


def test_a_harbor_scan_is_answered_by_any_replica_its_lease_lapses_and_it_expires(indexes: tuple[SqlIndex, SqlIndex]) -> None:
    """The Harbor scanner's scans: begun by one replica, read by another; running while its process renews
    its lease, then done (its report) or error; a lease not renewed lapses (its process died); old scans go."""
    runner, other = (index.registry_rows() for index in indexes)
    runner.begin_scan("scan-1", 60)
    runner.begin_scan("scan-2", 0.2)
    found = other.scan("scan-1")
    assert found is not None and (found.state, found.body, found.lapsed) == ("running", "", False)
    time.sleep(0.3)
    lapsed = other.scan("scan-2")
    assert lapsed is not None and lapsed.lapsed
    runner.renew_scans(["scan-2"], 60)
    renewed = other.scan("scan-2")
    assert renewed is not None and not renewed.lapsed
    runner.end_scan("scan-1", "done", '{"vulnerabilities":[]}')
    runner.end_scan("scan-2", "error", "the registry did not answer")
    assert other.scan("scan-1") == type(found)("done", '{"vulnerabilities":[]}', False)
    ended = other.scan("scan-2")
    assert ended is not None and (ended.state, ended.body) == ("error", "the registry did not answer")
    runner.renew_scans(["scan-2"], 0)  # an ended scan's lease is not renewed: it stays ended
    assert other.scan("scan-2") == ended
    assert other.scan("never-asked") is None
    assert other.prune_scans(60) == 0 and other.scan("scan-1") is not None
    time.sleep(0.3)
    assert other.prune_scans(0.2) == 2 and other.scan("scan-1") is None and other.scan("scan-2") is None
