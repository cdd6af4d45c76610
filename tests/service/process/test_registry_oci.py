"""The OCI push gate against a real registry (`POST /hooks/oci`, docs/registry.md "OCI registries").

Why a process: the registry is a real server (Debian's `docker-registry`,
CNCF distribution 2.8, which has no referrers API) that sends its own
notifications, with the configured bearer token, to a real service over TCP
after each push; the service pulls the artifact back from the registry, runs
its sandboxed workers, and pushes the verdict referrer to the registry, where
a client finds it by the referrers tag schema. One registry and one service
serve the module.

Shown here: a ModelPack artifact (a model and its external data as raw
weight layers, pushed with oras) gets a `pass` referrer within seconds,
listed under the tag `sha256-<hex>`, its layer the verdict JSON and its
subject the artifact, and the referrer's own push (and the index's) is not
validated in turn; a broken model's artifact gets a `refused` referrer; a tar
layer whose member is `../NAME` or an absolute path, or a layer whose path
annotation is `../NAME`, is refused and nothing is written outside the work area; a replayed event, or the same manifest
pushed again under another tag, runs nothing; a verdict due while the
registry is stopped is attached once it is started again, without a new
event; and, on a registry of its own notifying a service that checks
signatures, an artifact holding a folder signed with model_signing (its `model.sig` a layer of its own, or a tar
layer's member) passes the `signature` stage, and one byte of its external data layer changed fails it.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.faults import FaultPlan
from support.oci_registry import MISSING, OciRegistryServer, modelpack_config, oras_push, referrer_of, registry_available
from support.service_harness import ServiceProcess
from support.signed_folders import SAMPLE_FILES, SIGNATURE, signed_model_folder
from support.small_models import external_weight_model

pytestmark = pytest.mark.skipif(not registry_available(), reason=MISSING)
pytest.importorskip("oras", reason="the oras test dependency is not installed")

TOKEN = "the-notifications-token"
WEIGHT_RAW = "application/vnd.cncf.model.weight.v1.raw"
WEIGHT_TAR = "application/vnd.cncf.model.weight.v1.tar"
DOC_RAW = "application/vnd.cncf.model.doc.v1.raw"
FILEPATH = "org.cncf.model.filepath"
VERDICT_JSON = "application/vnd.onnx-import.verdict.v1+json"
EVENTS = "application/vnd.docker.distribution.events.v1+json"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oci")


@pytest.fixture(scope="module")
def registry(folder: Path) -> Iterator[OciRegistryServer]:
    server = OciRegistryServer(folder / "registry")
    server.folder.mkdir()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def service(registry: OciRegistryServer, folder: Path) -> Iterator[ServiceProcess]:
    root = folder / "service"
    root.mkdir()
    service = ServiceProcess(root / "store", root, "--oci-registry", registry.url, env={"ONNX_SERVICE_OCI_WEBHOOK_SECRET": TOKEN})
    service.start()
    try:
        registry.start(service.url + "/hooks/oci", TOKEN)
        yield service
    finally:
        service.stop()


def file_in(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def push_event(registry: OciRegistryServer, repository: str, digest: str, event_id: str) -> dict[str, Any]:
    """A manifest push's event as the registry sends it (its URL elsewhere: the service never follows it)."""
    return {"id": event_id, "timestamp": "2026-12-05T00:00:00Z", "action": "push",
            "target": {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "repository": repository,
                       "url": f"http://elsewhere.invalid/v2/{repository}/manifests/{digest}", "tag": "v1"},
            "request": {"host": registry.host, "method": "PUT"}, "actor": {}, "source": {"addr": registry.host}}  # fmt: skip


def notify(service: ServiceProcess, events: list[dict[str, Any]]) -> httpx.Response:
    """`events` posted to the service's hook as the registry posts them."""
    return httpx.post(service.url + "/hooks/oci", content=json.dumps({"events": events}),
                      headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": EVENTS}, timeout=30)  # fmt: skip


def verdict_referrer(registry: OciRegistryServer, repository: str, digest: str, timeout: float = 90.0) -> dict[str, Any]:
    """The gate's referrer of `digest` (the verdict JSON: the service has no signing key), once it is there."""
    return referrer_of(registry, repository, digest, VERDICT_JSON, timeout)


def verdict_of(registry: OciRegistryServer, repository: str, referrer: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the referrer's manifest, its verdict JSON)."""
    manifest = registry.manifest(repository, referrer["digest"]).json()
    return manifest, json.loads(registry.blob(repository, manifest["layers"][0]["digest"]))


def test_a_modelpack_artifact_with_external_data_gets_a_pass_referrer(
    registry: OciRegistryServer, service: ServiceProcess, tmp_path: Path
) -> None:
    model = file_in(tmp_path, "model.onnx", external_weight_model("weights.bin", 1024))
    weights = file_in(tmp_path, "weights.bin", bytes(4096))
    pushed_at = time.monotonic()
    layers = [(model, WEIGHT_RAW, {FILEPATH: "model.onnx"}), (weights, WEIGHT_RAW, {FILEPATH: "weights.bin"})]
    digest = oras_push(registry, "models/net:v1", layers, modelpack_config(tmp_path))
    referrer = verdict_referrer(registry, "models/net", digest)
    took = time.monotonic() - pushed_at
    assert referrer["annotations"]["org.onnx-import.verdict"] == "pass", referrer
    assert referrer["annotations"]["org.onnx-import.stages"] == "schema=pass,security=pass,shape=pass,runtime=pass,smoke=pass"
    manifest, verdict = verdict_of(registry, "models/net", referrer)
    assert manifest["subject"]["digest"] == digest and manifest["artifactType"] == VERDICT_JSON
    assert manifest["config"]["mediaType"] == "application/vnd.oci.empty.v1+json"
    assert manifest["layers"][0]["mediaType"] == VERDICT_JSON
    assert verdict["verdict"] == "pass" and verdict["digest"] == digest and verdict["repository"] == "models/net"
    assert [(entry["file"], entry["verdict"]) for entry in verdict["files"]] == [("model.onnx", "pass")]
    report = httpx.get(service.url + verdict["report"], timeout=30)  # the SARIF report, by its link, without a key
    assert report.status_code == 200 and report.json()["runs"][0]["properties"]["model_id"] == verdict["model_id"]
    # the referrer's own push (and the index's under the tag) were not validated: no referrer of the referrer
    service.wait_for_log(f"oci: oci://{registry.host}/models/net@{referrer['digest']} is no ONNX artifact: ignored")
    assert registry.referrers_by_tag("models/net", referrer["digest"]) == []
    assert took < 60, f"the verdict took {took:.1f} s"


def test_a_broken_model_gets_a_refused_referrer(registry: OciRegistryServer, service: ServiceProcess, tmp_path: Path) -> None:
    model = file_in(tmp_path, "broken.onnx", b"\x08\x07\x12\xff\xff\xff\xff\x0f not a model")
    digest = oras_push(registry, "models/broken:v1", [(model, WEIGHT_RAW, {FILEPATH: "broken.onnx"})], modelpack_config(tmp_path))
    referrer = verdict_referrer(registry, "models/broken", digest)
    assert referrer["annotations"]["org.onnx-import.verdict"] in ("fail", "refused"), referrer
    _, verdict = verdict_of(registry, "models/broken", referrer)
    assert verdict["verdict"] == referrer["annotations"]["org.onnx-import.verdict"] and verdict["reason"]


@pytest.mark.parametrize("member", ["../escaped-by-dots.onnx", "/tmp/escaped-absolute.onnx"])
def test_a_tar_layer_leaving_the_artifact_is_refused(
    registry: OciRegistryServer, service: ServiceProcess, folder: Path, tmp_path: Path, member: str
) -> None:
    data = external_weight_model("weights.bin", 16)
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as archive:
        entry = tarfile.TarInfo(member)
        entry.size = len(data)
        archive.addfile(entry, io.BytesIO(data))
    tar = file_in(tmp_path, "model.tar", layer.getvalue())
    repository = f"models/escape-{'dots' if '..' in member else 'absolute'}"
    digest = oras_push(registry, f"{repository}:v1", [(tar, WEIGHT_TAR, {FILEPATH: "model.onnx"})], modelpack_config(tmp_path))
    referrer = verdict_referrer(registry, repository, digest)
    assert referrer["annotations"]["org.onnx-import.verdict"] == "refused", referrer
    _, verdict = verdict_of(registry, repository, referrer)
    assert "leaves the artifact" in verdict["reason"], verdict
    name = Path(member).name
    assert not Path("/tmp", name).exists()
    assert not list(folder.rglob(name)), "a member was written outside the work area"


def test_a_layer_path_leaving_the_artifact_is_refused(registry: OciRegistryServer, service: ServiceProcess, tmp_path: Path) -> None:
    model = file_in(tmp_path, "model.onnx", external_weight_model("weights.bin", 16))
    digest = oras_push(registry, "models/escape-path:v1", [(model, WEIGHT_RAW, {FILEPATH: "../model.onnx"})], modelpack_config(tmp_path))
    referrer = verdict_referrer(registry, "models/escape-path", digest)
    assert referrer["annotations"]["org.onnx-import.verdict"] == "refused", referrer
    assert "leaves the artifact" in verdict_of(registry, "models/escape-path", referrer)[1]["reason"]


def test_a_replayed_event_runs_nothing(registry: OciRegistryServer, service: ServiceProcess, tmp_path: Path) -> None:
    model = file_in(tmp_path, "model.onnx", external_weight_model("weights.bin", 64))
    weights = file_in(tmp_path, "weights.bin", bytes(256))
    layers = [(model, WEIGHT_RAW, {FILEPATH: "model.onnx"}), (weights, WEIGHT_RAW, {FILEPATH: "weights.bin"})]
    digest = oras_push(registry, "models/replayed:v1", layers, modelpack_config(tmp_path))
    verdict_referrer(registry, "models/replayed", digest)
    said = f"oci: validating oci://{registry.host}/models/replayed@{digest}"
    assert service.log.read_text().count(said) == 1
    event = push_event(registry, "models/replayed", digest, "replayed-event")
    answer = notify(service, [event, event])
    assert answer.status_code == 200 and answer.json()["duplicates"] == 2, answer.text
    delivered = service.log.read_text().count("POST /hooks/oci 200")
    oras_push(registry, "models/replayed:v2", layers, modelpack_config(tmp_path))  # the same manifest under another tag
    deadline = time.monotonic() + 30
    while service.log.read_text().count("POST /hooks/oci 200") == delivered:  # the registry's notification of it, answered
        assert time.monotonic() < deadline, "the registry sent no notification of the second tag"
        time.sleep(0.1)
    assert service.log.read_text().count(said) == 1
    assert len([entry for entry in registry.referrers_by_tag("models/replayed", digest) if entry["artifactType"] == VERDICT_JSON]) == 1


def test_a_verdict_due_while_the_registry_is_stopped_is_attached_once_it_is_back(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The registry stopped while the workers check the model (held 3 s each by a test fault), so it is
    down when the verdict referrer is due: the service keeps it, and once the registry is started again (the
    same port and storage) the referrer appears without a new event, the artifact validated once. A registry
    and a service of its own: the registry sends no notifications (the one event is posted by hand), so
    nothing but the kept verdict can bring the referrer."""
    folder = tmp_path_factory.mktemp("oci-down")
    registry = OciRegistryServer(folder / "registry")
    registry.folder.mkdir()
    service = ServiceProcess(folder / "store", folder, "--oci-registry", registry.url,
                             env={"ONNX_SERVICE_OCI_WEBHOOK_SECRET": TOKEN, **FaultPlan(worker_sleep=3).env()})  # fmt: skip
    try:
        registry.start(None)
        service.start()
        model = file_in(folder, "model.onnx", external_weight_model("weights.bin", 64))
        weights = file_in(folder, "weights.bin", bytes(256))
        layers = [(model, WEIGHT_RAW, {FILEPATH: "model.onnx"}), (weights, WEIGHT_RAW, {FILEPATH: "weights.bin"})]
        digest = oras_push(registry, "models/kept:v1", layers, modelpack_config(folder))
        assert notify(service, [push_event(registry, "models/kept", digest, "kept-event")]).status_code == 202
        deadline = time.monotonic() + 60
        while not service.sleeping_workers():  # the layers are pulled: a worker checks the model
            assert time.monotonic() < deadline, service.log.read_text()[-2000:]
            time.sleep(0.02)
        registry.stop()
        service.wait_for_log(f"oci: the verdict of oci://{registry.host}/models/kept@{digest} is kept to attach later", timeout=90)
        registry.start(None)
        referrer = verdict_referrer(registry, "models/kept", digest, timeout=60)
        assert referrer["annotations"]["org.onnx-import.verdict"] == "pass", referrer
        service.wait_for_log("is attached: verdict referrer", timeout=10)
        assert service.log.read_text().count(f"oci: validating oci://{registry.host}/models/kept@{digest}") == 1
    finally:
        service.stop()
        registry.stop()


def test_a_signed_artifact_passes_the_signature_stage_and_a_changed_external_layer_fails_it(tmp_path: Path) -> None:
    """A registry and a service of their own (--oci-checks with `signature`, --trusted-signers): the sample folder
    (a model, its external data, one file in a subfolder) signed with model_signing's API, pushed as a ModelPack
    artifact of raw layers (model.sig one of them), as one tar layer of the folder below `net/`, and as raw layers
    with one byte of the external data layer changed after signing."""
    pytest.importorskip("model_signing", reason="the signing extra is not installed")
    folder, signer = signed_model_folder(tmp_path / "signed")
    registry = OciRegistryServer(tmp_path / "registry")
    registry.folder.mkdir()
    service = ServiceProcess(
        tmp_path / "store", tmp_path, "--oci-registry", registry.url, "--oci-checks", "schema,signature",
        "--trusted-signers", str(signer.public_key), env={"ONNX_SERVICE_OCI_WEBHOOK_SECRET": TOKEN},
    )  # fmt: skip
    try:
        service.start()
        registry.start(service.url + "/hooks/oci", TOKEN)
        raw = [(folder / name, WEIGHT_RAW, {FILEPATH: name}) for name in SAMPLE_FILES]
        raw.append((folder / SIGNATURE, DOC_RAW, {FILEPATH: SIGNATURE}))
        archive = tmp_path / "net.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(folder, "net")
        weights = bytearray((folder / "weights.bin").read_bytes())
        weights[7] ^= 1
        changed = file_in(tmp_path / "changed", "weights.bin", bytes(weights))
        pushes = {
            "models/signed": (raw, "pass"),
            "models/signed-tar": ([(archive, WEIGHT_TAR, {FILEPATH: "net/model.onnx"})], "pass"),
            "models/signed-changed": ([*raw[:1], (changed, WEIGHT_RAW, {FILEPATH: "weights.bin"}), *raw[2:]], "fail"),
        }
        for repository, (layers, expected) in pushes.items():
            digest = oras_push(registry, f"{repository}:v1", layers, modelpack_config(tmp_path))
            referrer = verdict_referrer(registry, repository, digest)
            annotations = referrer["annotations"]
            assert annotations["org.onnx-import.verdict"] == expected, (repository, referrer)
            assert annotations["org.onnx-import.stages"] == f"signature={expected},schema=pass", (repository, referrer)
        reason = verdict_of(registry, "models/signed-changed", referrer)[1]["reason"]
        assert "weights.bin" in reason, reason
    finally:
        service.stop()
        registry.stop()
