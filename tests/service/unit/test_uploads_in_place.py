"""Resumable uploads (`service.store.uploads`) on a folder store, appended in
place, and the tus headers (`service.api.tus`), in process: offsets, one
writer at a time, digests kept by the process that wrote (else hashed from
disk, as another process's would be), hard links into a work folder, expiry
and the sweep, the per-tenant count, the space reserved, each tenant's share
of the store's room, and creations that never evict. (The same uploads in
parts, on object storage: test_fleet_uploads.py.)"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_store import commit

from service.api.problems import ProblemError
from service.api.tus import http_date, parse_metadata
from service.errors import NotFound, StoreFull, TenantQuotaExceeded, TooManyUploads, UploadBusy, UploadIncomplete, UploadOffsetMismatch
from service.settings import Settings
from service.store.backends import open_store
from service.store.model_store import Store
from service.store.uploads import Appending, ResumableUploads


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = open_store(Settings(store=str(tmp_path / "store"), store_min_free=0))
    store.open()
    yield store
    store.close()


def uploads_of(store: Store, tmp_path: Path, expiry: float = 3600.0, max_open: int = 8) -> ResumableUploads:
    uploads = ResumableUploads(store, expiry, max_open, in_place=tmp_path / "store")
    uploads.open()
    return uploads


def write(appending: Appending, data: bytes) -> float | None:
    """Append `data` as a PATCH does (`consume`, hashed on when this process has the upload's digest), then `end`."""
    try:
        appending.consume(data, None if appending.digest is None else appending.digest.update)
    finally:
        expires = appending.end()
    return expires


def test_bytes_are_appended_at_the_offset_held(store: Store, tmp_path: Path) -> None:
    uploads = uploads_of(store, tmp_path)
    state = uploads.create("alice", 10, "filename YQ==", "a")
    assert (state.offset, state.length, state.metadata, state.filename) == (0, 10, "filename YQ==", "a")
    assert write(uploads.append("alice", state.upload_id, 0), b"01234") is not None
    assert uploads.find("alice", state.upload_id).offset == 5
    with pytest.raises(UploadOffsetMismatch) as mismatch:
        uploads.append("alice", state.upload_id, 3)
    assert mismatch.value.offset == 5
    first = uploads.append("alice", state.upload_id, 5)
    with pytest.raises(UploadBusy):  # one writer at a time, in one process too
        uploads.append("alice", state.upload_id, 5)
    write(first, b"56789")
    assert uploads.find("alice", state.upload_id).complete
    for tenant, upload_id in (("bob", state.upload_id), ("alice", "0" * 32), ("alice", "../x")):
        with pytest.raises(NotFound):
            uploads.find(tenant, upload_id)
        with pytest.raises(NotFound):
            uploads.append(tenant, upload_id, 0)
        if "/" in upload_id:
            with pytest.raises(NotFound):
                uploads.remove(tenant, upload_id)
        else:
            assert not uploads.remove(tenant, upload_id)


def test_an_import_links_a_finished_upload_and_knows_its_digest(store: Store, tmp_path: Path) -> None:
    uploads = uploads_of(store, tmp_path)
    data = os.urandom(3000)
    state = uploads.create("alice", len(data), "", "")
    for start in (0, 1000, 2000):
        write(uploads.append("alice", state.upload_id, start), data[start : start + 1000])
    target = tmp_path / "work" / "model.onnx"
    target.parent.mkdir()
    assert uploads.link_into("alice", state.upload_id, target) == (len(data), hashlib.sha256(data).hexdigest())
    assert target.read_bytes() == data and target.stat().st_nlink == 2
    # another process (no digest of its own) hashes the file
    other = ResumableUploads(store, 3600.0, 8, in_place=tmp_path / "store")
    again = tmp_path / "work" / "again.onnx"
    assert other.link_into("alice", state.upload_id, again) == (len(data), hashlib.sha256(data).hexdigest())
    # a piece written by another process: this one's digest no longer covers the upload
    half = uploads.create("alice", 4, "", "")
    write(uploads.append("alice", half.upload_id, 0), b"ab")
    write(other.append("alice", half.upload_id, 2), b"cd")
    assert uploads.link_into("alice", half.upload_id, tmp_path / "work" / "half")[1] == hashlib.sha256(b"abcd").hexdigest()
    partial = uploads.create("alice", 4, "", "")
    write(uploads.append("alice", partial.upload_id, 0), b"ab")
    with pytest.raises(UploadIncomplete) as incomplete:
        uploads.link_into("alice", partial.upload_id, tmp_path / "work" / "partial")
    assert (incomplete.value.upload_id, incomplete.value.offset) == (partial.upload_id, 2)


def test_a_removal_while_a_patch_writes_is_seen_by_the_patch(store: Store, tmp_path: Path) -> None:
    uploads = uploads_of(store, tmp_path)
    state = uploads.create("alice", 10, "", "")
    appending = uploads.append("alice", state.upload_id, 0)
    assert uploads.remove("alice", state.upload_id)
    assert write(appending, b"late") is None
    assert list((tmp_path / "store" / "uploads").rglob("data")) == []


def test_expired_uploads_are_refused_and_swept(store: Store, tmp_path: Path) -> None:
    uploads = uploads_of(store, tmp_path, expiry=0.3)
    idle, held, looked_up = (uploads.create("alice", 10, "", "") for _ in range(3))
    holding = uploads.append("alice", held.upload_id, 0)
    time.sleep(0.4)
    with pytest.raises(NotFound):
        uploads.find("alice", looked_up.upload_id)  # expired: removed on sight
    assert uploads.sweep() == 1  # the idle one; the held one is being written
    assert {path.parent.name for path in (tmp_path / "store" / "uploads").rglob("data")} == {held.upload_id}
    write(holding, b"x")  # renews it
    assert uploads.find("alice", held.upload_id).offset == 1
    with pytest.raises(NotFound):
        uploads.find("alice", idle.upload_id)
    # what a creation cut short left is removed once old
    leftover = tmp_path / "store" / "uploads" / "some-tenant" / ".0123.new-ab"
    leftover.mkdir(parents=True)
    os.utime(leftover, (time.time() - 3600, time.time() - 3600))
    uploads.sweep()
    assert not leftover.exists()


def test_the_count_per_tenant_and_the_space_reserved(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    uploads = uploads_of(store, tmp_path, max_open=3)
    first = uploads.create("alice", 100, "", "")
    uploads.create("alice", 50, "", "")
    uploads.create("alice", 0, "", "")
    with pytest.raises(TooManyUploads):
        uploads.create("alice", 1, "", "")
    uploads.create("bob", 1, "", "")  # a count per tenant
    write(uploads.append("alice", first.upload_id, 0), b"x" * 40)
    assert uploads.reserved() == 60 + 50 + 1
    monkeypatch.setattr(store, "free_bytes", lambda: 10_000)
    store.min_free = 9_000  # 1000 bytes over the floor, of which 111 reserved
    store.tenant_max_reserved = 1.0  # bob may declare the whole room
    assert uploads.create("bob", 800, "", "").length == 800
    with pytest.raises(StoreFull):
        uploads.create("bob", 200, "", "")  # 111 + 800 + 200 reserved would take the store below its floor
    assert uploads.remove("alice", first.upload_id)
    assert uploads.create("bob", 140, "", "").length == 140  # the 60 bytes it awaited were freed


def test_open_uploads_count_against_the_tenants_byte_cap(tmp_path: Path) -> None:
    """A tenant's stored models, its open uploads and the new one must fit
    --tenant-max-bytes: refused at creation, before any byte is sent."""
    store = open_store(Settings(store=str(tmp_path / "store"), store_min_free=0, tenant_max_bytes=1000))
    store.open()
    try:
        uploads = uploads_of(store, tmp_path)
        first = uploads.create("alice", 600, "", "")
        with pytest.raises(TenantQuotaExceeded) as refused:
            uploads.create("alice", 401, "", "")  # 600 open + 401 > 1000
        assert refused.value.limit == "tenant_max_bytes"
        uploads.create("alice", 400, "", "")  # exactly at the cap
        uploads.create("bob", 1000, "", "")  # another tenant's cap is its own
        uploads.remove("alice", first.upload_id)
        uploads.create("alice", 600, "", "")  # a removed upload no longer counts
    finally:
        store.close()


def store_model(store: Store, tenant: str, content: bytes) -> str:
    """`content` stored as `tenant`'s uploaded model; its id."""
    return commit(store, tenant, content)[0]


def test_a_tenants_open_uploads_take_at_most_its_share_of_the_room(store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--tenant-max-reserved (a quarter by default) of the room: the free bytes
    above the floor and what the store holds there (models, uploads' bytes),
    at most --store-max-bytes. Another tenant's share is its own."""
    assert store.tenant_max_reserved == 0.25  # the default
    uploads = uploads_of(store, tmp_path)

    def free_bytes() -> int:  # the bytes sent take free space
        return 11_000 - sum(data.stat().st_size for data in (tmp_path / "store" / "uploads").rglob("data"))

    monkeypatch.setattr(store, "free_bytes", free_bytes)
    store.min_free = 1_000  # a room of 10,000 bytes: 2,500 each
    first = uploads.create("alice", 2_000, "", "")
    with pytest.raises(TenantQuotaExceeded) as refused:
        uploads.create("alice", 501, "", "")
    assert refused.value.limit == "tenant_max_reserved"
    assert "evict" not in refused.value.detail
    uploads.create("alice", 500, "", "")  # exactly its share
    assert uploads.create("bob", 2_500, "", "").length == 2_500  # bob's share is his own
    write(uploads.append("alice", first.upload_id, 0), b"x" * 2_000)  # its bytes sent still count, as the room they take
    with pytest.raises(TenantQuotaExceeded):
        uploads.create("alice", 1, "", "")
    assert uploads.remove("alice", first.upload_id)
    uploads.create("alice", 2_000, "", "")
    store.max_bytes = 4_000  # the store's cap bounds the room too: 1,000 each
    with pytest.raises(TenantQuotaExceeded):
        uploads.create("carol", 1_001, "", "")


def test_creating_an_upload_never_evicts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue: a creation refused for room evicted the creator's models
    first. Now it is refused with nothing evicted, whoever holds what."""
    store = open_store(Settings(store=str(tmp_path / "store"), store_min_free=0, tenant_max_reserved=1.0))
    store.open()
    try:
        bobs = [store_model(store, "bob", bytes([seed]) * 50_000) for seed in range(2)]
        uploads = uploads_of(store, tmp_path)
        monkeypatch.setattr(store, "free_bytes", lambda: 10_000)  # evicting bob's 100 KB would have made room
        store.min_free = 1_000  # 9,000 bytes free above the floor
        uploads.create("alice", 8_000, "", "")
        with pytest.raises(StoreFull) as refused:
            uploads.create("bob", 1_001, "", "")  # 8,000 awaited: 1,000 left
        assert "evicts no model" in refused.value.detail
        assert all(store.has(model_id) for model_id in bobs)
        assert uploads.create("bob", 1_000, "", "").length == 1_000
        assert all(store.has(model_id) for model_id in bobs)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, ("", "")),
        ("filename bW9kZWwub25ueA==", ("filename bW9kZWwub25ueA==", "model.onnx")),
        ("is_confidential,filename w6kub25ueA== ", ("is_confidential,filename w6kub25ueA==", "é.onnx")),
        ("a YQ==, b Yg==", ("a YQ==, b Yg==", "")),
    ],
)
def test_upload_metadata_is_parsed(header: str | None, expected: tuple[str, str]) -> None:
    assert parse_metadata(header) == expected


@pytest.mark.parametrize("header", ["filename ?", "a YQ==,a Yg==", ",", "k\tv YQ==", "é YQ==", "filename /w==", "x " + "A" * 5000])
def test_malformed_upload_metadata_is_a_400(header: str) -> None:
    with pytest.raises(ProblemError) as refused:
        parse_metadata(header)
    assert refused.value.problem.status == 400


def test_upload_expires_is_an_imf_fixdate() -> None:
    assert http_date(784111777) == "Sun, 06 Nov 1994 08:49:37 GMT"


def test_a_writer_that_died_leaves_the_upload_to_the_next_at_once(store: Store, tmp_path: Path) -> None:
    """A process killed mid-PATCH: the kernel drops its flock, and the next
    PATCH takes the upload over at once (its lease in the index, which never
    ended, is overruled), from the bytes the dead one wrote."""
    uploads = uploads_of(store, tmp_path)
    state = uploads.create("alice", 10, "", "")
    dying = uploads.append("alice", state.upload_id, 0)
    dying.consume(b"0123", None)
    assert dying.fd is not None
    os.close(dying.fd)  # what its death does: the flock goes, the lease stays
    with pytest.raises(UploadOffsetMismatch) as mismatch:
        uploads.append("alice", state.upload_id, 0)
    assert mismatch.value.offset == 4  # HEAD's offset: what it wrote
    assert write(uploads.append("alice", state.upload_id, 4), b"456789") is not None
    assert uploads.find("alice", state.upload_id).complete
