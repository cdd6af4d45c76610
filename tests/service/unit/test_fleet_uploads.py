"""Resumable uploads of the fleet store (`service.store.uploads`, in parts) against
a real SeaweedFS and PostgreSQL (`fleet_servers`: skipped where none can be
run), each "replica" a store and uploads of its own over the same bucket and
database: bytes go to the store's objects as parts (through the same
`Blobs` as the models' content), the offset is what is recorded, any replica
continues, answers and imports an upload; one writer at a time (a dead
writer's lease is taken over, its last part never recorded); expiry and
removal leave no object (a PATCH writing a removed upload records nothing
more, and ends as a 404); another tenant's upload is missing; creations are
counted from the database; a storage that does not answer is
StorageUnavailable."""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from service.errors import (
    NotFound,
    StorageUnavailable,
    TenantQuotaExceeded,
    TooManyUploads,
    UploadBusy,
    UploadIncomplete,
    UploadOffsetMismatch,
)
from service.settings import Settings
from service.store.backends import open_store, resumable_uploads_for
from service.store.model_store import Store
from service.store.postgres.postgres_index import tenant_key
from service.store.s3.bucket_blobs import BucketBlobs
from service.store.s3.local_cache import LocalCache
from service.store.uploads import PART_BYTES, Appending, ResumableUploads

if TYPE_CHECKING:
    from fleet_servers import FleetServers  # tools/ (tests/support/fleet.py's fixture)

MIB = 1 << 20
Replica = Callable[..., ResumableUploads]


@pytest.fixture
def replica(fleet_servers: FleetServers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Replica]:
    """Makes the uploads of one replica of a fleet (a store of its own, over the test's bucket and database)."""
    for name, value in fleet_servers.environ.items():
        monkeypatch.setenv(name, value)
    shared = {"store": fleet_servers.new_store_url(), "database": fleet_servers.new_database()}
    stores: list[Store] = []

    def make(**settings: object) -> ResumableUploads:
        chosen = Settings(**{"store_min_free": 0, **shared, "cache_dir": tmp_path / f"replica-{len(stores)}", **settings})  # type: ignore[arg-type]
        store = open_store(chosen)
        store.open()
        stores.append(store)
        uploads = resumable_uploads_for(chosen, store)
        assert isinstance(uploads, ResumableUploads)
        uploads.open()
        return uploads

    yield make
    for store in stores:
        store.close()


def write(appending: Appending, data: bytes, chunk: int = MIB) -> float | None:
    """Consume `data` as a PATCH's body would arrive, then end the PATCH."""
    try:
        for start in range(0, len(data), chunk):
            appending.consume(data[start : start + chunk], None)
    finally:
        expires = appending.end()
    return expires


def objects(uploads: ResumableUploads) -> list[str]:
    """The keys of every object of every upload."""
    return sorted(uploads.blobs.keys("uploads/"))


def parts(uploads: ResumableUploads, upload_id: str) -> list[tuple[int, int]]:
    return uploads.rows.parts(upload_id)


def test_bytes_go_to_the_store_as_parts_and_any_replica_goes_on(replica: Replica, tmp_path: Path) -> None:
    first, second, third = replica(), replica(), replica()
    data = os.urandom(2 * PART_BYTES + 3 * MIB + 5)
    state = first.create("alice", len(data), "filename YS5vbm54", "a.onnx")
    folder = f"uploads/{tenant_key('alice')}/{state.upload_id}/"

    assert write(first.append("alice", state.upload_id, 0), data[: 5 * MIB]) is not None  # short of a part: a part of its own
    assert second.find("alice", state.upload_id).offset == 5 * MIB
    assert parts(first, state.upload_id) == [(1, 5 * MIB)] and objects(first) == [folder + "part-000001"]

    write(second.append("alice", state.upload_id, 5 * MIB), data[5 * MIB : 5 * MIB + PART_BYTES + MIB])  # a whole part, then the rest
    assert parts(second, state.upload_id) == [(1, 5 * MIB), (2, PART_BYTES), (3, MIB)]
    assert third.find("alice", state.upload_id).offset == 6 * MIB + PART_BYTES
    assert objects(first) == [folder + f"part-00000{number}" for number in (1, 2, 3)]

    with pytest.raises(UploadIncomplete):
        third.link_into("alice", state.upload_id, tmp_path / "early.onnx")
    write(third.append("alice", state.upload_id, 6 * MIB + PART_BYTES), data[6 * MIB + PART_BYTES :])
    assert first.find("alice", state.upload_id).complete
    size, sha256 = first.link_into("alice", state.upload_id, tmp_path / "model.onnx")
    assert (size, sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "model.onnx").read_bytes() == data
    size, sha256 = second.link_into("alice", state.upload_id, tmp_path / "again.onnx")  # an import asked again
    assert (size, sha256) == (len(data), hashlib.sha256(data).hexdigest())

    assert third.remove("alice", state.upload_id)
    assert objects(first) == []
    assert not first.remove("alice", state.upload_id)
    with pytest.raises(NotFound):
        second.find("alice", state.upload_id)


def test_a_patch_ending_exactly_on_a_part_puts_no_empty_part(replica: Replica, tmp_path: Path) -> None:
    uploads = replica()
    data = os.urandom(PART_BYTES + 100)
    state = uploads.create("alice", len(data), "", "")
    write(uploads.append("alice", state.upload_id, 0), data[:PART_BYTES])
    assert uploads.find("alice", state.upload_id).offset == PART_BYTES
    assert parts(uploads, state.upload_id) == [(1, PART_BYTES)] and len(objects(uploads)) == 1
    write(uploads.append("alice", state.upload_id, PART_BYTES), b"")  # a PATCH with no bytes puts nothing
    assert parts(uploads, state.upload_id) == [(1, PART_BYTES)]
    write(uploads.append("alice", state.upload_id, PART_BYTES), data[PART_BYTES:])
    assert uploads.link_into("alice", state.upload_id, tmp_path / "m") == (len(data), hashlib.sha256(data).hexdigest())
    empty = uploads.create("alice", 0, "", "")
    assert uploads.find("alice", empty.upload_id).complete
    assert uploads.link_into("alice", empty.upload_id, tmp_path / "empty") == (0, hashlib.sha256(b"").hexdigest())


def test_one_writer_at_a_time_and_a_dead_writers_lease_is_taken_over(replica: Replica) -> None:
    first, second = replica(), replica()
    state = first.create("alice", 3 * PART_BYTES, "", "")
    folder = f"uploads/{tenant_key('alice')}/{state.upload_id}/"
    holding = first.append("alice", state.upload_id, 0)
    with pytest.raises(UploadBusy):  # any replica, without waiting
        second.append("alice", state.upload_id, 0)
    write(holding, b"x" * 1000)
    with pytest.raises(UploadOffsetMismatch) as mismatch:
        second.append("alice", state.upload_id, 0)
    assert mismatch.value.offset == 1000

    first.rows.lease_seconds = 0.5  # the writer below dies: its lease lapses this soon
    dead = first.append("alice", state.upload_id, 1000)
    data = os.urandom(PART_BYTES + MIB)
    for start in range(0, len(data), MIB):
        dead.consume(data[start : start + MIB], None)  # a part put, 1 MiB more buffered: then it dies
    assert second.find("alice", state.upload_id).offset == 1000 + PART_BYTES  # what is recorded, not what was buffered
    with pytest.raises(UploadBusy):
        second.append("alice", state.upload_id, 1000 + PART_BYTES)
    time.sleep(0.6)
    taking_over = second.append("alice", state.upload_id, 1000 + PART_BYTES)
    with pytest.raises(UploadBusy):  # the dead writer's last bytes are not recorded, their part not kept
        dead.end()
    write(taking_over, b"y" * 10)
    assert [number for number, _ in parts(first, state.upload_id)] == [1, 2, 4]  # 3 was the dead one's
    assert folder + "part-000003" not in objects(first)
    assert first.find("alice", state.upload_id).offset == 1000 + PART_BYTES + 10


def test_expiry_and_removal_leave_no_object(replica: Replica) -> None:
    uploads = replica()  # writes, and removes (its uploads last an hour)
    sweeper, other = replica(upload_expiry=1.0), replica(upload_expiry=1.0)  # a second after the last write, they are gone
    kept = [uploads.create("alice", 2 * PART_BYTES, "", "") for _ in range(3)]
    for state in kept:
        write(uploads.append("alice", state.upload_id, 0), os.urandom(PART_BYTES + MIB))  # two parts
    assert len(objects(uploads)) == 6
    assert uploads.remove("alice", kept[0].upload_id)
    assert len(objects(uploads)) == 4
    time.sleep(1.2)
    with pytest.raises(NotFound):  # an expired upload is missing, and removed as it is met
        other.find("alice", kept[1].upload_id)
    with pytest.raises(NotFound):
        other.append("alice", kept[2].upload_id, PART_BYTES + MIB)
    assert uploads.sweep() + sweeper.sweep() + other.sweep() == 0
    assert objects(uploads) == []

    late = uploads.create("alice", 10, "", "")
    write(uploads.append("alice", late.upload_id, 0), b"01234")
    time.sleep(1.2)
    assert uploads.sweep() == 0
    assert sweeper.sweep() + other.sweep() == 1  # two replicas sweeping: removed once
    assert objects(uploads) == [] and uploads.rows.get(tenant_key("alice"), late.upload_id) is None


def test_a_removal_while_a_patch_writes_is_seen_by_the_patch(replica: Replica) -> None:
    first, second = replica(), replica()
    for sent_before in (0, PART_BYTES):  # removed before its first part, and after
        state = first.create("alice", 3 * PART_BYTES, "", "")
        writing = first.append("alice", state.upload_id, 0)
        for _ in range((sent_before + MIB) // MIB):
            writing.consume(os.urandom(MIB), None)
        assert second.remove("alice", state.upload_id)
        with pytest.raises(NotFound):  # its next part records nothing
            for _ in range(PART_BYTES // MIB):
                writing.consume(os.urandom(MIB), None)
        assert writing.end() is None  # the PATCH answers 404
    assert objects(first) == []  # the part put after the removal went too


def test_another_tenants_upload_is_missing(replica: Replica, tmp_path: Path) -> None:
    uploads = replica()
    state = uploads.create("alice", 5, "", "")
    write(uploads.append("alice", state.upload_id, 0), b"01234")
    for tenant, upload_id in (("bob", state.upload_id), ("alice", "0" * 32), ("alice", "../x")):
        with pytest.raises(NotFound):
            uploads.find(tenant, upload_id)
        with pytest.raises(NotFound):
            uploads.append(tenant, upload_id, 0)
        with pytest.raises(NotFound):
            uploads.link_into(tenant, upload_id, tmp_path / "m")
        if "/" in upload_id:
            with pytest.raises(NotFound):
                uploads.remove(tenant, upload_id)
        else:
            assert not uploads.remove(tenant, upload_id)
    assert uploads.find("alice", state.upload_id).complete


def test_creations_are_counted_across_replicas(replica: Replica) -> None:
    first = replica(max_open_uploads=2, tenant_max_bytes=1000)
    second = replica(max_open_uploads=2, tenant_max_bytes=1000)
    first.create("alice", 400, "", "")
    with pytest.raises(TenantQuotaExceeded) as refused:
        second.create("alice", 700, "", "")
    assert refused.value.limit == "tenant_max_bytes"
    second.create("alice", 500, "", "")
    with pytest.raises(TooManyUploads):
        first.create("alice", 1, "", "")
    second.create("bob", 900, "", "")
    assert first.reserved() == second.reserved() == 1800


def test_object_storage_that_does_not_answer_is_storage_unavailable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once closed
    environ = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    blobs = BucketBlobs("bucket", "prefix", LocalCache(tmp_path / "cache", 1 << 20))
    part = tmp_path / "part"
    part.write_bytes(b"bytes")
    with pytest.raises(StorageUnavailable) as refused:
        blobs.put("uploads/x/part-000001", part)
    assert "127.0.0.1" not in refused.value.detail and "bucket" not in refused.value.detail


def test_gc_full_removes_the_objects_of_uploads_no_row_names(replica: Replica) -> None:
    """A part a PATCH put while another replica removed its upload (the row
    gone first) is named by no row: `gc --full` removes it; a live upload's
    objects stay."""
    uploads = replica()
    live, gone = (uploads.create("alice", 2 * PART_BYTES, "", "") for _ in range(2))
    for state in (live, gone):
        write(uploads.append("alice", state.upload_id, 0), os.urandom(PART_BYTES + MIB))  # two parts
    assert uploads.rows.delete(gone.upload_id)  # its objects left behind, as by the race
    folder = f"uploads/{tenant_key('alice')}/{gone.upload_id}/"
    assert uploads.collect_orphans() == [folder]
    assert not any(key.startswith(folder) for key in objects(uploads))
    assert len(objects(uploads)) == 2
    assert uploads.collect_orphans() == []
    assert uploads.find("alice", live.upload_id).offset == PART_BYTES + MIB
