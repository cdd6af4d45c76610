"""Resumable uploads of the fleet store (`service.store.fleet_uploads`) against
a real SeaweedFS and PostgreSQL (`fleet_servers`: skipped where none can be
run), each "replica" a store and uploads of its own over the same bucket and
database: bytes go to S3 as multipart parts and an incomplete part, the
offset is what is durable, any replica continues, answers and imports an
upload; one writer at a time (a dead writer's lease is taken over); expiry
and removal abort the multipart upload and leave no object (a PATCH writing
a removed upload records nothing more, and ends as a 404); another tenant's
upload is missing; creations are counted from the database; a storage that
does not answer is StorageUnavailable."""

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
from service.store.fleet_uploads import PART_BYTES, FleetAppending, FleetUploads
from service.store.model_store import Store
from service.store.postgres.index import tenant_key
from service.store.s3.multipart import Multipart

if TYPE_CHECKING:
    from fleet_servers import FleetServers  # tools/ (tests/support/fleet.py's fixture)

MIB = 1 << 20
Replica = Callable[..., FleetUploads]


@pytest.fixture
def replica(fleet_servers: FleetServers, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Replica]:
    """Makes the uploads of one replica of a fleet (a store of its own, over the test's bucket and database)."""
    for name, value in fleet_servers.environ.items():
        monkeypatch.setenv(name, value)
    shared = {"store": fleet_servers.new_store_url(), "database": fleet_servers.new_database()}
    stores: list[Store] = []

    def make(**settings: object) -> FleetUploads:
        chosen = Settings(**{"store_min_free": 0, **shared, "cache_dir": tmp_path / f"replica-{len(stores)}", **settings})  # type: ignore[arg-type]
        store = open_store(chosen)
        store.open()
        stores.append(store)
        uploads = resumable_uploads_for(chosen, store)
        assert isinstance(uploads, FleetUploads)
        uploads.open()
        return uploads

    yield make
    for store in stores:
        store.close()


def write(appending: FleetAppending, data: bytes, chunk: int = MIB) -> float | None:
    """Consume `data` as a PATCH's body would arrive, then end the PATCH."""
    try:
        for start in range(0, len(data), chunk):
            appending.consume(data[start : start + chunk], None)
    finally:
        expires = appending.end()
    return expires


def objects(uploads: FleetUploads) -> list[str]:
    """The keys (below the store's prefix) of every object of every upload."""
    listed = uploads.objects.client.list_objects_v2(Bucket=uploads.objects.bucket, Prefix=uploads.objects.key("uploads/"))
    return sorted(item["Key"].removeprefix(uploads.objects.key("")) for item in listed.get("Contents", []))


def test_bytes_go_to_the_bucket_as_parts_and_an_incomplete_part_and_any_replica_goes_on(replica: Replica, tmp_path: Path) -> None:
    first, second, third = replica(), replica(), replica()
    data = os.urandom(2 * PART_BYTES + 3 * MIB + 5)
    state = first.create("alice", len(data), "filename YS5vbm54", "a.onnx")
    folder = f"uploads/{tenant_key('alice')}/{state.upload_id}/"

    assert write(first.append("alice", state.upload_id, 0), data[: 5 * MIB]) is not None  # short of a part
    assert second.find("alice", state.upload_id).offset == 5 * MIB
    assert first.rows.parts(state.upload_id) == [] and len(objects(first)) == 1  # the incomplete part, alone
    assert objects(first)[0].startswith(folder + "incomplete-")

    write(second.append("alice", state.upload_id, 5 * MIB), data[5 * MIB : 11 * MIB])  # the incomplete part first, then a part
    assert [(number, size) for number, _, size in second.rows.parts(state.upload_id)] == [(1, PART_BYTES)]
    assert third.find("alice", state.upload_id).offset == 11 * MIB
    assert second.rows.get(tenant_key("alice"), state.upload_id).incomplete == 11 * MIB - PART_BYTES  # type: ignore[union-attr]
    assert len(objects(first)) == 1  # the incomplete part taken in was deleted, the new one kept
    assert [key for key, _ in first.objects.uploads(folder)] == [folder + "data"]

    with pytest.raises(UploadIncomplete):
        third.link_into("alice", state.upload_id, tmp_path / "early.onnx")
    write(third.append("alice", state.upload_id, 11 * MIB), data[11 * MIB :])  # the last part may be short
    assert first.find("alice", state.upload_id).complete
    size, sha256 = first.link_into("alice", state.upload_id, tmp_path / "model.onnx")
    assert (size, sha256) == (len(data), hashlib.sha256(data).hexdigest())
    assert (tmp_path / "model.onnx").read_bytes() == data
    size, sha256 = second.link_into("alice", state.upload_id, tmp_path / "again.onnx")  # an import asked again: completed once
    assert (size, sha256) == (len(data), hashlib.sha256(data).hexdigest())

    assert third.remove("alice", state.upload_id)
    assert objects(first) == [] and first.objects.uploads("uploads/") == []
    assert not first.remove("alice", state.upload_id)
    with pytest.raises(NotFound):
        second.find("alice", state.upload_id)


def test_a_patch_ending_exactly_on_a_part_leaves_no_incomplete_part(replica: Replica, tmp_path: Path) -> None:
    uploads = replica()
    data = os.urandom(PART_BYTES + 100)
    state = uploads.create("alice", len(data), "", "")
    write(uploads.append("alice", state.upload_id, 0), data[:PART_BYTES])
    assert uploads.find("alice", state.upload_id).offset == PART_BYTES
    assert objects(uploads) == []  # the part only (not an object yet)
    write(uploads.append("alice", state.upload_id, PART_BYTES), data[PART_BYTES:])
    assert uploads.link_into("alice", state.upload_id, tmp_path / "m") == (len(data), hashlib.sha256(data).hexdigest())
    empty = uploads.create("alice", 0, "", "")
    assert uploads.find("alice", empty.upload_id).complete
    assert uploads.link_into("alice", empty.upload_id, tmp_path / "empty") == (0, hashlib.sha256(b"").hexdigest())


def test_one_writer_at_a_time_and_a_dead_writers_lease_is_taken_over(replica: Replica) -> None:
    first, second = replica(), replica()
    state = first.create("alice", 3 * PART_BYTES, "", "")
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
        dead.consume(data[start : start + MIB], None)  # a part sent (the incomplete part first), 1 MiB more buffered: then it dies
    assert second.find("alice", state.upload_id).offset == PART_BYTES  # what is durable, not what was buffered
    with pytest.raises(UploadBusy):
        second.append("alice", state.upload_id, PART_BYTES)
    time.sleep(0.6)
    taking_over = second.append("alice", state.upload_id, PART_BYTES)
    with pytest.raises(UploadBusy):  # the dead writer's last bytes are not recorded
        dead.end()
    write(taking_over, b"y" * 10)
    assert [number for number, _, _ in first.rows.parts(state.upload_id)] == [1]
    assert first.rows.get(tenant_key("alice"), state.upload_id).next_part == 3  # type: ignore[union-attr]  # 2 was the dead one's
    assert first.find("alice", state.upload_id).offset == PART_BYTES + 10


def test_expiry_and_removal_abort_the_multipart_upload_and_leave_no_object(replica: Replica) -> None:
    uploads = replica()  # writes, and removes (its uploads last an hour)
    sweeper, other = replica(upload_expiry=1.0), replica(upload_expiry=1.0)  # a second after the last write, they are gone
    kept = [uploads.create("alice", 2 * PART_BYTES, "", "") for _ in range(3)]
    for state in kept:
        write(uploads.append("alice", state.upload_id, 0), os.urandom(PART_BYTES + MIB))  # a part and an incomplete part
    assert len(uploads.objects.uploads("uploads/")) == 3 and len(objects(uploads)) == 3
    assert uploads.remove("alice", kept[0].upload_id)
    assert len(uploads.objects.uploads("uploads/")) == 2 and len(objects(uploads)) == 2
    time.sleep(1.2)
    with pytest.raises(NotFound):  # an expired upload is missing, and removed as it is met
        other.find("alice", kept[1].upload_id)
    with pytest.raises(NotFound):
        other.append("alice", kept[2].upload_id, PART_BYTES + MIB)
    assert uploads.sweep() + sweeper.sweep() + other.sweep() == 0
    assert uploads.objects.uploads("uploads/") == [] and objects(uploads) == []

    late = uploads.create("alice", 10, "", "")
    write(uploads.append("alice", late.upload_id, 0), b"01234")
    time.sleep(1.2)
    assert uploads.sweep() == 0
    assert sweeper.sweep() + other.sweep() == 1  # two replicas sweeping: removed once
    assert objects(uploads) == [] and uploads.rows.get(tenant_key("alice"), late.upload_id) is None


def test_a_removal_while_a_patch_writes_is_seen_by_the_patch(replica: Replica) -> None:
    first, second = replica(), replica()
    for sent_before in (0, PART_BYTES):  # removed before its multipart upload began, and after
        state = first.create("alice", 3 * PART_BYTES, "", "")
        writing = first.append("alice", state.upload_id, 0)
        for _ in range((sent_before + MIB) // MIB):
            writing.consume(os.urandom(MIB), None)
        assert second.remove("alice", state.upload_id)
        with pytest.raises(NotFound):  # its next part records nothing
            for _ in range(PART_BYTES // MIB):
                writing.consume(os.urandom(MIB), None)
        assert writing.end() is None  # the PATCH answers 404
    assert first.objects.uploads("uploads/") == [] and objects(first) == []


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


def test_object_storage_that_does_not_answer_is_storage_unavailable() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # nothing listens there once closed
    environ = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}
    multipart = Multipart("bucket", "prefix", environ)
    with pytest.raises(StorageUnavailable) as refused:
        multipart.create("uploads/x/data")
    assert "127.0.0.1" not in refused.value.detail and "bucket" not in refused.value.detail


def test_gc_full_removes_the_objects_of_uploads_no_row_names(replica: Replica) -> None:
    """An incomplete part a PATCH put while another replica removed its upload
    (the row gone first) is named by no row: `gc --full` removes it and aborts
    its multipart upload; a live upload's objects stay."""
    uploads = replica()
    live, gone = (uploads.create("alice", 2 * PART_BYTES, "", "") for _ in range(2))
    for state in (live, gone):
        write(uploads.append("alice", state.upload_id, 0), os.urandom(PART_BYTES + MIB))  # a part and an incomplete part
    assert uploads.rows.delete(gone.upload_id)  # its objects left behind, as by the race
    folder = f"uploads/{tenant_key('alice')}/{gone.upload_id}/"
    assert uploads.collect_orphans() == [folder]
    assert not any(key.startswith(folder) for key in objects(uploads))
    assert [key for key, _ in uploads.objects.uploads("uploads/")] == [f"uploads/{tenant_key('alice')}/{live.upload_id}/data"]
    assert uploads.collect_orphans() == []
    assert uploads.find("alice", live.upload_id).offset == PART_BYTES + MIB
