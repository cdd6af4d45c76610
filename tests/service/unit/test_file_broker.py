"""The external-data broker (service/sandbox/worker/file_broker.py), both sides in
this process over a real socket pair: a file inside the job's folder comes
back as a descriptor of that very file; a location that leaves the folder,
a missing file, a folder other than the job's are refused as the importer
refuses them; a request past `max_external_files`, or one that is not a
request, ends the broker; the worker's side maps what it was given."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from importer import ErrorKind, ModelImportError
from importer.source import open_confined
from service.sandbox.protocol import WorkerJob
from service.sandbox.worker.file_broker import FileBroker, serve_requests


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    (inputs / "weights.bin").write_bytes(b"\x01\x02\x03\x04")
    (tmp_path / "secret.bin").write_bytes(b"secret")
    os.symlink(tmp_path / "secret.bin", inputs / "escape.bin")
    return inputs


def _broker(folder: Path, max_files: int = 8) -> Iterator[FileBroker]:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    job = WorkerJob("import", 1 << 30, 60, max_files, directory=str(folder), model="model.onnx")
    serving = threading.Thread(target=serve_requests, args=(ours, job), daemon=True)
    serving.start()
    try:
        yield FileBroker(theirs)
    finally:
        theirs.close()
        serving.join(5)
    assert not serving.is_alive()


broker = pytest.fixture(_broker)


def test_a_file_inside_the_folder_comes_back_as_its_descriptor(folder: Path, broker: FileBroker) -> None:
    fd, path = broker.open(str(folder), "weights.bin")
    try:
        assert path == str((folder / "weights.bin").resolve())
        assert os.fstat(fd).st_ino == (folder / "weights.bin").stat().st_ino
    finally:
        os.close(fd)
    owner = open_confined(str(folder), "./weights.bin", allow_hard_links=False, max_bytes=1 << 20, opener=broker.open)
    assert bytes(owner.parse_buffer()) == b"\x01\x02\x03\x04"
    owner.close()


@pytest.mark.parametrize(
    ("location", "message"),
    [
        ("../secret.bin", "resolves outside the external data directory"),
        ("escape.bin", "resolves outside the external data directory"),
        ("missing.bin", "no such file"),
    ],
)
def test_what_the_importer_refuses_is_refused_alike(folder: Path, broker: FileBroker, location: str, message: str) -> None:
    with pytest.raises(ModelImportError) as refused:
        broker.open(str(folder), location)
    assert refused.value.kind == ErrorKind.EXTERNAL_DATA and message in refused.value.message


def test_another_folder_is_refused(folder: Path, broker: FileBroker) -> None:
    with pytest.raises(ModelImportError, match="names a folder other than the job's"):
        broker.open(str(folder.parent), "secret.bin")


def test_the_broker_answers_at_most_max_external_files_requests(folder: Path) -> None:
    for broker in _broker(folder, max_files=2):
        for _ in range(2):
            fd, _ = broker.open(str(folder), "weights.bin")
            os.close(fd)
        with pytest.raises(ModelImportError, match="file broker"):
            broker.open(str(folder), "weights.bin")


def test_what_is_not_a_request_ends_the_broker(folder: Path) -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    job = WorkerJob("import", 1 << 30, 60, 8, directory=str(folder), model="model.onnx")
    serving = threading.Thread(target=serve_requests, args=(ours, job), daemon=True)
    serving.start()
    theirs.send(b"\xff not json")
    serving.join(5)
    assert not serving.is_alive()
    assert theirs.recv(16) == b""  # closed: nothing answered
    theirs.close()
