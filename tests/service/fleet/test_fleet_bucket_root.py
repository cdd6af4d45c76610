"""A data root in a bucket (`--data-root s3://BUCKET/PREFIX`), on a real SeaweedFS.

The bundled samples are put under a prefix; a real replica imports them by
path. What a registry relies on when it validates a model where it lives:
the same answer as from a folder (summary, tensors byte for byte, graph),
the path confined as a folder's is, objects bounded by the upload limits,
and a changed or removed object answering as a changed or removed file
does (409, 410), the model's graph refusing a changed model (409).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import obstore
import pytest
from support.paths import REPO
from support.service_harness import SAMPLES, ServiceProcess, assert_problem, model_id_of
from test_fleet_replicas import Fleet

from service.store.s3.objects import connect


class BucketFleet(Fleet):
    def __init__(self, servers: Any, folder: Path, data_root: str, *args: str) -> None:
        super().__init__(servers, folder, 1, "--data-root", data_root, *args)


@pytest.fixture(scope="module")
def bucket_root(fleet_servers: Any) -> Iterator[tuple[str, Any]]:
    """The samples as objects: (the data root's URL, an obstore client of it)."""
    url = fleet_servers.new_store_url()
    bucket, prefix = url.removeprefix("s3://").split("/", 1)
    objects = connect(bucket, prefix, fleet_servers.environ)
    for path in sorted(SAMPLES.rglob("*")):
        if path.is_file():
            obstore.put(objects, str(path.relative_to(SAMPLES)), path.read_bytes())
    yield url, objects


@pytest.fixture(scope="module")
def replica(fleet_servers: Any, bucket_root: tuple[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    fleet = BucketFleet(fleet_servers, tmp_path_factory.mktemp("bucket-root"), bucket_root[0], "--max-upload", "64KiB")
    yield fleet.replicas[0]
    fleet.stop()


def test_a_model_with_external_data_imports_from_the_bucket_as_from_a_folder(replica: ServiceProcess) -> None:
    with replica.client() as client:
        posted = client.post("/models", json={"path": "external/model.onnx"})
        assert posted.status_code == 201, posted.text
        summary = posted.json()
        externals = {"weights.bin": (SAMPLES / "external" / "weights.bin").read_bytes()}
        externals["more/bias.bin"] = (SAMPLES / "external" / "more" / "bias.bin").read_bytes()
        model = (SAMPLES / "external" / "model.onnx").read_bytes()
        assert summary["id"] == model_id_of(model, externals, origin="path")  # the id a folder's path import gives
        assert summary["input"] == "external/model.onnx"
        assert client.post("/models", json={"path": "./external/model.onnx"}).status_code == 200  # the same object
        tensors = client.get(f"/models/{summary['id']}/tensors").json()["items"]
        assert tensors and all(client.get(entry["href"]).status_code == 200 for entry in tensors)
        assert client.get(f"/models/{summary['id']}/graph").status_code == 200


def test_paths_are_confined_as_in_a_folder(replica: ServiceProcess) -> None:
    with replica.client() as client:
        for path in ("../add.onnx", "/add.onnx", "external/../../x.onnx", "%2e%2e/add.onnx", ""):
            answer = client.post("/models", json={"path": path})
            assert answer.status_code in (400, 422), (path, answer.text)
        assert_problem(client.post("/models", json={"path": "missing.onnx"}), 404, "not-found")


def test_an_object_over_the_upload_limit_is_refused(replica: ServiceProcess, bucket_root: tuple[str, Any]) -> None:
    obstore.put(bucket_root[1], "big.onnx", b"\0" * (65 << 10))
    with replica.client() as client:
        assert_problem(client.post("/models", json={"path": "big.onnx"}), 413, "payload-too-large")


def test_a_changed_or_removed_object_answers_as_a_changed_or_removed_file(replica: ServiceProcess, bucket_root: tuple[str, Any]) -> None:
    objects = bucket_root[1]
    obstore.put(objects, "mutable/add.onnx", (SAMPLES / "add.onnx").read_bytes())
    with replica.client() as client:
        model_id = client.post("/models", json={"path": "mutable/add.onnx"}).json()["id"]
        assert client.get(f"/models/{model_id}/tensors/W").status_code == 200
        obstore.put(objects, "mutable/add.onnx", (SAMPLES / "add.onnx").read_bytes() + b"\n")  # another object, another ETag
        assert_problem(client.get(f"/models/{model_id}/tensors/W"), 409, "tensor-source-changed")
        assert_problem(client.get(f"/models/{model_id}/graph"), 409, "model-source-changed")
        obstore.delete(objects, "mutable/add.onnx")
        assert_problem(client.get(f"/models/{model_id}/tensors/W"), 410, "tensor-source-gone")


def test_a_bad_bucket_url_is_refused_at_start() -> None:
    started = subprocess.run(
        [sys.executable, "-m", "service", "--data-root", "s3://No_Such..Bucket/x"], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert started.returncode == 2 and "--data-root must be a directory, or s3://BUCKET/PREFIX" in started.stderr
