"""The SQL index over each database it runs on: SQLite (a file in a
temporary folder) and a real PostgreSQL (`fleet_servers`: skipped where none
can be run). What the Store relies on of an index, when several threads,
several index objects and several processes share one database.

Each test has a fresh database. Records and holdings round-trip; sizes and
the total stay exact under concurrent writers, threads and processes;
`locked()` excludes across index objects and processes (a read-modify-write
under it loses no update) and is one transaction; two replicas opening at
once migrate once, and making a shared secret at once agree on one; listing
pages are newest first, ties by id; uploads age out by the database's clock. PostgreSQL's own: the password may come from
PGPASSWORD; a stopped database is StorageUnavailable, and the same index
object works again once it is back; a schema of an older version migrates
its totals. SQLite's own: a full disk is ENOSPC, and the transaction it cut
short leaves nothing.
"""

from __future__ import annotations

import errno
import hashlib
import multiprocessing
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from support.paths import REPO

from service.errors import StorageUnavailable
from service.store.postgres.postgres_index import PostgresIndex
from service.store.records import SourceFile, StoredRecord, TenantRecord
from service.store.sql.dialect import POSTGRES
from service.store.sql.index import SqlIndex
from service.store.sql.schema import MIGRATIONS, VERSION_TABLE
from service.store.sqlite.sqlite_index import SqliteIndex

if TYPE_CHECKING:
    from fleet_servers import FleetServers  # tools/ (tests/support/fleet.py's fixture)


def model_id(name: object) -> str:
    return hashlib.sha256(str(name).encode()).hexdigest()


def stored(name: object, place: str = "", tensors: int = 0) -> StoredRecord:
    identity = model_id(name)
    source = SourceFile(path="model.onnx", in_store=True, size=1234, mtime_ns=2**62 + 7, inode=2**63 - 1)
    return StoredRecord(
        id=identity,
        input=f"models/{name}.onnx",
        created_ns=time.time_ns(),
        model_size=1234,
        model_sha256=identity,
        tensor_count=tensors,
        files={"model": source},
        place=place,
    )


def open_index(database: str, timeout: float = 3.0) -> SqlIndex:
    """The index of `database`: a PostgreSQL URL, or the folder of an SQLite one."""
    if database.startswith("postgresql:"):
        return PostgresIndex(database, timeout=timeout)
    return SqliteIndex(Path(database))


def migrations_of(database: str) -> int:
    return len(MIGRATIONS)  # one list for SQLite and PostgreSQL


@pytest.fixture()
def postgres(fleet_servers: FleetServers) -> str:
    return fleet_servers.new_database()


@pytest.fixture(params=("sqlite", "postgres"))
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        return str(request.getfixturevalue("postgres"))
    return str(tmp_path / "store")


@pytest.fixture()
def index(database: str) -> Iterator[SqlIndex]:
    opened = open_index(database, timeout=2.0)
    opened.open()
    yield opened
    opened.close()


def test_records_round_trip_with_their_place(index: SqlIndex) -> None:
    first, second = stored("a", place=f"{model_id('a')}/00ff"), stored("b")
    index.add_record(first, 1000)
    index.add_record(second, 24)
    assert index.record(first.id) == first and index.record(second.id) == second
    assert index.has(first.id) and not index.has(model_id("c")) and index.record(model_id("c")) is None
    assert (index.size(first.id), index.size(model_id("c")), index.usage(), index.count()) == (1000, 0, 1024, 2)
    assert index.places() == {first.place, second.id}
    moved = first.model_copy(update={"place": f"{first.id}/0100", "files": {}})
    index.replace_record(moved)
    assert index.record(first.id) == moved and index.places() == {moved.place, second.id}
    index.grow(second.id, 76)
    assert (index.size(second.id), index.usage()) == (100, 1100)


def test_ids_that_are_not_content_hashes_are_never_stored(index: SqlIndex) -> None:
    for odd in ("m1", "a\0b", "", model_id("x").upper()):
        assert not index.has(odd) and index.record(odd) is None and index.size(odd) == 0
        assert not index.holds("t", odd) and index.holding("t", odd) is None and not index.let_go("t", odd)
        index.touch(odd)
        index.drop(odd, 0)
    with pytest.raises(KeyError):
        index.add_record(stored("x").model_copy(update={"id": "m1"}), 1)
    with pytest.raises(KeyError):
        index.hold(TenantRecord(tenant="t", input="x", created_ns=1), "m\0")
    assert index.count() == 0


def test_last_use_orders_eviction(index: SqlIndex) -> None:
    records = [stored(n) for n in range(3)]
    for record in records:
        index.add_record(record, 1)  # used now
    ids = [record.id for record in records]
    assert index.by_last_use() == ids
    index.touch(ids[0])
    assert index.by_last_use() == [*ids[1:], ids[0]]


def test_holdings_their_marks_and_drop(index: SqlIndex) -> None:
    shared, own = stored("shared"), stored("own")
    index.add_record(shared, 10)
    alice = TenantRecord(tenant="alice", input="its name", created_ns=5)
    assert index.hold(alice, shared.id) and not index.hold(alice, shared.id)
    assert index.hold(TenantRecord(tenant="bob", input="b", created_ns=6), shared.id)
    assert index.hold(TenantRecord(tenant="bob", input="mine", created_ns=7), own.id)  # before its record: no foreign key
    index.add_record(own, 20)
    assert index.holding("alice", shared.id) == alice and index.holding("alice", own.id) is None
    assert index.tenant_key("alice") == hashlib.sha256(b"alice").hexdigest()[:32] != index.tenant_key("bob")
    assert index.held_by("alice") == [shared.id] and index.held_by_anyone(own.id)
    assert sorted(index.held_by("bob")) == sorted([shared.id, own.id]) and index.held_by("carol") == []

    assert not index.graph_rendered("alice", shared.id)
    index.mark_graph_rendered("alice", shared.id)
    index.mark_graph_rendered("carol", shared.id)  # holds nothing: nothing to mark
    assert index.graph_rendered("alice", shared.id) and not index.graph_rendered("bob", shared.id)
    assert not index.graph_rendered("carol", shared.id)
    assert index.let_go("alice", shared.id) and not index.let_go("alice", shared.id)
    assert index.hold(alice, shared.id) and not index.graph_rendered("alice", shared.id)  # the mark went with the holding

    index.mark_graph_rendered("bob", shared.id)
    assert index.held_by_anyone(shared.id)
    index.drop(shared.id, 10)
    assert not index.has(shared.id) and not index.held_by_anyone(shared.id) and not index.holds("alice", shared.id)
    assert not index.graph_rendered("bob", shared.id) and index.held_by("bob") == [own.id] and index.held_by("alice") == []
    assert (index.usage(), index.count()) == (20, 1)


def test_a_holdings_label_is_a_column_of_its_own_and_a_rename_keeps_the_rest(index: SqlIndex) -> None:
    """The label round-trips beside the holding's JSON, which never holds it (a
    release before labels reads that JSON with extra="forbid"); a rename changes
    what it is given and keeps the rest; a tenant holding nothing renames nothing."""
    model = stored("labelled")
    index.add_record(model, 10)
    alice = TenantRecord(tenant="alice", input="first", created_ns=5, label="v3 fp16")
    assert "label" not in alice.model_dump_json()
    assert index.hold(alice, model.id) and index.hold(TenantRecord(tenant="bob", input="b", created_ns=6), model.id)
    assert index.holding("alice", model.id) == alice
    assert index.rename("alice", model.id, None, "final")
    assert index.holding("alice", model.id) == alice.model_copy(update={"label": "final"})
    assert index.rename("alice", model.id, "second", None)
    ((_, listed_id, _, held, _),) = index.listing("alice", None, 10)
    assert (listed_id, held.input, held.label, held.created_ns) == (model.id, "second", "final", 5)
    bobs = index.holding("bob", model.id)
    assert bobs is not None and (bobs.input, bobs.label) == ("b", "")
    assert not index.rename("carol", model.id, "x", "y")


def test_holdings_from_before_labels_migrate_without_one(database: str) -> None:
    """A database of the version before the label's column: its holdings are
    kept, each with no label, and take one afterwards."""
    before = next(number for number, migration in enumerate(MIGRATIONS) if any("COLUMN label" in sql for sql in migration.statements))
    model = stored("older")
    first = open_index(database, timeout=2.0)
    first.open()
    try:
        first.add_record(model, 10)
        first.hold(TenantRecord(tenant="alice", input="kept", created_ns=5), model.id)
        first.database.change("ALTER TABLE onnx_holdings DROP COLUMN label")
        for later in MIGRATIONS[before + 1 :]:  # the tables and columns the migrations after the label's made
            for table in re.findall(r"CREATE TABLE (\w+)", " ".join(later.statements)):
                first.database.change(f"DROP TABLE {table}")
            for table, column in re.findall(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", " ".join(later.statements)):
                first.database.change(f"ALTER TABLE {table} DROP COLUMN {column}")
        first.database.change("UPDATE onnx_schema SET version = %s", (before,))
    finally:
        first.close()
    again = open_index(database, timeout=2.0)
    again.open()
    try:
        assert again.migrations_applied == len(MIGRATIONS) - before
        held = again.holding("alice", model.id)
        assert held is not None and (held.input, held.label) == ("kept", "")
        assert again.rename("alice", model.id, None, "now") and [row[3].label for row in again.listing("alice", None, 5)] == ["now"]
    finally:
        again.close()


def test_newest_pages_newest_first_ties_by_id(index: SqlIndex) -> None:
    for n in range(23):
        for tenant in ("alice", "bob"):
            owner = TenantRecord(tenant=tenant, input=str(n), created_ns=1000 + n // 3)  # ties: ordered by id
            index.hold(owner, model_id(n))
    expected = sorted(((1000 + n // 3, model_id(n)) for n in range(23)), reverse=True)
    for limit in (1, 7, 23, 50):
        before: tuple[int, str] | None = None
        pages: list[list[tuple[int, str]]] = []
        while page := index.newest("alice", before, limit):
            assert len(page) <= limit
            pages.append(page)
            before = page[-1]
        assert [entry for page in pages for entry in page] == expected and len(pages) == -(-23 // limit)
    assert index.newest("carol", None, 10) == [] and index.newest("alice", None, 0) == []
    assert index.newest("alice", (1010, "a\0"), 10) == []  # a forged cursor


def test_uploads_age_out_by_the_databases_clock(index: SqlIndex) -> None:
    index.begin_upload("a/01")
    index.begin_upload("b/02")
    assert index.live_uploads(60) == {"a/01", "b/02"}
    index.end_upload("a/01")
    index.end_upload("never/began")
    assert index.live_uploads(60) == {"b/02"}
    time.sleep(0.3)
    assert index.live_uploads(0.2) == set() and index.live_uploads(60) == {"b/02"}
    index.begin_upload("b/02")  # again: its grace starts again
    assert index.live_uploads(0.2) == {"b/02"}


def test_locked_is_one_transaction(database: str, index: SqlIndex) -> None:
    other = open_index(database)
    other.open()
    try:
        record = stored("kept")
        with index.locked():
            index.add_record(record, 5)
            with index.locked():  # nested: the same transaction
                assert index.has(record.id)
            assert not other.has(record.id)  # not committed yet
        assert other.has(record.id)
        gone = stored("gone")
        with pytest.raises(ZeroDivisionError), index.locked():
            index.add_record(gone, 7)
            index.hold(TenantRecord(tenant="t", input="x", created_ns=1), gone.id)
            _ = 1 / 0
        assert not other.has(gone.id) and not other.holds("t", gone.id) and other.usage() == 5
    finally:
        other.close()


def test_locked_excludes_another_index(database: str, index: SqlIndex) -> None:
    other = open_index(database)
    other.open()
    entered = threading.Event()

    def wait_for_the_lock() -> None:
        with other.locked():
            entered.set()

    try:
        with index.locked():
            waiter = threading.Thread(target=wait_for_the_lock)
            waiter.start()
            assert not entered.wait(0.5)
        assert entered.wait(5)
        waiter.join()
    finally:
        other.close()


def test_concurrent_threads_keep_sizes_exact(database: str, index: SqlIndex) -> None:
    counter = stored("counter")
    index.add_record(counter, 0)
    threads_count, each = 6, 15

    def work(worker: int) -> None:
        for n in range(each):
            index.add_record(stored(f"{worker}-{n}"), worker * 100 + n)
            index.grow(counter.id, 1)
            with index.locked():  # a read-modify-write: exact only if the lock excludes
                current = index.record(counter.id)
                assert current is not None
                index.replace_record(current.model_copy(update={"tensor_count": current.tensor_count + 1}))

    workers = [threading.Thread(target=work, args=(worker,)) for worker in range(threads_count)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    expected = sum(worker * 100 + n for worker in range(threads_count) for n in range(each)) + threads_count * each
    assert (index.usage(), index.count()) == (expected, threads_count * each + 1)
    final = index.record(counter.id)
    assert final is not None and final.tensor_count == threads_count * each


REPLICA = textwrap.dedent(
    """
    import hashlib, sys, time
    from pathlib import Path
    from service.store.postgres.postgres_index import PostgresIndex
    from service.store.records import StoredRecord
    from service.store.sqlite.sqlite_index import SqliteIndex

    url, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])

    def stored(key: str) -> StoredRecord:
        identity = hashlib.sha256(key.encode()).hexdigest()
        return StoredRecord(id=identity, input=key, created_ns=time.time_ns(), model_size=0,
                            model_sha256=identity, tensor_count=0, files={})

    index = PostgresIndex(url) if url.startswith("postgresql:") else SqliteIndex(Path(url))
    print("ready", flush=True)
    sys.stdin.readline()  # go: both replicas open at once
    index.open()
    print("open", flush=True)
    sys.stdin.readline()  # and write at once
    shared = stored("shared")
    for n in range(rounds):
        with index.locked():
            current = index.record(shared.id)
            if current is None:
                index.add_record(shared, 0)
                current = shared
            time.sleep(0.001)  # a read-modify-write: without the lock, the other replica's update is lost
            index.replace_record(current.model_copy(update={"tensor_count": current.tensor_count + 1}))
            index.add_record(stored(f"{name}-{n}"), n + 1)
        index.grow(shared.id, 1)
    print("migrations", index.migrations_applied, flush=True)
    index.close()
    """
)


def test_two_processes_share_one_index(database: str) -> None:
    rounds = 100
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    replicas = [
        subprocess.Popen(
            [sys.executable, "-c", REPLICA, database, name, str(rounds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=Path(REPO),
        )
        for name in ("one", "two")
    ]
    for step, answer in (("go", "ready"), ("go", "open")):
        for replica in replicas:
            assert replica.stdout is not None and replica.stdout.readline().strip() == answer
        for replica in replicas:
            assert replica.stdin is not None
            replica.stdin.write(f"{step}\n")
            replica.stdin.flush()
    outputs = [replica.communicate(timeout=60)[0] for replica in replicas]
    assert [replica.returncode for replica in replicas] == [0, 0], outputs
    applied = [int(output.split()[-1]) for output in outputs]
    assert sorted(applied) == [0, migrations_of(database)]  # one migrated, the other found the schema current

    index = open_index(database)
    index.open()
    try:
        shared = index.record(model_id("shared"))
        assert shared is not None and shared.tensor_count == 2 * rounds
        assert index.count() == 2 * rounds + 1 and index.migrations_applied == 0
        assert index.usage() == 2 * sum(range(1, rounds + 1)) + 2 * rounds
    finally:
        index.close()


def test_replicas_opening_at_once_migrate_once(database: str) -> None:
    replicas = [open_index(database) for _ in range(4)]
    start = threading.Barrier(len(replicas))

    def open_at_once(replica: SqlIndex) -> None:
        start.wait()
        replica.open()

    threads = [threading.Thread(target=open_at_once, args=(replica,)) for replica in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert sorted(replica.migrations_applied for replica in replicas) == [0, 0, 0, migrations_of(database)]
        replicas[0].add_record(stored("x"), 1)
        assert replicas[3].count() == 1
    finally:
        for replica in replicas:
            replica.close()


def test_replicas_making_a_shared_secret_at_once_agree_on_one(database: str) -> None:
    replicas = [open_index(database) for _ in range(4)]
    for replica in replicas:
        replica.open()
    start = threading.Barrier(len(replicas))
    made: list[str] = []

    def make_at_once(replica: SqlIndex) -> None:
        start.wait()
        made.append(replica.shared_secret("report-links"))

    threads = [threading.Thread(target=make_at_once, args=(replica,)) for replica in replicas]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert len(made) == 4 and len(set(made)) == 1 and len(made[0]) == 64, made
        assert replicas[0].shared_secret("report-links") == made[0]  # kept: asked again, the same
        assert replicas[1].shared_secret("another") not in made  # one per name
    finally:
        for replica in replicas:
            replica.close()


def test_the_password_may_come_from_libpqs_environment(postgres: str, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = urlsplit(postgres)
    if parts.password is None:
        pytest.skip("the test database takes no password")
    monkeypatch.setenv("PGPASSWORD", parts.password)
    without = urlunsplit(parts._replace(netloc=f"{parts.username}@{parts.hostname}:{parts.port}"))
    index = PostgresIndex(without)
    index.open()
    try:
        index.check()
    finally:
        index.close()


def test_open_gives_up_when_nothing_answers() -> None:
    index = PostgresIndex("postgresql://nobody@127.0.0.1:9/none", timeout=1.0)  # the discard port: nothing listens
    began = time.monotonic()
    with pytest.raises(StorageUnavailable, match="does not answer"):
        index.open()
    assert time.monotonic() - began < 5
    index.close()


def _answers_again(index: SqlIndex, within: float) -> float:
    """Seconds until `check()` passes."""
    began = time.monotonic()
    while True:
        try:
            index.check()
            return time.monotonic() - began
        except StorageUnavailable:
            if time.monotonic() - began > within:
                raise
            time.sleep(0.2)


def test_a_stopped_database_is_unavailable_then_answers_again(fleet_servers: FleetServers, postgres: str) -> None:
    index = PostgresIndex(postgres, timeout=1.0)  # each call fails after it, while the database is down
    index.open()
    record = stored("kept")
    index.add_record(record, 9)
    try:
        try:
            with pytest.raises(StorageUnavailable), index.locked():  # lost mid-transaction
                index.add_record(stored("lost"), 1)
                fleet_servers.stop_postgres()
                index.has(record.id)
            for call in (index.check, index.usage, lambda: index.touch(record.id)):
                began = time.monotonic()
                with pytest.raises(StorageUnavailable, match="the index's database does not answer"):
                    call()
                assert time.monotonic() - began < 1.0 + 1.5  # the pool's timeout, and a little
            with pytest.raises(StorageUnavailable), index.locked():
                pass
        finally:
            fleet_servers.start_postgres()
        _answers_again(index, within=30)  # the same index object: its pool reconnected
        assert index.record(record.id) == record and index.usage() == 9 and not index.has(stored("lost").id)
        with index.locked():
            index.grow(record.id, 1)
        assert index.usage() == 10
    finally:
        index.close()


def test_the_totals_follow_every_write_and_a_migration_counts_what_was_stored(postgres: str) -> None:
    """The byte total and the count come from one row a trigger keeps (a sum
    scans every model): exact after adds, a re-add, growth, touches and drops,
    and counted from the models a database of schema 3 held when it migrates."""
    with psycopg.connect(postgres, autocommit=True) as connection:  # a database of the version before: schema 3
        with connection.transaction():
            connection.execute(POSTGRES.ddl(VERSION_TABLE))
            connection.execute("INSERT INTO onnx_schema (version) VALUES (0)")
            for migration in MIGRATIONS[:3]:
                for statement in [*migration.statements, *migration.only.get("postgresql", [])]:
                    connection.execute(POSTGRES.ddl(statement))
            connection.execute("UPDATE onnx_schema SET version = 3")
        connection.execute(
            "INSERT INTO onnx_models (id, record, size, last_use_ns) VALUES (%s, %s, 100, 1), (%s, %s, 20, 2)",
            (model_id("old-a"), stored("old-a").model_dump_json(), model_id("old-b"), stored("old-b").model_dump_json()),
        )
    index = PostgresIndex(postgres)
    index.open()
    try:
        assert index.migrations_applied == len(MIGRATIONS) - 3
        assert (index.usage(), index.count()) == (120, 2)
        index.add_record(stored("x"), 1000)
        index.add_record(stored("x"), 1500)  # the same id again (ON CONFLICT): its size replaced, not added
        index.grow(model_id("x"), 7)
        index.touch(model_id("x"))
        assert (index.usage(), index.count()) == (1627, 3)
        index.drop(model_id("old-a"), 100)
        with index.locked():
            index.add_record(stored("y"), 3)
            index.drop(model_id("y"), 3)
        assert (index.usage(), index.count()) == (1527, 2)
        row = index.database.one("SELECT COALESCE(SUM(size), 0)::bigint, count(*) FROM onnx_models")
        assert row is not None and (index.usage(), index.count()) == (int(row[0]), int(row[1]))
    finally:
        index.close()


def test_a_full_sqlite_database_is_enospc_and_loses_nothing(tmp_path: Path) -> None:
    index = SqliteIndex(tmp_path)
    index.open()
    try:
        kept = stored("kept")
        index.add_record(kept, 5)
        connection = index.database.connection()
        pages = int(connection.execute("PRAGMA page_count").fetchone()[0])
        connection.execute(f"PRAGMA max_page_count = {pages}")  # this connection's file can grow no more
        big = stored("big").model_copy(update={"input": "x" * 100_000})
        with pytest.raises(OSError) as full, index.locked():
            index.hold(TenantRecord(tenant="t", input="x", created_ns=1), big.id)
            index.add_record(big, 7)
        assert full.value.errno == errno.ENOSPC
        assert index.record(kept.id) == kept and not index.has(big.id) and not index.holds("t", big.id)
        assert (index.usage(), index.count()) == (5, 1)
        with index.locked():  # the lock was let go
            index.grow(kept.id, 1)
        assert index.usage() == 6
    finally:
        index.close()


def _open_new_store(folder: str, start: Any, answers: Any) -> None:
    index = SqliteIndex(Path(folder))
    start.wait()
    try:
        index.open()
        answers.put(index.migrations_applied)
    except Exception as error:  # the parent reports it
        answers.put(repr(error))
    finally:
        index.close()


def test_processes_opening_a_new_sqlite_store_at_once_all_open(tmp_path: Path) -> None:
    """Front ends start together on a new store: each opens it (the first
    makes the file and its write-ahead log; SQLite refuses the others that
    switch at the same moment without waiting), and one migrates."""
    forked = multiprocessing.get_context("fork")
    for trial in range(20):
        start, answers = forked.Barrier(6), forked.Queue()
        openers = [forked.Process(target=_open_new_store, args=(str(tmp_path / str(trial)), start, answers)) for _ in range(6)]
        for opener in openers:
            opener.start()
        for opener in openers:
            opener.join(60)
        results = sorted(str(answers.get(timeout=10)) for _ in openers)
        assert results == ["0"] * 5 + [str(len(MIGRATIONS))], (trial, results)
