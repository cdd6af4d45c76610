"""A local store written by the release before the SQL index opens in this
one, as it was: the previous commit's own code (checked out of this
repository's history) writes a store with its file index, then reports what
it sees; this code opens the same folder, carries the file index over into
SQLite once, and must report the same: each tenant's listing, the records,
sizes and order of last use, the graph marks, the check runs, the content."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

import pytest

from service.settings import Settings
from service.store.backends import open_store
from service.store.model_store import Store
from service.store.sql.schema import MIGRATIONS
from service.store.sqlite.sqlite_index import SqliteIndex

REPO = Path(__file__).resolve().parents[3]
FILE_INDEX_COMMIT = "b5c20697e8ab667205f5bee1523469f7df2ca041"  # the last commit whose local store kept its index in files

# Run by either release: writes the store (when asked to) and prints what it sees.
SCRIPT = r'''
import hashlib, json, os, sys, time
from service.settings import Settings
from service.store.backends import open_store
from service.store.records import SourceFile, StoredRecord, TenantRecord

folder, write = sys.argv[1], sys.argv[2] == "write"
store = open_store(Settings(store=folder, store_min_free=0, data_root=os.path.dirname(folder)))
store.open()

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

if write:
    first = commit("alice", b"first model", "a.onnx")
    shared = commit("alice", b"shared model", "s.onnx")
    commit("bob", b"shared model", "bob-s.onnx")
    commit("bob", b"third model", "c.onnx")
    with store.work_folder() as work:
        work.graph.write_bytes(b'{"graph": "first"}')
        store.add_graph(first, work.graph, "alice")
    store.keep_checks("bob", shared, b'{"runs": "bob"}')
    store.touch(first)

seen = {"usage": store.usage(), "count": store.model_count(), "tenants": {}}
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
    }
seen["by_last_use"] = store.index.by_last_use()
print(json.dumps(seen, sort_keys=True))
store.close()
'''


def _previous_release(target: Path) -> Path:
    """The service as of FILE_INDEX_COMMIT, from this repository's history."""
    try:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", FILE_INDEX_COMMIT, "service", "importer"],
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


def _report(code: Path, store: Path, mode: str) -> dict[str, object]:
    environment = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(store), mode], cwd=code, env=environment, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, object] = json.loads(done.stdout)
    return report


def test_a_store_with_the_file_index_opens_as_it_was(tmp_path: Path) -> None:
    old_code = _previous_release(tmp_path / "previous")
    store = tmp_path / "store"
    before = _report(old_code, store, "write")
    assert (store / "tenants").is_dir() and not (store / "index.sqlite").exists()  # the old release's own layout
    assert before["count"] == 3 and len(before["tenants"]["alice"]["listing"]) == 2  # type: ignore[index]

    after = _report(REPO, store, "read")
    assert after == before

    reopened = open_store(Settings(store=str(store), store_min_free=0))
    reopened.open()
    try:
        assert isinstance(reopened.index, SqliteIndex) and reopened.index.migrations_applied == 0  # carried over once
        assert reopened.model_count() == 3
    finally:
        reopened.close()


def test_a_new_store_carries_nothing_over(tmp_path: Path) -> None:
    store: Store = open_store(Settings(store=str(tmp_path / "store"), store_min_free=0))
    store.open()
    try:
        assert isinstance(store.index, SqliteIndex) and store.index.migrations_applied == len(MIGRATIONS)
        assert store.model_count() == store.usage() == 0
    finally:
        store.close()
