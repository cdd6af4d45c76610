"""What the index answers, over SQLite and PostgreSQL alike,
for eviction and garbage collection, the same everywhere: `SqlIndex.evictable`
(what a tenant may evict, least recently used first, only as much as is
wanted), `SqlIndex.tenant_usage`, and the marks of content in flight turning
stale after their grace (`live_uploads`, `stale_uploads`)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.store.eviction import TenantCaps
from service.store.records import SourceFile, StoredRecord, TenantRecord
from service.store.sql.index import SqlIndex
from service.store.sqlite.sqlite_index import SqliteIndex

# name, size, holders; stored in this order, so least recently used first
MODELS = (
    ("bobs", 100, ("bob",)),
    ("alices", 200, ("alice",)),
    ("nobodys", 300, ()),
    ("shared", 400, ("alice", "bob")),
    ("carols", 500, ("carol",)),
    ("alices-newest", 600, ("alice",)),
)
NO_CAPS = TenantCaps()
EVERYTHING = 1 << 40


def model_id(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


@pytest.fixture(params=("sqlite", "postgres"))
def index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlIndex]:
    opened: SqlIndex
    if request.param == "postgres":
        from service.store.postgres.postgres_index import PostgresIndex

        opened = PostgresIndex(request.getfixturevalue("fleet_servers").new_database(), timeout=2.0)
    else:
        opened = SqliteIndex(tmp_path)
    opened.open()
    yield opened
    opened.close()


def add(index: SqlIndex, name: str, size: int, holders: tuple[str, ...]) -> None:
    identity = model_id(name)
    item = SourceFile(path="files/model.onnx", in_store=True, size=1, mtime_ns=1, inode=1)
    record = StoredRecord(
        id=identity, input=name, created_ns=time.time_ns(), model_size=size, model_sha256=identity, tensor_count=0, files={"model": item}
    )
    with index.locked():
        index.add_record(record, size)
        for tenant in holders:
            index.hold(TenantRecord(tenant=tenant, input=name, created_ns=time.time_ns()), identity)


@pytest.fixture
def stocked(index: SqlIndex) -> SqlIndex:
    for name, size, holders in MODELS:
        add(index, name, size, holders)
        time.sleep(0.01)  # a last use apart from the next (file times are coarse)
    with index.locked():  # bob holds a model no longer stored: not in its usage
        index.hold(TenantRecord(tenant="bob", input="ghost", created_ns=1), model_id("ghost"))
    return index


def evictable(index: SqlIndex, tenant: str, caps: TenantCaps = NO_CAPS, keep: str = "", wanted: int = EVERYTHING) -> list[tuple[str, int]]:
    with index.locked():
        found = index.evictable(tenant, caps, keep=model_id(keep) if keep else "", wanted=wanted)
    names = {model_id(name): name for name, _, _ in MODELS}
    return [(names[identity], size) for identity, size in found]


def test_a_tenant_within_its_caps_keeps_its_models_from_others(stocked: SqlIndex) -> None:
    assert evictable(stocked, "alice", keep="alices-newest") == [("alices", 200), ("nobodys", 300)]
    assert evictable(stocked, "alice") == [("alices", 200), ("nobodys", 300), ("alices-newest", 600)]
    assert evictable(stocked, "dave") == [("nobodys", 300)]


def test_the_models_of_a_tenant_past_a_cap_may_be_evicted_by_others(stocked: SqlIndex) -> None:
    by_count = TenantCaps(max_models=1)  # alice holds 3, bob 2 stored (and a holding of a model gone), carol 1
    assert evictable(stocked, "alice", by_count, keep="alices-newest") == [
        ("bobs", 100),
        ("alices", 200),
        ("nobodys", 300),
        ("shared", 400),
    ]
    assert [name for name, _ in evictable(stocked, "carol", by_count)] == [name for name, _, _ in MODELS]
    by_bytes = TenantCaps(max_bytes=550)  # alice's 1200 bytes pass it; bob's 500 and carol's 500 do not
    assert evictable(stocked, "bob", by_bytes) == [
        ("bobs", 100),
        ("alices", 200),
        ("nobodys", 300),
        ("shared", 400),
        ("alices-newest", 600),
    ]
    assert evictable(stocked, "carol", by_bytes) == [("alices", 200), ("nobodys", 300), ("carols", 500), ("alices-newest", 600)]


def test_only_as_many_as_free_the_bytes_wanted(stocked: SqlIndex) -> None:
    assert evictable(stocked, "alice", wanted=200) == [("alices", 200)]
    assert evictable(stocked, "alice", wanted=201) == [("alices", 200), ("nobodys", 300)]
    assert evictable(stocked, "alice", wanted=0) == []
    with stocked.locked():
        stocked.touch(model_id("alices"))  # used now: the last to go
    assert evictable(stocked, "alice", wanted=301) == [("nobodys", 300), ("alices-newest", 600)]


def test_a_tenants_usage_counts_its_stored_models(stocked: SqlIndex) -> None:
    assert stocked.tenant_usage("alice") == (1200, 3)
    assert stocked.tenant_usage("bob") == (500, 2)
    assert stocked.tenant_usage("dave") == (0, 0)


def test_marks_of_content_in_flight_turn_stale_after_their_grace(index: SqlIndex) -> None:
    index.begin_upload("a/01")
    index.begin_upload("b/02")
    assert index.live_uploads(60) == {"a/01", "b/02"} and index.stale_uploads(60) == set()
    time.sleep(0.3)
    index.begin_upload("b/02")  # again: its grace starts again
    assert index.stale_uploads(0.2) == {"a/01"} and index.live_uploads(0.2) == {"b/02"}
    index.end_upload("a/01")
    assert index.stale_uploads(0) == {"b/02"}
