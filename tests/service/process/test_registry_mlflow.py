"""The MLflow registry gate against a real MLflow server (`POST /hooks/mlflow`).

Processes are the point: MLflow (`mlflow server`, SQLite, its artifact
proxy) sends its own signed webhooks to a real service, which answers 202,
validates in the background in its sandboxed workers and writes the verdict
back through MLflow's REST API; and the last test takes MLflow away in the
middle of a validation and brings it back. One MLflow server serves the
module (a start costs about 30 s, a stop 10): the last test's service reaches
it through a TCP proxy (support/tcp_proxy.py) that goes away as a stopped
server does (its connections cut, its port refusing) and comes back.

Shown here: a passing version (runs:/ source, one .onnx file) and one logged
with `mlflow.onnx.log_model` whose weights are external data (models:/m-...,
the MLmodel's onnx flavour) are tagged pass and given `validated`; a failing
one is tagged fail and never given it, and is compared with the version
holding it (the diff's counts as a tag, and its link); the report and diff
links open for a caller with no tenant of its own; a slow version 1 and a
fast version 2 created a second apart both pass and leave the alias on 2
(version 1's tags say it was kept there); an encoder, a decoder and a
decoder with past logged into one folder (Hugging Face Optimum's layout)
each pass, each in the tags; a model that runs at batch 1 but not at 2 is
tagged fail, its reason naming the binding; a version whose real source is a
file:// path is refused with the reason; forged, unsigned and stale
deliveries are 401 and change nothing; a replayed delivery is not validated
twice; a signed delivery whose `source` names a local file is not fetched
from there (MLflow's record of the version is, and it is refused); a version
whose folder is signed (`model.sig`) passes the `signature` stage of a
service that checks signatures, and one with a file changed after signing
fails it; and a verdict MLflow could not take while it was down is written
once it is back, its attestation with it. The services sign
(`--signing-key`): each version's attestation is logged beside its folder
and tagged; downloaded through MLflow, it verifies with `cryptography` alone
and with `onnx-import verify` (its subjects the version's files, its
resource `models:/NAME/VERSION`, PASSED), a failing version's says FAILED,
and the models of one version have one each.

Why a process: MLflow is a real server process (`mlflow server`, its artifact
proxy) that delivers its own signed webhooks to the service over TCP, and the
service writes its verdict back through MLflow's REST API; the last test takes
MLflow away mid-validation (a TCP proxy that goes away as a stopped server
does), and the validations are counted in the service's log.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from cryptography.hazmat.primitives.serialization import load_pem_public_key
from onnx import TensorProto, helper, numpy_helper
from support.attestations import key_pair, statement_checked_by_hand
from support.batch_models import baked_batch
from support.faults import FaultPlan
from support.mlflow_server import MlflowServer
from support.service_harness import SAMPLES, ServiceProcess, model_id_of
from support.signed_folders import Signer, make_signer, sign
from support.small_models import summed_external_model, weight_model
from support.tcp_proxy import TcpProxy

from service.registry.signature import signature_of
from service.registry.verdict import diff_said

mlflow = pytest.importorskip("mlflow", reason="the mlflow test dependency is not installed")

SECRET = "the-webhook-secret"
VERDICT = "onnx_import.verdict"
ATTESTATION = "onnx_import.attestation"
COMMAND = Path(sys.executable).with_name("onnx-import")
MLFLOW = Path(sys.executable).with_name("mlflow")


def range_bomb() -> bytes:
    """One Range node asking for 4.3e9 floats: security fails it."""
    start, limit, delta = (numpy_helper.from_array(np.array(value, np.float32), name) for name, value in
                           (("start", 0.0), ("limit", 4.3e9), ("delta", 1.0)))  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Range", ["start", "limit", "delta"], ["y"], name="bomb")], "range_bomb", [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [start, limit, delta],
    )  # fmt: skip
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    return data


def client_of(server: MlflowServer) -> Any:
    return mlflow.MlflowClient(tracking_uri=server.url, registry_uri=server.url)


def register_folder(server: MlflowServer, folder: Path, name: str, files: dict[str, bytes]) -> str:
    """A run whose artifacts hold `files` under model/, registered as a new version of `name` (runs:/RUN/model)."""
    client = client_of(server)
    for file_name, data in files.items():
        (folder / file_name).write_bytes(data)
    run = client.create_run(client.get_experiment_by_name("Default").experiment_id)
    client.log_artifacts(run.info.run_id, str(folder), artifact_path="model")
    client.set_terminated(run.info.run_id)
    if not client.search_registered_models(filter_string=f"name = '{name}'"):
        client.create_registered_model(name)
    return str(client.create_model_version(name, f"runs:/{run.info.run_id}/model", run_id=run.info.run_id).version)


def register_local(server: MlflowServer, folder: Path, name: str) -> str:
    """A version whose source is a file:// path (a run of an experiment that stores artifacts on local disk)."""
    client = client_of(server)
    experiment = client.create_experiment(f"local-{uuid.uuid4().hex[:8]}", artifact_location=folder.as_uri())
    run = client.create_run(experiment)
    client.set_terminated(run.info.run_id)
    client.create_registered_model(name)
    return str(client.create_model_version(name, f"{run.info.artifact_uri}/model", run_id=run.info.run_id).version)


def tags_when_validated(server: MlflowServer, name: str, version: str, timeout: float = 120.0) -> dict[str, str]:
    client = client_of(server)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        tags: dict[str, str] = client.get_model_version(name, version).tags
        if VERDICT in tags:
            return tags
        time.sleep(0.5)
    raise AssertionError(f"{name} version {version} was not given a verdict in {timeout} s")


def alias_version(server: MlflowServer, name: str, alias: str = "validated") -> str | None:
    response = httpx.get(f"{server.url}/api/2.0/mlflow/registered-models/alias", params={"name": name, "alias": alias})
    return str(response.json()["model_version"]["version"]) if response.status_code == 200 else None


def delivery(name: str, version: str, source: str, *, secret: str = SECRET, at: float | None = None) -> tuple[bytes, dict[str, str]]:
    """A model_version.created delivery signed as MLflow signs it."""
    payload = {"entity": "model_version", "action": "created", "timestamp": "2026-01-01T00:00:00+00:00",
               "data": {"name": name, "version": version, "source": source, "run_id": "", "tags": {}, "description": ""}}  # fmt: skip
    body = json.dumps(payload).encode()
    delivery_id, timestamp = str(uuid.uuid4()), str(int(at if at is not None else time.time()))
    headers = {"Content-Type": "application/json", "X-MLflow-Delivery-Id": delivery_id, "X-MLflow-Timestamp": timestamp,
               "X-MLflow-Signature": signature_of(secret, delivery_id, timestamp, body)}  # fmt: skip
    return body, headers


def attested(server: MlflowServer, tags: dict[str, str], public: Path, into: Path) -> tuple[Path, dict[str, Any]]:
    """The version's attestation downloaded through MLflow (the tag's URI, as `mlflow artifacts download -u` takes it),
    and its Statement, the signature checked with `cryptography` alone and the service's public key."""
    local = Path(mlflow.artifacts.download_artifacts(artifact_uri=tags[ATTESTATION], dst_path=str(into), tracking_uri=server.url))
    return local, statement_checked_by_hand(local.read_bytes(), load_pem_public_key(public.read_bytes()))


def downloaded(server: MlflowServer, uri: str, into: Path) -> Path:
    """`mlflow artifacts download -u URI -d INTO`, as a user runs it (MLFLOW_TRACKING_URI names the server): where it put it."""
    environ = {**os.environ, "MLFLOW_TRACKING_URI": server.url}
    done = subprocess.run([str(MLFLOW), "artifacts", "download", "-u", uri, "-d", str(into)], capture_output=True, text=True,
                          env=environ, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip().splitlines()[-1])


def validations_logged(service: ServiceProcess, name: str) -> int:
    return service.log.read_text().count(f"mlflow: validating {name} version")


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MlflowServer]:
    server = MlflowServer(tmp_path_factory.mktemp("mlflow")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def quiet(mlflow_server: MlflowServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Versions registered before the webhook exists (MLflow delivers nothing for them): the tests deliver by hand."""
    folder = tmp_path_factory.mktemp("quiet")
    return {
        "quiet": register_folder(mlflow_server, folder, "quiet", {"model.onnx": weight_model(31)}),
        "quiet-file": register_local(mlflow_server, tmp_path_factory.mktemp("local-artifacts"), "quiet-file"),
        "restarted": register_folder(mlflow_server, tmp_path_factory.mktemp("restarted"), "restarted", {"model.onnx": weight_model(51)}),
    }


@pytest.fixture(scope="module")
def signing(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The services' signing key and its public key (PEM files)."""
    private, public, _ = key_pair(tmp_path_factory.mktemp("keys"), "p256")
    return private, public


@pytest.fixture(scope="module")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Signer:
    return make_signer(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="module")
def signed(mlflow_server: MlflowServer, signer: Signer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Versions whose folder is signed (model_signing's API), registered before the webhook exists: `signed`, as signed
    (a model, its external data, one in a subfolder, a README); `signed-changed`, its README changed after signing."""
    versions = {}
    for name in ("signed", "signed-changed"):
        folder = tmp_path_factory.mktemp(name) / "model"
        shutil.copytree(SAMPLES / "external", folder)
        (folder / "README.md").write_bytes(b"a signed model\n")
        sign(folder, signer)
        if name == "signed-changed":
            (folder / "README.md").write_bytes(b"changed after signing\n")
        versions[name] = register_folder(mlflow_server, folder, name, {})
    return versions


@pytest.fixture(scope="module")
def service(
    mlflow_server: MlflowServer,
    quiet: dict[str, str],
    signing: tuple[Path, Path],
    signed: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ServiceProcess]:
    # the hook's tenant is the default, mlflow: the anonymous caller reads its reports through the tags' links alone
    folder = tmp_path_factory.mktemp("service")
    service = ServiceProcess(
        folder / "store", folder, "--mlflow-url", mlflow_server.url, "--signing-key", str(signing[0]),
        env={"ONNX_SERVICE_MLFLOW_WEBHOOK_SECRET": SECRET},
    ).start()  # fmt: skip
    try:
        client_of(mlflow_server).create_webhook(
            "onnx-import", service.url + "/hooks/mlflow", events=["model_version.created"], secret=SECRET
        )
        time.sleep(1.5)  # MLflow's list of webhooks is cached 1 s (MLFLOW_WEBHOOK_CACHE_TTL)
        yield service
    finally:
        service.stop()


def test_a_passing_version_is_tagged_pass_and_given_the_alias(mlflow_server: MlflowServer, service: ServiceProcess, tmp_path: Path) -> None:
    version = register_folder(mlflow_server, tmp_path, "gate-pass", {"model.onnx": weight_model(1)})
    tags = tags_when_validated(mlflow_server, "gate-pass", version)
    assert tags[VERDICT] == "pass", tags
    assert tags["onnx_import.checks"] == "schema=pass,security=pass,shape=pass,runtime=pass,smoke=pass"
    assert "onnx_import.reason" not in tags
    model_id = tags["onnx_import.model_id"]
    assert tags["onnx_import.report"].startswith("/links/")
    report = httpx.get(service.url + tags["onnx_import.report"], timeout=30)
    assert report.status_code == 200 and report.json()["version"] == "2.1.0"
    assert report.json()["runs"][0]["properties"]["model_id"] == model_id
    assert httpx.get(f"{service.url}/models/{model_id}", timeout=30).status_code == 404  # the tenant's model, not the caller's
    assert alias_version(mlflow_server, "gate-pass") == version
    assert "onnx_import.compared_with" not in tags and "onnx_import.diff" not in tags  # no version held the alias before


def test_a_versions_attestation_is_logged_beside_it_and_verifies_with_the_services_key(
    mlflow_server: MlflowServer, service: ServiceProcess, signing: tuple[Path, Path], tmp_path: Path
) -> None:
    """As a deployer fetches it (docs/registry.md): the tag's URI and the version downloaded with MLflow's command
    line, the attestation's signature checked by hand; its subjects are the version's files by name and SHA-256, its
    resource the version, its result PASSED. The version's folder holds the model's files only, and `onnx-import
    verify` accepts it."""
    files = {"model.onnx": summed_external_model("w.bin"), "w.bin": np.float32(5).tobytes()}
    (tmp_path / "logged").mkdir()
    version = register_folder(mlflow_server, tmp_path / "logged", "gate-attested", files)
    tags = tags_when_validated(mlflow_server, "gate-attested", version)
    assert tags[VERDICT] == "pass", tags
    assert tags[ATTESTATION].startswith("mlflow-artifacts:/"), tags
    assert tags[ATTESTATION].endswith(f"/artifacts/model.onnx-import/gate-attested/v{version}/model.onnx.sigstore.json"), tags
    attestation = downloaded(mlflow_server, tags[ATTESTATION], tmp_path / "attestation")
    statement = statement_checked_by_hand(attestation.read_bytes(), load_pem_public_key(signing[1].read_bytes()))
    assert {subject["name"]: subject["digest"]["sha256"] for subject in statement["subject"]} == {
        name: hashlib.sha256(data).hexdigest() for name, data in files.items()
    }
    assert statement["predicate"]["resourceUri"] == f"models:/gate-attested/{version}"
    assert statement["predicate"]["verificationResult"] == "PASSED"
    model = downloaded(mlflow_server, f"models:/gate-attested/{version}", tmp_path / "deployed")
    assert sorted(path.name for path in model.iterdir()) == ["model.onnx", "w.bin"]  # nothing added to the model's folder
    command = [str(COMMAND), "verify", str(model), "--attestation", str(attestation), "--public-key", str(signing[1])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.filterwarnings("ignore::UserWarning")  # mlflow.onnx.log_model's own warnings about type hints
def test_a_version_logged_with_external_data_passes(mlflow_server: MlflowServer, service: ServiceProcess) -> None:
    mlflow.set_tracking_uri(mlflow_server.url)
    with mlflow.start_run():
        info = mlflow.onnx.log_model(onnx.load_from_string(weight_model(2, 4096)), name="model", registered_model_name="gate-external")
    version = str(info.registered_model_version)
    tags = tags_when_validated(mlflow_server, "gate-external", version)
    assert tags[VERDICT] == "pass", tags
    # the id the service gave it counts the model and its external data file, as MLflow holds them
    folder = client_of(mlflow_server).get_logged_model(info.model_id).artifact_location.removeprefix("mlflow-artifacts:/")
    proxy = f"{mlflow_server.url}/api/2.0/mlflow-artifacts/artifacts"
    names = [entry["path"] for entry in httpx.get(proxy, params={"path": folder}).json()["files"]]
    data_files = [name for name in names if name.endswith(".data")]
    assert len(data_files) == 1, names
    files = {name: httpx.get(f"{proxy}/{folder}/{name}").content for name in ["model.onnx", *data_files]}
    assert tags["onnx_import.model_id"] == model_id_of(files["model.onnx"], {data_files[0]: files[data_files[0]]})
    assert alias_version(mlflow_server, "gate-external") == version


def test_a_failing_version_is_tagged_fail_and_never_given_the_alias(
    mlflow_server: MlflowServer, service: ServiceProcess, signing: tuple[Path, Path], tmp_path: Path
) -> None:
    passing = register_folder(mlflow_server, tmp_path, "gate-fail", {"model.onnx": weight_model(3)})
    assert tags_when_validated(mlflow_server, "gate-fail", passing)[VERDICT] == "pass"
    (tmp_path / "model.onnx").unlink()
    failing = register_folder(mlflow_server, tmp_path, "gate-fail", {"bomb.onnx": range_bomb()})
    tags = tags_when_validated(mlflow_server, "gate-fail", failing)
    assert tags[VERDICT] == "fail", tags
    assert "security=fail" in tags["onnx_import.checks"]
    assert tags["onnx_import.reason"].startswith("security failed"), tags["onnx_import.reason"]
    assert tags["onnx_import.report"].startswith("/links/")
    assert alias_version(mlflow_server, "gate-fail") == passing  # still the version that passed
    # compared with the version holding the alias: the diff's counts, and where the whole diff is
    before = tags_when_validated(mlflow_server, "gate-fail", passing)["onnx_import.model_id"]
    assert tags["onnx_import.compared_with"] == passing
    assert tags["onnx_import.diff_url"].startswith("/links/")
    diff = httpx.get(service.url + tags["onnx_import.diff_url"], timeout=60).json()
    assert (diff["a"]["id"], diff["b"]["id"]) == (before, tags["onnx_import.model_id"])
    assert not diff["identical"] and tags["onnx_import.diff"] == diff_said(diff), (tags, diff["counts"])
    _, statement = attested(mlflow_server, tags, signing[1], tmp_path / "attestation")  # its attestation says so
    assert statement["predicate"]["verificationResult"] == "FAILED"
    assert "ONNX_IMPORT_STAGE_SECURITY_FAIL" in statement["predicate"]["verifiedLevels"]
    assert statement["predicate"]["resourceUri"] == f"models:/gate-fail/{failing}"


def test_a_version_that_runs_at_batch_1_but_not_at_2_fails_naming_the_binding(
    mlflow_server: MlflowServer, service: ServiceProcess, tmp_path: Path
) -> None:
    """The batch an exporter traced, baked into a Reshape: the smoke run's second binding fails it, and the
    tags say at which binding and which bindings ran; the alias is not given to it."""
    version = register_folder(mlflow_server, tmp_path, "gate-batch", {"model.onnx": baked_batch()})
    tags = tags_when_validated(mlflow_server, "gate-batch", version)
    assert tags[VERDICT] == "fail", tags
    assert "smoke=fail" in tags["onnx_import.checks"]
    said = "smoke failed: smoke-run-failed the run on synthetic inputs at the second binding (batch=2)"
    assert tags["onnx_import.reason"].startswith(said), tags["onnx_import.reason"]
    assert "Reshape" in tags["onnx_import.reason"]
    assert json.loads(tags["onnx_import.bindings"]) == {"model.onnx": [{"batch": 1}, {"batch": 2}]}
    assert alias_version(mlflow_server, "gate-batch") is None


def slow_model(files: int, padding: int) -> dict[str, bytes]:
    """A model summing `files` weights, each in an external data file of its own, fetched through MLflow's proxy
    in turn; the last file has `padding` bytes after its weight, all fetched, none run (the checks stay small)."""
    weights = {f"w{index}.bin": np.float32(index).tobytes() for index in range(files)}
    weights[f"w{files - 1}.bin"] += bytes(padding)
    return {"model.onnx": summed_external_model(*weights), **weights}


def test_a_slow_version_1_passing_after_a_fast_version_2_leaves_the_alias_on_2(
    mlflow_server: MlflowServer, service: ServiceProcess, tmp_path: Path
) -> None:
    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    slow = slow_model(300, 192 << 20)  # 300 external data files (a request each to MLflow's proxy), 192 MiB in all
    first = register_folder(mlflow_server, tmp_path / "v1", "gate-order", slow)
    time.sleep(1)
    second = register_folder(mlflow_server, tmp_path / "v2", "gate-order", {"model.onnx": weight_model(6)})
    assert (first, second) == ("1", "2")
    fast = tags_when_validated(mlflow_server, "gate-order", second)
    assert fast[VERDICT] == "pass", fast
    late = tags_when_validated(mlflow_server, "gate-order", first, timeout=300)
    assert late[VERDICT] == "pass", late
    assert alias_version(mlflow_server, "gate-order") == "2"
    assert late["onnx_import.alias"] == "kept on version 2 (newer)", (late, fast)  # version 1 ended last, and left it
    assert fast["onnx_import.alias"] == "moved here (no version held it)"


def test_an_encoder_and_decoders_in_one_version_each_pass(
    mlflow_server: MlflowServer, service: ServiceProcess, signing: tuple[Path, Path], tmp_path: Path
) -> None:
    """Hugging Face Optimum's layout, logged file by file into one folder: every .onnx file is checked and reported,
    and attested: the tag names a folder holding an attestation per file."""
    client = client_of(mlflow_server)
    run = client.create_run(client.get_experiment_by_name("Default").experiment_id)
    names = ["encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx"]
    for seed, name in enumerate(names, start=71):
        (tmp_path / name).write_bytes(weight_model(seed))
        client.log_artifact(run.info.run_id, str(tmp_path / name), artifact_path="model")
    (tmp_path / "config.json").write_text('{"model_type": "t5"}')
    client.log_artifact(run.info.run_id, str(tmp_path / "config.json"), artifact_path="model")
    client.set_terminated(run.info.run_id)
    client.create_registered_model("gate-optimum")
    version = str(client.create_model_version("gate-optimum", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id).version)
    tags = tags_when_validated(mlflow_server, "gate-optimum", version)
    assert tags[VERDICT] == "pass", tags
    files = json.loads(tags["onnx_import.files"])
    assert [entry["file"] for entry in files] == sorted(names) and {entry["verdict"] for entry in files} == {"pass"}
    assert tags["onnx_import.model_id"] == files[0]["model_id"]
    assert len({entry["model_id"] for entry in files}) == 3
    for entry in files:
        assert f"{entry['file']}: schema=pass,security=pass,shape=pass,runtime=pass,smoke=pass" in tags["onnx_import.checks"]
    report = httpx.get(service.url + tags["onnx_import.report"], timeout=30)  # one link, no key: a run per file
    assert report.status_code == 200 and report.json()["version"] == "2.1.0"
    runs = {run["properties"]["model_id"]: json.dumps(run) for run in report.json()["runs"]}
    assert sorted(runs) == sorted(entry["model_id"] for entry in files)
    for entry in files:
        assert f"gate-optimum/{version}/{entry['file']}" in runs[entry["model_id"]]  # each run names its file (a URI: models%3A/...)
    assert alias_version(mlflow_server, "gate-optimum") == version
    folder = Path(
        mlflow.artifacts.download_artifacts(artifact_uri=tags[ATTESTATION], dst_path=str(tmp_path / "a"), tracking_uri=mlflow_server.url)
    )
    assert sorted(path.name for path in folder.iterdir()) == sorted(f"{name}.sigstore.json" for name in names)
    public = load_pem_public_key(signing[1].read_bytes())
    for name in names:
        statement = statement_checked_by_hand((folder / f"{name}.sigstore.json").read_bytes(), public)
        assert statement["predicate"]["resourceUri"] == f"models:/gate-optimum/{version}/{name}"
        assert [subject["name"] for subject in statement["subject"]] == [name]


def test_a_version_whose_source_is_a_local_path_is_refused(mlflow_server: MlflowServer, service: ServiceProcess, tmp_path: Path) -> None:
    version = register_local(mlflow_server, tmp_path, "gate-local")
    tags = tags_when_validated(mlflow_server, "gate-local", version)
    assert tags[VERDICT] == "refused", tags
    assert "is a local path" in tags["onnx_import.reason"]
    assert "onnx_import.model_id" not in tags
    assert alias_version(mlflow_server, "gate-local") is None


def test_forged_and_stale_deliveries_are_401_and_a_replay_validates_once(
    mlflow_server: MlflowServer, service: ServiceProcess, quiet: dict[str, str]
) -> None:
    version = quiet["quiet"]
    url = service.url + "/hooks/mlflow"
    forged = delivery("quiet", version, "runs:/x/model", secret="not-the-secret")
    stale = delivery("quiet", version, "runs:/x/model", at=time.time() - 600)
    unsigned_body, unsigned_headers = delivery("quiet", version, "runs:/x/model")
    del unsigned_headers["X-MLflow-Signature"]
    body, headers = delivery("quiet", version, "runs:/x/model")
    tampered = body.replace(b'"version": "' + version.encode(), b'"version": "9')
    for attempt_body, attempt_headers in (forged, stale, (unsigned_body, unsigned_headers), (tampered, headers)):
        response = httpx.post(url, content=attempt_body, headers=attempt_headers)
        assert response.status_code == 401, response.text
        assert response.headers["content-type"] == "application/problem+json"
    assert "more than 300 s" in httpx.post(url, content=stale[0], headers=stale[1]).json()["detail"]
    time.sleep(2)
    assert VERDICT not in client_of(mlflow_server).get_model_version("quiet", version).tags
    assert validations_logged(service, "quiet") == 0
    assert httpx.post(url, content=body, headers=headers).status_code == 202  # the genuine one, after the forged ones
    assert tags_when_validated(mlflow_server, "quiet", version)[VERDICT] == "pass"
    replay = httpx.post(url, content=body, headers=headers)
    assert replay.status_code == 200 and replay.json()["status"] == "duplicate"
    time.sleep(1)
    assert validations_logged(service, "quiet") == 1


def test_a_delivery_naming_a_local_file_fetches_what_mlflow_records(
    mlflow_server: MlflowServer, service: ServiceProcess, quiet: dict[str, str], tmp_path: Path
) -> None:
    local = tmp_path / "good.onnx"
    local.write_bytes(weight_model(41))  # a model that would pass, if the service read the payload's source
    body, headers = delivery("quiet-file", quiet["quiet-file"], local.as_uri())
    assert httpx.post(service.url + "/hooks/mlflow", content=body, headers=headers).status_code == 202
    tags = tags_when_validated(mlflow_server, "quiet-file", quiet["quiet-file"])
    assert tags[VERDICT] == "refused", tags
    assert "is a local path" in tags["onnx_import.reason"] and str(local) not in tags["onnx_import.reason"]
    assert alias_version(mlflow_server, "quiet-file") is None


def test_a_signed_version_passes_the_signature_stage_and_a_changed_file_fails_it(
    mlflow_server: MlflowServer, service: ServiceProcess, signed: dict[str, str], signer: Signer, tmp_path: Path
) -> None:
    """A service of its own that checks signatures (--mlflow-checks with `signature`, --trusted-signers), given the
    deliveries by hand: the gate fetches the folder's model.sig and other files through MLflow's proxy."""
    checking = ServiceProcess(
        tmp_path / "store", tmp_path, "--mlflow-url", mlflow_server.url, "--mlflow-checks", "signature,schema",
        "--trusted-signers", str(signer.public_key), env={"ONNX_SERVICE_MLFLOW_WEBHOOK_SECRET": SECRET},
    ).start()  # fmt: skip
    try:
        for name, verdict in (("signed", "pass"), ("signed-changed", "fail")):
            body, headers = delivery(name, signed[name], f"runs:/x/{name}")
            assert httpx.post(checking.url + "/hooks/mlflow", content=body, headers=headers).status_code == 202
            tags = tags_when_validated(mlflow_server, name, signed[name])
            assert tags[VERDICT] == verdict, tags
            assert tags["onnx_import.checks"] == f"signature={verdict},schema=pass", tags
    finally:
        checking.stop()
    assert alias_version(mlflow_server, "signed") == signed["signed"]
    assert alias_version(mlflow_server, "signed-changed") is None


def test_a_verdict_mlflow_missed_while_down_is_written_when_it_is_back(
    mlflow_server: MlflowServer, quiet: dict[str, str], signing: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The verdict and its attestation, kept while MLflow is away, are written once it is back."""
    folder = tmp_path_factory.mktemp("restart-service")
    version = quiet["restarted"]
    with TcpProxy(mlflow_server.port) as mlflow_link:
        service = ServiceProcess(
            folder / "store", folder, "--mlflow-url", mlflow_link.url, "--signing-key", str(signing[0]),
            env={"ONNX_SERVICE_MLFLOW_WEBHOOK_SECRET": SECRET, **FaultPlan(worker_sleep=3).env()},
        )  # fmt: skip
        try:
            service.start()
            body, headers = delivery("restarted", version, "runs:/x/model")
            assert httpx.post(service.url + "/hooks/mlflow", content=body, headers=headers).status_code == 202
            service.wait_for_log("models:/restarted/1 fetched through MLflow", timeout=60)
            mlflow_link.go_away()  # the workers still sleep: the verdict comes while MLflow is away
            service.wait_for_log("is kept to write later", timeout=60)
            assert VERDICT not in client_of(mlflow_server).get_model_version("restarted", version).tags
            mlflow_link.come_back()
            tags = tags_when_validated(mlflow_server, "restarted", version, timeout=60)
            assert tags[VERDICT] == "pass", tags
            assert alias_version(mlflow_server, "restarted") == version
            service.wait_for_log("the kept verdict of restarted version 1 is written", timeout=10)  # logged after the alias is set
            _, statement = attested(mlflow_server, tags, signing[1], folder / "attestation")
            assert statement["predicate"]["resourceUri"] == f"models:/restarted/{version}"
        finally:
            service.stop()
