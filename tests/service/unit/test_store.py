"""The store's policy (`service.store.model_store.Store`) over each backend:
commits, sharing between tenants, caps, eviction, release, graphs, each
tenant's own check runs, garbage collection. In process, on the local folder backend, a
fleet's (S3 and PostgreSQL) and a third the tests add in one module
(`support.flat_blobs`: another layout of a folder's bytes) alike."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from support.flat_blobs import FlatBlobs

from service.__main__ import main
from service.errors import ImportTooLarge, StorageUnavailable, StoreFull, TenantQuotaExceeded
from service.settings import Settings
from service.store.backends import open_store, store_over
from service.store.layout import ModelFolder
from service.store.model_store import START_GRACE_SECONDS, Store
from service.store.records import SourceFile, StoredRecord, TenantRecord
from service.store.sqlite.sqlite_index import SqliteIndex
from service.store.work_area import WorkArea

if TYPE_CHECKING:
    from fleet_servers import FleetServers  # tools/ (tests/support/fleet.py's fixture)

MIB = 1 << 20
# The store over each backend: the local folder (with its SQLite index), a
# fleet's (objects in a real SeaweedFS, the index in a real PostgreSQL), and
# the tests' own flat folder of bytes (with the SQLite index).
BACKENDS = ("local", "fleet", "flat")
MakeStore = Callable[..., Store]


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def make_store(request: pytest.FixtureRequest, backend: str, monkeypatch: pytest.MonkeyPatch) -> MakeStore:
    """Opens a store of this backend in `folder` (its local folder: the store, or a fleet's cache)."""

    def make(folder: Path, **settings: int) -> Store:
        chosen: dict[str, object] = {"store_min_free": 0, **settings}
        if backend == "fleet":
            fleet = request.getfixturevalue("fleet_servers")
            for name, value in fleet.environ.items():
                monkeypatch.setenv(name, value)
            chosen.update(store=fleet.new_store_url(), database=fleet.new_database(), cache_dir=folder / "cache")
        else:
            chosen.update(store=str(folder / "store"))
        made = Settings(**chosen)  # type: ignore[arg-type]
        if backend == "flat":  # the tests' own backend of bytes: the service's index and policy over it
            root = Path(made.store)
            store = store_over(made, FlatBlobs(root / "flat"), SqliteIndex(root), WorkArea(root / "tmp"))
        else:
            store = open_store(made)
        store.open()
        return store

    return make


@pytest.fixture
def store(tmp_path: Path, make_store: MakeStore) -> Iterator[Store]:
    store = make_store(tmp_path)
    yield store
    store.close()


def commit(store: Store, tenant: str, content: bytes, name: str = "m.onnx") -> tuple[str, bool]:
    """Store `content` as an uploaded model for `tenant`: (its id, new for the tenant)."""
    model_id = hashlib.sha256(content).hexdigest()
    with store.work_folder() as work:
        work.files.mkdir()
        work.upload_model.write_bytes(content)
        info = os.stat(work.upload_model)
        item = SourceFile(path="files/model.onnx", in_store=True, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino)
        record = StoredRecord(
            id=model_id, input=name, created_ns=time.time_ns(), model_size=len(content),
            model_sha256=model_id, tensor_count=0, files={"model": item},
        )  # fmt: skip
        owner = TenantRecord(tenant=tenant, input=name, created_ns=time.time_ns())
        created = store.commit(work, model_id, record, b'{"input":"%s"}' % name.encode(), owner)
    return model_id, created


def test_a_commit_is_visible_to_its_tenant_only(store: Store) -> None:
    model_id, created = commit(store, "alice", b"model one")
    assert created
    assert store.visible("alice", model_id)
    assert not store.visible("bob", model_id)
    assert store.has(model_id)
    assert store.summary(model_id) == b'{"input":"m.onnx"}'
    holding = store.holding("alice", model_id)
    assert holding is not None and holding.input == "m.onnx"
    assert [listed for _, listed in store.list_models("alice", None, 10)] == [model_id]
    assert store.list_models("bob", None, 10) == []


def test_a_stored_model_reads_back_whole_and_is_gone_once_released(store: Store) -> None:
    """What the routes read: the tensor file by range, the files for a worker,
    the catalogue and the graph as local files; after the release, none of it."""
    content = b"the model's bytes " * 1000
    model_id, _ = commit(store, "alice", content)
    record = store.read_record(model_id)
    assert record is not None and record.place.startswith(model_id + "/")  # a place of its own
    source = store.open_file(record, record.files["model"])
    try:
        assert source.read(0, len(content)) == content and source.read(5, 9) == content[5:14]
    finally:
        source.close()
    with store.model_files(model_id) as folder:
        assert folder.upload_model.read_bytes() == content
    with store.work_folder() as work:
        work.graph.write_bytes(b'{"graph":true}')
        assert store.add_graph(model_id, work.graph, "alice")
    graph = store.open_graph(model_id)
    try:
        assert os.read(graph, 100) == b'{"graph":true}'
    finally:
        os.close(graph)
    assert store.release("alice", model_id)
    assert store.content.places() == []
    with pytest.raises(FileNotFoundError):
        store.content.summary(record.place)
    with pytest.raises(FileNotFoundError), store.content.model_files(record.place):
        pass


def test_the_same_content_is_stored_once_and_held_by_each_tenant(store: Store) -> None:
    model_id, _ = commit(store, "alice", b"shared bytes")
    used = store.usage()
    again, created = commit(store, "alice", b"shared bytes")
    assert (again, created) == (model_id, False)
    _, created_for_bob = commit(store, "bob", b"shared bytes", "bobs.onnx")
    assert created_for_bob
    assert store.model_count() == 1
    assert store.usage() == used
    bobs = store.holding("bob", model_id)
    assert bobs is not None and bobs.input == "bobs.onnx"  # each tenant's own name
    assert store.tenant_usage("alice") == store.tenant_usage("bob") == (used, 1)


def test_release_keeps_content_another_tenant_holds(store: Store) -> None:
    model_id, _ = commit(store, "alice", b"kept while held")
    commit(store, "bob", b"kept while held")
    assert store.release("alice", model_id)
    assert not store.visible("alice", model_id)
    assert store.visible("bob", model_id)
    assert not store.release("alice", model_id)  # not held any more
    assert store.release("bob", model_id)
    assert not store.has(model_id)
    assert store.usage() == 0
    assert store.model_count() == 0


def test_a_tenant_past_its_model_cap_is_refused(tmp_path: Path, make_store: MakeStore) -> None:
    store = make_store(tmp_path, tenant_max_models=1)
    try:
        commit(store, "alice", b"first")
        with pytest.raises(TenantQuotaExceeded) as refused:
            commit(store, "alice", b"second")
        assert refused.value.limit == "tenant_max_models"
        commit(store, "bob", b"second")  # another tenant's share is its own
        commit(store, "alice", b"first")  # held already: no new model
    finally:
        store.close()


def test_a_tenant_past_its_byte_cap_is_refused(tmp_path: Path, make_store: MakeStore) -> None:
    store = make_store(tmp_path, tenant_max_bytes=3000)
    try:
        commit(store, "alice", b"a" * 1000)
        with pytest.raises(TenantQuotaExceeded) as refused:
            commit(store, "alice", b"b" * 2500)
        assert refused.value.limit == "tenant_max_bytes"
    finally:
        store.close()


def test_an_import_over_its_cap_or_the_stores_is_refused(tmp_path: Path, make_store: MakeStore) -> None:
    store = make_store(tmp_path, max_import_bytes=MIB, store_max_bytes=2 * MIB)
    try:
        with pytest.raises(ImportTooLarge) as too_large:
            commit(store, "alice", b"x" * (MIB + 1))
        assert too_large.value.limit == "max_import_bytes"
        assert store.usage() == 0
    finally:
        store.close()
    store = make_store(tmp_path / "second", max_import_bytes=4 * MIB, store_max_bytes=MIB)
    try:
        with pytest.raises(StoreFull):
            commit(store, "alice", b"x" * (MIB + 1))
    finally:
        store.close()


def test_eviction_takes_the_least_recently_used_of_the_tenants_own(tmp_path: Path, make_store: MakeStore) -> None:
    store = make_store(tmp_path, store_max_bytes=MIB)
    try:
        oldest, _ = commit(store, "alice", b"1" * 300_000)
        bobs, _ = commit(store, "bob", b"2" * 300_000)
        newer, _ = commit(store, "alice", b"3" * 300_000)
        time.sleep(0.02)  # a last use apart from the commits' (file times are coarse)
        store.touch(oldest)  # used again: now newer is alice's least recently used
        time.sleep(0.02)
        latest, _ = commit(store, "alice", b"4" * 300_000)
        assert store.has(latest) and store.has(oldest)
        assert not store.has(newer)  # alice's least recently used went
        assert store.has(bobs)  # never a model of another tenant within its quota
        assert not store.visible("alice", newer)
        assert store.usage() <= MIB
    finally:
        store.close()


def test_a_graph_is_added_once_and_counted(tmp_path: Path, store: Store) -> None:
    model_id, _ = commit(store, "alice", b"with a graph")
    commit(store, "bob", b"with a graph")
    before = store.usage()
    for tenant, document in (("alice", b'{"graph":1}'), ("bob", b'{"graph":2}')):
        with store.work_folder() as work:
            work.graph.write_bytes(document)
            assert store.add_graph(model_id, work.graph, tenant)
        assert store.graph_rendered(tenant, model_id)
    graph = store.open_graph(model_id)
    try:
        assert os.read(graph, 100) == b'{"graph":1}'  # the first render stays
    finally:
        os.close(graph)
    assert store.usage() == before + len(b'{"graph":1}')
    with store.work_folder() as work:
        work.graph.write_bytes(b"{}")
        assert not store.add_graph(model_id, work.graph, "carol")  # carol holds no such model


def test_refreshed_sources_change_only_data_root_files(store: Store) -> None:
    model_id, _ = commit(store, "alice", b"refresh")
    record = store.read_record(model_id)
    assert record is not None
    moved = SourceFile(path="files/model.onnx", in_store=True, size=1, mtime_ns=2, inode=3)
    store.refresh_sources(model_id, {"model": moved})
    assert store.read_record(model_id) == record  # files in the store are never replaced


def test_a_listing_pages_newest_first(store: Store) -> None:
    ids = [commit(store, "alice", f"model {n}".encode())[0] for n in range(5)]
    first = store.list_models("alice", None, 2)
    assert [model_id for _, model_id in first] == ids[::-1][:2]
    rest = store.list_models("alice", first[-1], 10)
    assert [model_id for _, model_id in rest] == ids[::-1][2:]


def test_content_without_a_record_is_removed_at_start(tmp_path: Path) -> None:
    """A commit cut short between installing the content and recording it (local store)."""
    settings = Settings(store=str(tmp_path / "store"), store_min_free=0)
    store = open_store(settings)
    store.open()
    model_id, _ = commit(store, "alice", b"complete")
    store.close()
    orphan = tmp_path / "store" / "models" / ("0" * 64)
    (orphan / "files").mkdir(parents=True)
    (orphan / "files" / "model.onnx").write_bytes(b"half")
    store = open_store(settings)
    store.open()
    try:
        assert not orphan.exists()
        assert store.has(model_id)
    finally:
        store.close()


def test_a_fleet_start_lists_no_object_gc_full_does(
    tmp_path: Path, fleet_servers: FleetServers, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replica's start and the plain gc remove the garbage the index's marks
    tell of, listing nothing; `gc --full` lists the bucket and removes
    content no record names that no mark tells of (left by an older version)."""
    for name, value in fleet_servers.environ.items():
        monkeypatch.setenv(name, value)
    store_url, database = fleet_servers.new_store_url(), fleet_servers.new_database()
    flags: dict[str, Any] = {"store": store_url, "database": database, "cache_dir": tmp_path / "cache"}
    first = open_store(Settings(store_min_free=0, **flags))
    first.open()
    kept, _ = commit(first, "alice", b"kept")
    unmarked, in_flight = first.content.new_place(kept), first.content.new_place(kept)
    with first.work_folder() as work:
        work.files.mkdir()
        work.upload_model.write_bytes(b"uploaded, never recorded")
        first.content.prepare(unmarked, work)  # puts take the work folder's files
        work.upload_model.write_bytes(b"uploaded, never recorded")
        first.index.begin_upload(in_flight)  # a commit's mark: its replica killed after the upload
        first.content.prepare(in_flight, work)
    first.close()

    second = open_store(Settings(store_min_free=0, **flags))
    listings: list[str] = []
    places = second.content.places

    def listed() -> list[str]:
        listings.append("listed")
        return places()

    monkeypatch.setattr(second.content, "places", listed)
    second.open()
    try:
        record = second.read_record(kept)
        assert record is not None and set(places()) == {record.place, unmarked, in_flight}  # in flight: within its grace
        assert second.collect_garbage(0) == [in_flight]  # the plain gc, its grace passed
        assert listings == [] and set(places()) == {record.place, unmarked}
    finally:
        second.close()
    arguments = ["--store", store_url, "--database", database, "--cache-dir", str(tmp_path / "gc")]
    assert main(["gc", *arguments]) == 0 and "removed 0 unrecorded contents" in capsys.readouterr().out
    assert main(["gc", "--full", *arguments]) == 0
    assert capsys.readouterr().out.split() == ["removed", "1", "unrecorded", "contents", unmarked]
    assert set(places()) == {record.place}


@pytest.mark.parametrize("backend", ["fleet"])
def test_a_removal_cut_short_is_collected_by_gc(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A DELETE whose process died after dropping the record, before its objects went."""
    model_id, _ = commit(store, "alice", b"removed")
    record = store.read_record(model_id)
    assert record is not None
    remove = store.content.remove

    def cut_short(place: str) -> Callable[[], None]:
        remove(place)

        def killed() -> None:
            raise KeyboardInterrupt

        return killed

    monkeypatch.setattr(store.content, "remove", cut_short)
    with pytest.raises(KeyboardInterrupt):
        store.release("alice", model_id)
    monkeypatch.setattr(store.content, "remove", remove)
    assert not store.has(model_id) and store.content.places() == [record.place]
    assert store.collect_garbage(3600) == []  # within its grace: the removal may still be running
    assert store.collect_garbage(0) == [record.place]
    assert store.content.places() == []


@pytest.mark.parametrize("backend", ["fleet"])
def test_a_removal_whose_objects_cannot_be_deleted_now_is_done_and_gc_deletes_them(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Object storage stops answering between a DELETE's record going and its objects going."""
    model_id, _ = commit(store, "alice", b"removed while S3 is down")
    record = store.read_record(model_id)
    assert record is not None
    remove = store.content.remove

    def unanswered(place: str) -> Callable[[], None]:
        remove(place)

        def delete() -> None:
            raise StorageUnavailable("object storage does not answer")

        return delete

    monkeypatch.setattr(store.content, "remove", unanswered)
    assert store.release("alice", model_id)  # the DELETE is done: the model is gone for every tenant
    monkeypatch.setattr(store.content, "remove", remove)
    assert not store.has(model_id) and store.content.places() == [record.place]
    assert store.collect_garbage(0) == [record.place]
    assert store.content.places() == []


def test_the_work_area_is_empty_after_each_request(store: Store) -> None:
    commit(store, "alice", b"tidy")
    with store.work_folder() as work:
        (work.root / "partial").write_bytes(b"x")
    leftovers = [path for path in store.work_area.temporary_files() if not path.name.startswith("copy-")]
    assert leftovers == []


def test_below_the_floor_an_import_may_start_only_if_eviction_could_restore_it(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before an import's size is known nothing is evicted: it may go on while
    evicting what the tenant may evict would bring the file system back above
    its floor (content on this disk; content on object storage or in memory
    frees nothing here), and is refused otherwise, everything kept."""
    first, _ = commit(store, "alice", b"kept or evicted" * 1000)
    second, _ = commit(store, "alice", b"kept too" * 1000)
    bobs, _ = commit(store, "bob", b"bob's own" * 100_000)
    free = 1 << 30
    monkeypatch.setattr(store, "free_bytes", lambda: free)
    store.min_free = free + store.usage() - 100_000  # only bob's 900 KB would reach it: not alice's to evict
    assert not store.floor_reachable("alice")
    store.min_free = free + 20_000  # alice's two models (23 KB) would
    assert store.floor_reachable("alice") is store.content.on_local_disk
    assert all(store.has(model_id) for model_id in (first, second, bobs))


LOCAL_FREE = 10 << 20  # the file system's free bytes the next tests pretend, less what the store holds


def local_store(folder: Path, monkeypatch: pytest.MonkeyPatch, **settings: int) -> Store:
    """A local store whose file system has LOCAL_FREE bytes less its models' free:
    evicting a model frees its bytes, as on a disk."""
    store = open_store(Settings(store=str(folder / "store"), **{"store_min_free": 0, **settings}))  # type: ignore[arg-type]
    store.open()
    monkeypatch.setattr(store, "free_bytes", lambda: LOCAL_FREE - store.usage())
    return store


def test_a_commit_evicts_only_what_the_floor_needs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = local_store(tmp_path, monkeypatch)
    try:
        models = []
        for seed in range(4):
            models.append(commit(store, "alice", bytes([seed]) * 300_000)[0])
            time.sleep(0.02)  # a last use apart from the others' (file times are coarse)
        store.min_free = LOCAL_FREE - store.usage() + 450_000  # 450 KB short: two of alice's 300 KB models
        latest, _ = commit(store, "alice", b"new" * 1000)
        assert [store.has(model_id) for model_id in models] == [False, False, True, True]  # the least recently used, and no more
        assert store.has(latest)
    finally:
        store.close()


def test_a_commit_refused_for_room_evicts_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's store that evicted all it could and still answered 507: now
    the 507 comes first, and every model stays (another tenant's within its
    quota may not be evicted, and the tenant's own would not be enough)."""
    store = local_store(tmp_path, monkeypatch)
    try:
        alices = [commit(store, "alice", bytes([seed]) * 300_000)[0] for seed in range(2)]
        bobs, _ = commit(store, "bob", b"b" * 2_000_000)
        store.min_free = LOCAL_FREE - store.usage() + 700_000  # alice's 600 KB would not reach it
        with pytest.raises(StoreFull) as refused:
            commit(store, "alice", b"new" * 1000)
        assert "nothing was evicted" in refused.value.detail
        assert all(store.has(model_id) for model_id in (*alices, bobs))
        assert store.model_count() == 3
        # a graph added under the same floor: refused alike, nothing evicted
        with store.work_folder() as work:
            work.graph.write_bytes(b"{}")
            with pytest.raises(StoreFull):
                store.add_graph(alices[0], work.graph, "alice")
        assert store.model_count() == 3
    finally:
        store.close()


def test_runs_are_the_holders_own(store: Store) -> None:
    model_id, _ = commit(store, "alice", b"shared bytes")
    commit(store, "bob", b"shared bytes")
    assert store.checks("alice", model_id) is None
    assert store.keep_checks("alice", model_id, b'{"alice": 1}')
    assert store.checks("alice", model_id) == b'{"alice": 1}'
    assert store.checks("bob", model_id) is None
    assert store.keep_checks("bob", model_id, b'{"bob": 1}')
    assert store.keep_checks("bob", model_id, b'{"bob": 2}')  # replaced whole
    assert (store.checks("alice", model_id), store.checks("bob", model_id)) == (b'{"alice": 1}', b'{"bob": 2}')
    assert not store.keep_checks("carol", model_id, b"{}")  # carol holds nothing
    assert store.checks("carol", model_id) is None


def test_runs_go_with_the_holding(store: Store) -> None:
    model_id, _ = commit(store, "alice", b"shared bytes")
    commit(store, "bob", b"shared bytes")
    store.keep_checks("alice", model_id, b'{"alice": 1}')
    store.keep_checks("bob", model_id, b'{"bob": 1}')
    assert store.release("alice", model_id)
    assert store.checks("alice", model_id) is None and store.checks("bob", model_id) == b'{"bob": 1}'
    commit(store, "alice", b"shared bytes")  # held again: no runs until its import keeps them
    assert store.checks("alice", model_id) is None


def test_an_evicted_models_runs_are_gone(tmp_path: Path, make_store: MakeStore) -> None:
    store = make_store(tmp_path, store_max_bytes=1 << 20)
    try:
        first, _ = commit(store, "alice", b"a" * 600_000)
        store.keep_checks("alice", first, b'{"first": 1}')
        commit(store, "alice", b"b" * 600_000)  # takes the store past its cap: the first goes
        assert not store.has(first)
        assert store.checks("alice", first) is None
    finally:
        store.close()


@pytest.mark.parametrize("backend", ["fleet"])  # the local folder's commits install under the lock: nothing in flight
def test_a_commit_that_begins_while_gc_full_lists_is_not_garbage(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another replica begins a commit, its objects uploaded, while `gc --full`
    lists the content: gc must not take them (it would delete what the commit
    then records: an acknowledged import lost)."""
    listing, prepare = store.content.places, store.content.prepare
    prepared, collected = threading.Event(), threading.Event()
    outcome: list[object] = []

    def prepare_then_wait(place: str, work: ModelFolder) -> None:
        prepare(place, work)
        prepared.set()
        collected.wait(30)

    def commit_elsewhere() -> None:
        try:
            outcome.append(commit(store, "alice", b"committed while gc lists"))
        except Exception as error:  # reported below
            outcome.append(error)

    def places_while_a_commit_begins() -> list[str]:
        monkeypatch.setattr(store.content, "prepare", prepare_then_wait)
        threading.Thread(target=commit_elsewhere).start()
        assert prepared.wait(30)
        return listing()

    monkeypatch.setattr(store.content, "places", places_while_a_commit_begins)
    assert store.collect_garbage(START_GRACE_SECONDS, full=True) == []
    collected.set()
    deadline = time.monotonic() + 30
    while not outcome and time.monotonic() < deadline:
        time.sleep(0.01)
    assert outcome and isinstance(outcome[0], tuple), outcome
    model_id, created = outcome[0]
    assert created and store.summary(model_id) == b'{"input":"m.onnx"}'


@pytest.mark.parametrize("backend", ["fleet"])
def test_a_commit_whose_content_gc_took_is_refused_never_recorded(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gc whose grace is shorter than a commit's upload (`gc --grace-seconds 0`) takes
    the commit's content: the commit answers 503, it never records a model whose objects are going."""
    prepare = store.content.prepare

    def prepare_then_gc(place: str, work: ModelFolder) -> None:
        prepare(place, work)
        assert store.collect_garbage(0) == [place]

    monkeypatch.setattr(store.content, "prepare", prepare_then_gc)
    with pytest.raises(StorageUnavailable, match="taken as garbage"):
        commit(store, "alice", b"taken by gc")
    assert store.model_count() == 0 and store.content.places() == []
    monkeypatch.setattr(store.content, "prepare", prepare)
    model_id, created = commit(store, "alice", b"taken by gc")  # posted again
    assert created and store.summary(model_id)


def test_what_a_process_leaves_in_its_work_area_is_listed_but_a_readiness_probe_being_written(tmp_path: Path) -> None:
    """The readiness check writes and removes a probe file every few seconds: a
    listing that meets it mid-write (the probe, or the temporary file it is
    written through) must not count it as something a request left behind."""
    area = WorkArea(tmp_path / "tmp")
    area.open()
    try:
        assert area.writable() and area.temporary_files() == []
        left = area.folder / "upload-1" / "model.onnx"
        left.parent.mkdir()
        left.write_bytes(b"x")
        (area.folder / "probe-0123").write_bytes(b"ok")
        (area.folder / ".probe-0123.4567.tmp").write_bytes(b"ok")
        assert area.temporary_files() == [left.parent, left]
    finally:
        area.close()
