"""Signed verdicts on OCI artifacts, and `onnx-import verify oci://REGISTRY/REPOSITORY@DIGEST` (docs/attestations.md "OCI artifacts").

Why a process: the registry is a real server (Debian's `docker-registry`,
CNCF distribution 2.8: no referrers API, so the referrer is found by the
referrers tag schema) notifying a real service that signs (`--signing-key`);
`onnx-import verify` runs as its console script, as an init container runs
it, pulling the artifact and its referrer from that registry over TCP.

Shown here: a passing artifact's referrer is the signed bundle (its artifact
type and layer `application/vnd.dev.sigstore.bundle.v0.3+json`, the verdict
and stages annotations kept), whose Statement, checked with `cryptography`
alone, names the artifact `oci://HOST/REPOSITORY@DIGEST` and its files by
their paths and SHA-256; it verifies (exit 0) and `--output` writes exactly
the attested files; a failing model's FAILED referrer, a wrong key and an
artifact without a referrer are refused (exit 1, saying why), and `--output`
then holds nothing; the same files pushed as another artifact (a model the
tenant holds with every stage: no worker runs) get an attestation naming that
artifact, which verifies; a refused artifact's referrer is the unsigned
verdict JSON (no check run to attest), which verify refuses; a tag instead of
a digest, a flag of the other form, a size that is none and an `--output` folder
that holds files are usage errors (64). On a registry no service watches, with
referrers attached as the gate attaches them (`oci_verdict.attach`) and signed
with the service's own signer: a model of the artifact left unattested, a
subject whose digest is not its file's, and a bundle naming another digest are
refused; the same digest under another host and repository (a copy) verifies;
the newest referrer decides (a later FAILED over an earlier PASSED). On a
registry that takes one account's Basic credentials only, verify is refused
(401) without them, and reads them from `$DOCKER_CONFIG/config.json` or
`--credentials FILE`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.attestations import key_pair, statement_checked_by_hand
from support.oci_registry import (
    MISSING,
    OCI_MANIFEST,
    ROBOT,
    OciRegistryServer,
    modelpack_config,
    oras_push,
    referrer_of,
    registry_available,
)
from support.service_harness import ServiceProcess
from support.small_models import external_weight_model, wrong_output_type

from service.attestation.attester import attester_for
from service.attestation.statement import Subject
from service.checks.outcome import StageResult, Status
from service.registry.oci_api import OciRegistry
from service.registry.oci_verdict import attach, verdict_document
from service.settings import load_settings

pytestmark = pytest.mark.skipif(not registry_available(), reason=MISSING)
pytest.importorskip("oras", reason="the oras test dependency is not installed")
pytest.importorskip("model_signing", reason="the signing extra is not installed")

COMMAND = Path(sys.executable).with_name("onnx-import")
TOKEN = "the-notifications-token"
BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"
VERDICT_JSON = "application/vnd.onnx-import.verdict.v1+json"
WEIGHT_RAW = "application/vnd.cncf.model.weight.v1.raw"
FILEPATH = "org.cncf.model.filepath"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("oci-verify")


@pytest.fixture(scope="module")
def keys(folder: Path) -> tuple[Path, Path, Any]:
    """(the service's signing key, its public key, the public key object)."""
    private, public, key = key_pair(folder, "p256")
    return private, public, key.public_key()


@pytest.fixture(scope="module")
def registry(folder: Path, keys: tuple[Path, Path, Any]) -> Iterator[OciRegistryServer]:
    """The registry, notifying a service that signs its verdicts."""
    server = OciRegistryServer(folder / "registry")
    server.folder.mkdir()
    root = folder / "service"
    root.mkdir()
    service = ServiceProcess(root / "store", root, "--oci-registry", server.url, "--signing-key", str(keys[0]),
                             env={"ONNX_SERVICE_OCI_WEBHOOK_SECRET": TOKEN})  # fmt: skip
    service.start()
    try:
        server.start(service.url + "/hooks/oci", TOKEN)
        yield server
    finally:
        server.stop()
        service.stop()


@pytest.fixture(scope="module")
def passing(registry: OciRegistryServer, folder: Path) -> tuple[str, dict[str, bytes]]:
    """A ModelPack artifact of a model and its external data in a subfolder, validated: (its digest, its files)."""
    files = {"net/model.onnx": external_weight_model("weights.bin", 1024), "net/weights.bin": bytes(4096)}
    pushed = folder / "passing"
    for name, data in files.items():
        (pushed / name).parent.mkdir(parents=True, exist_ok=True)
        (pushed / name).write_bytes(data)
    layers = [(pushed / name, WEIGHT_RAW, {FILEPATH: name}) for name in files]
    digest = oras_push(registry, "models/net:v1", layers, modelpack_config(folder))
    referrer_of(registry, "models/net", digest, BUNDLE)
    return digest, files


def verify(*args: str | Path, docker_config: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "DOCKER_CONFIG": str(docker_config), "HOME": str(docker_config)}
    return subprocess.run([str(COMMAND), "verify", *map(str, args)], capture_output=True, text=True, timeout=300, env=env)


def test_a_passing_artifact_carries_its_signed_attestation_and_verifies(
    registry: OciRegistryServer, passing: tuple[str, dict[str, bytes]], keys: tuple[Path, Path, Any], tmp_path: Path
) -> None:
    digest, files = passing
    entry = referrer_of(registry, "models/net", digest, BUNDLE)
    assert entry["annotations"]["org.onnx-import.verdict"] == "pass", entry
    assert entry["annotations"]["org.onnx-import.stages"] == "schema=pass,security=pass,shape=pass,runtime=pass,smoke=pass"
    manifest = registry.manifest("models/net", entry["digest"]).json()
    assert manifest["artifactType"] == BUNDLE and manifest["subject"]["digest"] == digest
    assert [layer["mediaType"] for layer in manifest["layers"]] == [BUNDLE]
    assert manifest["layers"][0]["annotations"] == {"org.onnx-import.model": "net/model.onnx"}
    bundle = registry.blob("models/net", manifest["layers"][0]["digest"])
    statement = statement_checked_by_hand(bundle, keys[2])  # cryptography alone, not our verify code
    assert statement["predicate"]["resourceUri"] == f"oci://{registry.host}/models/net@{digest}"
    assert statement["predicate"]["verificationResult"] == "PASSED"
    assert {subject["name"]: subject["digest"]["sha256"] for subject in statement["subject"]} == {
        name: hashlib.sha256(data).hexdigest() for name, data in files.items()
    }
    output = tmp_path / "models"
    done = verify(f"oci://{registry.host}/models/net@{digest}", "--public-key", keys[1], "--plain-http", "--output", output,
                  docker_config=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "net/model.onnx, net/weights.bin" in done.stdout and "PASSED" in done.stdout, done.stdout
    written = {path.relative_to(output).as_posix(): path.read_bytes() for path in output.rglob("*") if path.is_file()}
    assert written == files  # the attested files, nothing else (no config, no work folder)
    assert sorted(path.name for path in output.iterdir()) == ["net"]


def test_a_failing_model_s_failed_referrer_is_refused(
    registry: OciRegistryServer, keys: tuple[Path, Path, Any], folder: Path, tmp_path: Path
) -> None:
    model = tmp_path / "wrong.onnx"
    model.write_bytes(wrong_output_type())
    digest = oras_push(registry, "models/wrong:v1", [(model, WEIGHT_RAW, {FILEPATH: "wrong.onnx"})], modelpack_config(tmp_path))
    entry = referrer_of(registry, "models/wrong", digest, BUNDLE)
    assert entry["annotations"]["org.onnx-import.verdict"] == "fail", entry
    output = tmp_path / "models"
    done = verify(f"oci://{registry.host}/models/wrong@{digest}", "--public-key", keys[1], "--plain-http", "--output", output,
                  docker_config=tmp_path)  # fmt: skip
    assert done.returncode == 1, done.stdout
    assert "the attested result is FAILED" in done.stderr and "ONNX_IMPORT_STAGE_SHAPE_FAIL" in done.stderr, done.stderr
    assert list(output.iterdir()) == []


def test_the_same_files_in_another_artifact_are_attested_as_that_artifact(
    registry: OciRegistryServer, passing: tuple[str, dict[str, bytes]], keys: tuple[Path, Path, Any], folder: Path, tmp_path: Path
) -> None:
    first, files = passing
    layers = [(folder / "passing" / name, WEIGHT_RAW, {FILEPATH: name}) for name in files]
    config = tmp_path / "config.json"
    config.write_text('{"descriptor":{"name":"net-again"},"config":{"format":"onnx"},"modelfs":{"type":"layers","diffIds":[]}}')
    digest = oras_push(registry, "models/net:again", layers, (config, "application/vnd.cncf.model.config.v1+json"))
    assert digest != first
    entry = referrer_of(registry, "models/net", digest, BUNDLE)
    manifest = registry.manifest("models/net", entry["digest"]).json()
    statement = statement_checked_by_hand(registry.blob("models/net", manifest["layers"][0]["digest"]), keys[2])
    assert statement["predicate"]["resourceUri"] == f"oci://{registry.host}/models/net@{digest}"
    done = verify(f"oci://{registry.host}/models/net@{digest}", "--public-key", keys[1], "--plain-http", docker_config=tmp_path)
    assert done.returncode == 0, done.stderr


def test_a_refused_artifact_s_unsigned_verdict_is_refused(
    registry: OciRegistryServer, keys: tuple[Path, Path, Any], tmp_path: Path
) -> None:
    model = tmp_path / "broken.onnx"
    model.write_bytes(b"\x08\x07\x12\xff\xff\xff\xff\x0f not a model")
    digest = oras_push(registry, "models/broken:v1", [(model, WEIGHT_RAW, {FILEPATH: "broken.onnx"})], modelpack_config(tmp_path))
    entry = referrer_of(registry, "models/broken", digest, VERDICT_JSON)
    assert entry["annotations"]["org.onnx-import.verdict"] == "refused", entry
    done = verify(f"oci://{registry.host}/models/broken@{digest}", "--public-key", keys[1], "--plain-http", docker_config=tmp_path)
    assert done.returncode == 1 and "is not signed (its verdict: refused)" in done.stderr, done.stderr


def test_a_wrong_key_is_refused(registry: OciRegistryServer, passing: tuple[str, dict[str, bytes]], tmp_path: Path) -> None:
    _, other, _ = key_pair(tmp_path, "ed25519")
    done = verify(f"oci://{registry.host}/models/net@{passing[0]}", "--public-key", other, "--plain-http", docker_config=tmp_path)
    assert done.returncode == 1 and "wrong key" in done.stderr, done.stderr


@pytest.fixture(scope="module")
def alone(folder: Path) -> Iterator[OciRegistryServer]:
    """A registry whose pushes no service sees (it sends no notification): referrers are the test's own."""
    server = OciRegistryServer(folder / "alone")
    server.folder.mkdir()
    server.start(None)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def guarded(folder: Path) -> Iterator[OciRegistryServer]:
    """A registry no service watches that takes one account's Basic credentials only (`ROBOT`)."""
    server = OciRegistryServer(folder / "guarded")
    server.folder.mkdir()
    server.start(None, robot=True)
    yield server
    server.stop()


def two_models(
    alone: OciRegistryServer, repository: str, folder: Path, auth: tuple[str, str] | None = None
) -> tuple[str, dict[str, Any], dict[str, bytes]]:
    """An artifact of two models pushed to `alone`: (its digest, its descriptor as a referrer's subject, its files)."""
    files = {"a.onnx": b"model a", "b.onnx": b"model b"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    layers = [(folder / name, WEIGHT_RAW, {FILEPATH: name}) for name in files]
    digest = oras_push(alone, f"{repository}:v1", layers, modelpack_config(folder), auth)
    size = len(httpx.get(f"{alone.url}/v2/{repository}/manifests/{digest}", headers={"Accept": OCI_MANIFEST}, auth=auth).content)
    return digest, {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": digest, "size": size}, files


def attach_signed(
    alone: OciRegistryServer,
    repository: str,
    subject: dict[str, Any],
    private: Path,
    attested: dict[str, tuple[str, Status, str]],
    credentials: Path | None = None,
) -> None:
    """Attach a signed referrer as the gate does: per model path, a bundle of (its file's SHA-256, the stage's status, the URI)."""
    signer = attester_for(private, None, "test", load_settings([], environ={}))
    bundles = {
        path: signer.attest([Subject(path, sha256, model=True)], [StageResult("schema", status)], uri)
        for path, (sha256, status, uri) in attested.items()
    }
    tags = {"onnx_import.verdict": "pass", "onnx_import.checks": "schema=pass"}
    document = verdict_document(tags, alone.host, repository, subject["digest"])

    async def push() -> None:
        registry = OciRegistry(alone.url, credentials)
        try:
            await attach(registry, repository, subject, tags, document, bundles)
        finally:
            await registry.close()

    asyncio.run(push())


def test_an_artifact_without_a_referrer_is_refused(alone: OciRegistryServer, keys: tuple[Path, Path, Any], tmp_path: Path) -> None:
    digest, _, _ = two_models(alone, "models/unchecked", tmp_path)
    done = verify(f"oci://{alone.host}/models/unchecked@{digest}", "--public-key", keys[1], "--plain-http", docker_config=tmp_path)
    assert done.returncode == 1 and "no verdict referrer" in done.stderr, done.stderr


def test_every_model_of_the_artifact_must_be_attested_as_its_own_bytes_of_that_artifact(
    alone: OciRegistryServer, keys: tuple[Path, Path, Any], tmp_path: Path
) -> None:
    digest, subject, files = two_models(alone, "models/pair", tmp_path)
    uri = f"oci://{alone.host}/models/pair@{digest}"
    sha = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    command = (uri, "--public-key", keys[1], "--plain-http")
    attach_signed(alone, "models/pair", subject, keys[0], {"a.onnx": (sha["a.onnx"], "pass", uri)})
    done = verify(*command, docker_config=tmp_path)
    assert done.returncode == 1 and "the artifact's model b.onnx has no attestation" in done.stderr, done.stderr
    time.sleep(1.1)  # the next referrer is newer by its created annotation (seconds)
    attach_signed(alone, "models/pair", subject, keys[0], {"a.onnx": (sha["a.onnx"], "pass", uri), "b.onnx": ("0" * 64, "pass", uri)})
    done = verify(*command, docker_config=tmp_path)
    assert done.returncode == 1 and "changed file: b.onnx" in done.stderr, done.stderr
    time.sleep(1.1)
    elsewhere = f"oci://{alone.host}/models/other@sha256:{'1' * 64}"
    attach_signed(alone, "models/pair", subject, keys[0], {name: (sha[name], "pass", elsewhere) for name in files})
    done = verify(*command, docker_config=tmp_path)
    assert done.returncode == 1 and "attests another artifact" in done.stderr, done.stderr
    time.sleep(1.1)
    copied = f"oci://registry.example:5000/mirror/pair@{digest}"  # another host and repository, the same digest: a copy
    attach_signed(alone, "models/pair", subject, keys[0], {name: (sha[name], "pass", copied) for name in files})
    done = verify(*command, docker_config=tmp_path)
    assert done.returncode == 0 and "a.onnx" in done.stdout and "b.onnx" in done.stdout, done.stderr
    time.sleep(1.1)
    attach_signed(alone, "models/pair", subject, keys[0], {"a.onnx": (sha["a.onnx"], "pass", uri), "b.onnx": (sha["b.onnx"], "fail", uri)})
    done = verify(*command, docker_config=tmp_path)  # the newest verdict decides: an older PASSED one does not outvote it
    assert done.returncode == 1 and "the attested result is FAILED (ONNX_IMPORT_STAGE_SCHEMA_FAIL)" in done.stderr, done.stderr


def test_a_tag_and_flags_of_the_other_form_are_usage_errors(keys: tuple[Path, Path, Any], tmp_path: Path) -> None:
    done = verify("oci://registry.example:5000/models/net:v1", "--public-key", keys[1], docker_config=tmp_path)
    assert done.returncode == 64 and "a digest, not a tag" in done.stderr, done.stderr
    done = verify("oci://registry.example:5000/models/net@sha256:" + "0" * 64, "--public-key", keys[1],
                  "--attestation", tmp_path / "a.json", docker_config=tmp_path)  # fmt: skip
    assert done.returncode == 64 and "--attestation cannot go with an oci:// artifact" in done.stderr, done.stderr
    done = verify(tmp_path, "--attestation", tmp_path / "a.json", "--public-key", keys[1], "--output", tmp_path / "out",
                  "--max-upload-total", "1GiB", docker_config=tmp_path)  # fmt: skip
    assert done.returncode == 64 and "--output, --max-upload-total cannot go with a PATH" in done.stderr, done.stderr
    done = verify("oci://registry.example:5000/models/net@sha256:" + "0" * 64, "--public-key", keys[1],
                  "--max-upload-total", "lots", docker_config=tmp_path)  # fmt: skip
    assert done.returncode == 64 and "lots" in done.stderr, done.stderr
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "kept").write_bytes(b"")
    done = verify("oci://registry.example:5000/models/net@sha256:" + "0" * 64, "--public-key", keys[1],
                  "--output", tmp_path / "full", docker_config=tmp_path)  # fmt: skip
    assert done.returncode == 64 and "is not a new or empty folder" in done.stderr, done.stderr


def test_the_registry_s_credentials_come_from_a_docker_config(
    guarded: OciRegistryServer, keys: tuple[Path, Path, Any], tmp_path: Path
) -> None:
    config = tmp_path / "docker" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"auths": {guarded.host: {"username": ROBOT[0], "password": ROBOT[1]}}}))
    digest, subject, files = two_models(guarded, "models/guarded", tmp_path, ROBOT)
    uri = f"oci://{guarded.host}/models/guarded@{digest}"
    sha = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    attach_signed(guarded, "models/guarded", subject, keys[0], {name: (sha[name], "pass", uri) for name in files}, config)
    anonymous = tmp_path / "anonymous"
    anonymous.mkdir()
    done = verify(uri, "--public-key", keys[1], "--plain-http", docker_config=anonymous)
    assert done.returncode == 1 and "401" in done.stderr, done.stderr
    done = verify(uri, "--public-key", keys[1], "--plain-http", docker_config=config.parent)  # $DOCKER_CONFIG/config.json
    assert done.returncode == 0, done.stderr
    done = verify(uri, "--public-key", keys[1], "--plain-http", "--credentials", config, docker_config=anonymous)
    assert done.returncode == 0, done.stderr
