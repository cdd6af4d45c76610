"""Service processes on one store, started, stopped and restarted: a restart
keeps the store (summaries, tensors, graphs, the same id for the same bytes)
and each process removes its own work folder; a crashed process's temporary
files are removed by the next start; two processes share one store (what one
imports the other serves); a catalogue deleted by another process is closed,
its space freed.

Why a process: each service process owns a work area and catalogue handles
of its own on the shared store (its tmp folder, locks, open files); what one
process leaves or removes, another finds, which only separate processes,
started and stopped, show.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from support.service_harness import SAMPLES, ServiceProcess, copy_samples, open_files, serving

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


def test_restart_keeps_the_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = ServiceProcess(store, SAMPLES).start()
    try:
        with first.client() as client:
            created = client.post("/models", files={"model": ("m.onnx", (SAMPLES / "typed_fields.onnx").read_bytes())})
            assert created.status_code == 201
            summary = created.json()
            words = client.get(f"/models/{summary['id']}/tensors/words").content
    finally:
        first.stop()
    second = ServiceProcess(store, SAMPLES).start()
    try:
        with second.client() as client:
            assert client.get(f"/models/{summary['id']}").json() == summary
            assert client.get(f"/models/{summary['id']}/tensors/words").content == words
            assert client.get(f"/models/{summary['id']}/graph").status_code == 200
            again = client.post("/models", files={"model": ("m.onnx", (SAMPLES / "typed_fields.onnx").read_bytes())})
            assert again.status_code == 200 and again.json()["id"] == summary["id"]
    finally:
        second.stop()
    assert [p.name for p in (store / "tmp").iterdir()] == []  # each process removed its own work folder


def test_a_crashed_process_temporary_files_are_removed_at_start(tmp_path: Path) -> None:
    store = tmp_path / "store"
    (store / "tmp" / "dead-process" / "upload").mkdir(parents=True)
    (store / "tmp" / "dead-process" / "upload" / "model.onnx").write_bytes(b"partial")
    (store / "tmp" / "dead-process.lock").write_bytes(b"")
    service = ServiceProcess(store, SAMPLES).start()
    try:
        assert not (store / "tmp" / "dead-process").exists()
        assert not (store / "tmp" / "dead-process.lock").exists()
    finally:
        service.stop()


def test_two_service_processes_share_one_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    first = ServiceProcess(store, SAMPLES).start()
    second = ServiceProcess(store, SAMPLES).start()
    try:
        with first.client() as one, second.client() as two:
            created = one.post("/models", json={"path": "external/model.onnx"})
            assert created.status_code == 201
            model_id = created.json()["id"]
            assert two.get(f"/models/{model_id}/tensors/W").content == one.get(f"/models/{model_id}/tensors/W").content
            assert two.post("/models", json={"path": "external/model.onnx"}).status_code == 200
            uploaded = two.post("/models", files={"model": ("t.onnx", (SAMPLES / "typed_fields.onnx").read_bytes())})
            assert uploaded.status_code == 201
            assert one.get(f"/models/{uploaded.json()['id']}/tensors/words").status_code == 200
    finally:
        first.stop()
        second.stop()
    assert list((store / "tmp").iterdir()) == []


def test_a_catalogue_deleted_by_another_process_is_closed(tmp_path: Path) -> None:
    store, root = tmp_path / "store", copy_samples(tmp_path / "root")
    with serving(store, root) as first, serving(store, root) as second:
        with first.client() as client:
            model_id = client.post("/models", json={"path": "add.onnx"}).json()["id"]
            other = client.post("/models", json={"path": "typed_fields.onnx"}).json()["id"]
            assert client.get(f"/models/{model_id}/tensors/W").status_code == 200  # its catalogue open in `first`
        with second.client() as client:
            assert client.delete(f"/models/{model_id}").status_code == 204
        time.sleep(1.2)
        with first.client() as client:
            assert client.get(f"/models/{other}/tensors?limit=1").status_code == 200
        assert first.process is not None
        try:
            held = open_files(first.process.pid)
        except PermissionError:  # the front end is not dumpable: only CAP_SYS_PTRACE sees its descriptors
            pytest.skip("the service's descriptors cannot be read here (it is not dumpable, and this root has no CAP_SYS_PTRACE)")
    assert not [target for target in held if "catalog.sqlite" in target and "(deleted)" in target], held
