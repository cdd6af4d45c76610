"""A check worker's bound files (service/sandbox/worker/bound_files.py), in this process: the model and each
external file the job names are opened before the walls, each bound at the path onnxruntime resolves it to
beside the model; the importer is given the very descriptors bound (a swap on disk afterwards changes nothing
it reads); a model file that is not the one opened, a location refused, or a file the worker's identity may not
read by name binds nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import importer
from importer.source import confined_descriptor
from service.sandbox.protocol import WorkerJob
from service.sandbox.worker.bound_files import open_bound_files, readable_as

LOCATIONS = ("weights.bin", "more/bias.bin")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "more").mkdir()
    (tmp_path / "model.onnx").write_bytes(b"\x08\x07")  # ir_version 7: enough to be opened
    (tmp_path / "weights.bin").write_bytes(b"checked")
    (tmp_path / "more" / "bias.bin").write_bytes(b"bias")
    (tmp_path / "other.bin").write_bytes(b"not named by the job")
    return tmp_path


def _job(folder: Path, mapped: tuple[str, ...] = LOCATIONS) -> WorkerJob:
    return WorkerJob("checks", 1 << 30, 60, 8, directory=str(folder), model="model.onnx", mapped_files=mapped)


def test_each_file_is_bound_beside_the_model_and_the_importer_reads_the_one_bound(folder: Path) -> None:
    model = importer.open_model(folder / "model.onnx")
    bound = open_bound_files(_job(folder), model, confined_descriptor)
    assert bound is not None
    try:
        assert sorted(bound.targets) == sorted(str(folder / name) for name in ("model.onnx", *LOCATIONS))
        assert bound.locations == set(LOCATIONS)
        (folder / "swapped.bin").write_bytes(b"swapped")
        os.replace(folder / "swapped.bin", folder / "weights.bin")
        asked: list[str] = []

        def broker(directory: str, location: str) -> tuple[int, str]:
            asked.append(location)
            return confined_descriptor(directory, location)

        opener = bound.opener(broker)
        fd, _ = opener(str(folder), "./weights.bin")
        with os.fdopen(fd, "rb") as file:
            assert file.read() == b"checked"
        other, _ = opener(str(folder), "other.bin")
        os.close(other)
        assert asked == ["other.bin"]  # only what was not bound goes to the broker
    finally:
        bound.close()
        model.close()


def test_nothing_is_bound_for_a_refused_location_or_another_model_file(folder: Path) -> None:
    model = importer.open_model(folder / "model.onnx")
    try:
        assert open_bound_files(_job(folder, ("weights.bin", "../outside.bin")), model, confined_descriptor) is None
        assert open_bound_files(_job(folder, ()), model, confined_descriptor) is None  # no external file: the hand-over
        (folder / "model.onnx").rename(folder / "opened.onnx")
        (folder / "model.onnx").write_bytes(b"\x08\x07")  # the path names another file now
        assert open_bound_files(_job(folder), model, confined_descriptor) is None
    finally:
        model.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="a service that is not root keeps its own identity in its workers")
def test_a_file_the_workers_identity_may_not_read_by_name_is_not_bound(folder: Path) -> None:
    weights = folder / "weights.bin"
    weights.chmod(0o600)  # root's own, as a root service's upload is
    fd = os.open(weights, os.O_RDONLY)
    try:
        assert not readable_as(65534, 65534, fd)
        weights.chmod(0o644)
        assert readable_as(65534, 65534, fd)
    finally:
        os.close(fd)
    weights.chmod(0o600)
    model = importer.open_model(folder / "model.onnx")
    try:
        assert open_bound_files(_job(folder), model, confined_descriptor) is None
    finally:
        model.close()
