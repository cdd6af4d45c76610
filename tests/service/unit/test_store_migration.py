"""A store written by the release before one schema for both databases opens in this one, as it was.

The previous commit's own code (checked out of this repository's history)
writes a store, on a folder (its index in SQLite, its resumable uploads in
files) and on the fleet store (S3 and PostgreSQL: its schema at version 5):
three models, one held by two tenants, one with its graph rendered, each
tenant's own check runs, a resumable upload half done and one whole; then it
reports what it sees. This code opens the same store, migrates it once
(`service.store.sql.schema`), and must report the same: each tenant's
listing, records, holdings, runs, graph marks, summaries and stored bytes,
and each upload's offset, length and metadata. Then the half-done upload is
continued and both are imported as a work folder's files, byte for byte;
the old tables no release reads any more are gone (`onnx_tus_*`, on
PostgreSQL), and a second opening migrates nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from service.settings import Settings
from service.store.backends import open_store, resumable_uploads_for
from service.store.sql.schema import MIGRATIONS

if TYPE_CHECKING:
    from fleet_servers import FleetServers  # tools/ (tests/support/fleet.py's fixture)

REPO = Path(__file__).resolve().parents[3]
PREVIOUS_COMMIT = "698d6c13d875f773d25d72cdf0477142246a6296"  # the last commit with two schema histories and two kinds of uploads

HALF = os.urandom(3 << 20)  # the half-done upload's bytes: the old code sends the first third
WHOLE = b"the whole upload's bytes" * 1000

# Run by either release: writes the store (when asked to) and prints what it sees.
SCRIPT = r"""
import hashlib, json, os, sys, time
from pathlib import Path
from service.settings import Settings
from service.store.backends import open_store, resumable_uploads_for
from service.store.records import SourceFile, StoredRecord, TenantRecord

flags, mode = json.loads(sys.argv[1]), sys.argv[2]
if "cache_dir" in flags:
    flags["cache_dir"] = Path(flags["cache_dir"])
half, whole = open(sys.argv[3], "rb").read(), open(sys.argv[4], "rb").read()
settings = Settings(store_min_free=0, data_root=os.getcwd(), **flags)
store = open_store(settings)
store.open()
uploads = resumable_uploads_for(settings, store)
uploads.open()

def commit(tenant, content, name):
    model_id = hashlib.sha256(content).hexdigest()
    with store.work_folder() as work:
        work.files.mkdir()
        work.upload_model.write_bytes(content)
        info = os.stat(work.upload_model)
        item = SourceFile(path="files/model.onnx", in_store=True, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino)
        record = StoredRecord(id=model_id, input=name, created_ns=time.time_ns(), model_size=len(content),
                              model_sha256=model_id, tensor_count=0, files={"model": item})
        owner = TenantRecord(tenant=tenant, input=name, created_ns=time.time_ns())
        store.commit(work, model_id, record, json.dumps({"input": name}).encode(), owner)
    time.sleep(0.01)  # listing and last use order by time
    return model_id

def send(upload_id, data, offset):
    appending = uploads.append("alice", upload_id, offset)
    try:
        for start in range(0, len(data), 1 << 20):
            appending.consume(data[start : start + (1 << 20)], None)
    finally:
        appending.end()

if mode == "write":
    first = commit("alice", b"first model", "a.onnx")
    shared = commit("alice", b"shared model", "s.onnx")
    commit("bob", b"shared model", "bob-s.onnx")
    commit("bob", b"third model", "c.onnx")
    with store.work_folder() as work:
        work.graph.write_bytes(b'{"graph": "first"}')
        store.add_graph(first, work.graph, "alice")
    store.keep_checks("bob", shared, b'{"runs": "bob"}')
    store.keep_checks("alice", first, b'{"runs": "alice"}')
    store.touch(first)
    half_done = uploads.create("alice", len(half), "filename aGFsZi5vbm54", "half.onnx").upload_id
    send(half_done, half[: len(half) // 3], 0)
    done = uploads.create("alice", len(whole), "filename d2hvbGUuYmlu", "whole.bin").upload_id
    send(done, whole, 0)
    upload_ids = {"half": half_done, "whole": done}
else:
    upload_ids = json.loads(mode)

def stored_bytes(record):
    source = store.open_file(record, record.files["model"])
    try:
        return hashlib.sha256(source.read(0, record.files["model"].size)).hexdigest()
    finally:
        source.close()

seen = {"usage": store.usage(), "count": store.model_count(), "tenants": {}, "uploads": {}, "upload_ids": upload_ids}
for tenant in ("alice", "bob", "carol"):
    listing = [model_id for _, model_id in store.list_models(tenant, None, 10)]
    seen["tenants"][tenant] = {
        "listing": listing,
        "usage": list(store.tenant_usage(tenant)),
        "holdings": {m: store.holding(tenant, m).model_dump() for m in listing},
        "records": {m: store.visible_record(tenant, m).model_dump() for m in listing},
        "graphs": [m for m in listing if store.graph_rendered(tenant, m)],
        "checks": {m: (store.checks(tenant, m) or b"").decode() for m in listing},
        "summaries": {m: store.summary(m).decode() for m in listing},
        "bytes": {m: stored_bytes(store.visible_record(tenant, m)) for m in listing},
    }
for name, upload_id in upload_ids.items():
    state = uploads.find("alice", upload_id)
    seen["uploads"][name] = [state.offset, state.length, state.metadata, state.filename, round(state.expires, 2)]
seen["by_last_use"] = store.index.by_last_use()
print(json.dumps(seen, sort_keys=True))
store.close()
"""


def _previous_release(target: Path) -> Path:
    """The service as of PREVIOUS_COMMIT, from this repository's history."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", PREVIOUS_COMMIT, "service", "importer"],
            capture_output=True, check=True, timeout=60,
        ).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"the previous release's code is not in this checkout's history ({error}): a clone with history has it")
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4 and later
            tar.extractall(target, filter="data")
        else:  # Debian's 3.11.2: this repository's own archive, with nothing but its files
            tar.extractall(target)
    return target


def _report(code: Path, flags: dict[str, str], mode: str, environ: dict[str, str]) -> dict[str, Any]:
    environment = {**os.environ, **environ, "PYTHONPATH": str(code)}
    sent = code.parent / "sent"
    sent.mkdir(exist_ok=True)
    (sent / "half").write_bytes(HALF)
    (sent / "whole").write_bytes(WHOLE)
    arguments = [json.dumps(flags), mode, str(sent / "half"), str(sent / "whole")]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *arguments], cwd=code, env=environment, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _opens_as_it_was(tmp_path: Path, flags: dict[str, str], environ: dict[str, str]) -> dict[str, Any]:
    """The store written by the previous commit, read by it and by this code: the same; the report."""
    before = _report(_previous_release(tmp_path / "previous"), flags, "write", environ)
    assert before["count"] == 3 and before["tenants"]["alice"]["checks"] and before["tenants"]["alice"]["graphs"]
    assert before["uploads"]["half"][:2] == [len(HALF) // 3, len(HALF)] and before["uploads"]["whole"][:2] == [len(WHOLE)] * 2
    after = _report(REPO, flags, json.dumps(before["upload_ids"]), environ)
    assert after == before
    return before


def _uploads_go_on(tmp_path: Path, settings: Settings, upload_ids: dict[str, str]) -> None:
    """The half-done upload continues from its offset; both import as the bytes sent; a second opening migrates nothing."""
    store = open_store(settings)
    store.open()
    try:
        assert store.index.migrations_applied == 0  # migrated once, by the first opening
        uploads = resumable_uploads_for(settings, store)
        uploads.open()
        offset = uploads.find("alice", upload_ids["half"]).offset
        appending = uploads.append("alice", upload_ids["half"], offset)
        try:
            appending.consume(HALF[offset:], None)
        finally:
            appending.end()
        for name, data in (("half", HALF), ("whole", WHOLE)):
            assert uploads.find("alice", upload_ids[name]).complete
            target = tmp_path / f"{name}.bin"
            assert uploads.link_into("alice", upload_ids[name], target) == (len(data), hashlib.sha256(data).hexdigest())
            assert target.read_bytes() == data
            assert uploads.remove("alice", upload_ids[name])
    finally:
        store.close()


def test_a_folder_store_of_the_release_before_opens_and_migrates(tmp_path: Path) -> None:
    flags = {"store": str(tmp_path / "store")}
    before = _opens_as_it_was(tmp_path, flags, {})
    uploads = tmp_path / "store" / "uploads"
    assert {path.parent.name for path in uploads.rglob("upload.json")} == set(before["upload_ids"].values())  # its own layout
    settings = Settings(store_min_free=0, **flags)  # type: ignore[arg-type]
    _uploads_go_on(tmp_path, settings, before["upload_ids"])
    assert not list(uploads.rglob("data"))  # removed whole


def test_a_fleet_store_of_the_release_before_opens_and_migrates(
    tmp_path: Path, fleet_servers: FleetServers, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = fleet_servers.new_database()
    flags = {"store": fleet_servers.new_store_url(), "database": database, "cache_dir": str(tmp_path / "cache")}
    before = _opens_as_it_was(tmp_path, flags, dict(fleet_servers.environ))
    with psycopg.connect(database) as connection:
        version = connection.execute("SELECT version FROM onnx_schema").fetchone()
        tables = {row[0] for row in connection.execute("SELECT tablename FROM pg_tables WHERE tablename LIKE 'onnx_%'")}
    assert version is not None and version[0] == len(MIGRATIONS)
    assert not {"onnx_tus_uploads", "onnx_tus_parts"} & tables and {"onnx_resumable_uploads", "onnx_resumable_parts"} <= tables
    for name, value in fleet_servers.environ.items():
        monkeypatch.setenv(name, value)
    settings = Settings(store_min_free=0, **{**flags, "cache_dir": tmp_path / "cache-new"})  # type: ignore[arg-type]
    _uploads_go_on(tmp_path, settings, before["upload_ids"])
