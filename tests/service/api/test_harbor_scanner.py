"""The Harbor scanner (`/harbor/api/v1`, Harbor's Scanner Adapter API v1.2) as Harbor calls it, every answer
checked against the spec's OpenAPI document (testdata/harbor; support.harbor_spec).

The service runs in the test process over ASGI (support.asgi_service, its
workers real); the registry is a real one (Debian's `docker-registry`,
distribution 2.8, on the loopback: support.oci_registry, sending no
notifications, taking one robot account's Basic credentials only, as
Harbor's robot accounts), the artifacts pushed with oras as a user would,
and the scans pull them from it as the OCI gate does, with the credentials
each scan request carries. Shown here: the metadata; a
ModelPack artifact (a model and its external data) scanned: 202 with an id,
302 with `Refresh-After` while it runs, then a report in the media type the
Accept header names, with no entry for a model that passes; a model with an
operator error: one High entry per error finding, its code, node and byte
offset, and the link to the model's SARIF report; a broken model: one Critical entry, as is an artifact whose layer
path leaves it; an artifact that is no ONNX
model: a report with no entry; a request without the robot account's
credentials: an error (500); a registry URL that is not `--oci-registry`:
400; without the token or with another: 401; an unknown scan: 404; the
pinned document unchanged."""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from onnx import TensorProto, helper
from support.asgi_service import AsgiService, serving_over_asgi
from support.harbor_spec import SPEC_SHA256, check_answer, spec_digest
from support.oci_registry import MISSING, ROBOT, OciRegistryServer, oras_push, registry_available
from support.small_models import external_weight_model

pytestmark = pytest.mark.skipif(not registry_available(), reason=MISSING)
pytest.importorskip("oras", reason="the oras test dependency is not installed")

TOKEN = "harbor-registration-token"
MODELPACK_CONFIG = "application/vnd.cncf.model.config.v1+json"
WEIGHT_RAW = "application/vnd.cncf.model.weight.v1.raw"
FILEPATH = "org.cncf.model.filepath"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
SCAN_REQUEST = "application/vnd.scanner.adapter.scan.request+json; version=1.0"
VULNERABILITY_REPORT = "application/vnd.security.vulnerability.report; version=1.1"
HARBOR_REPORT = "application/vnd.scanner.adapter.vuln.report.harbor+json; version=1.0"
API = "/harbor/api/v1"
PUBLIC_URL = "https://onnx-import.example"
ROBOT_AUTHORIZATION = "Basic " + base64.b64encode(":".join(ROBOT).encode()).decode()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OciRegistryServer]:
    server = OciRegistryServer(tmp_path_factory.mktemp("harbor-registry"))
    server.start(None, robot=True)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def service(registry: OciRegistryServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiService]:
    root = tmp_path_factory.mktemp("harbor-service")
    env = {"ONNX_SERVICE_OCI_WEBHOOK_SECRET": "unused-notifications-token", "ONNX_SERVICE_HARBOR_TOKEN": TOKEN}
    args = ("--oci-registry", registry.url, "--oci-checks", "schema,security,shape", "--public-url", PUBLIC_URL)
    with serving_over_asgi(root / "store", root, *args, env=env) as server:
        yield server


@pytest.fixture
def harbor(service: AsgiService) -> Iterator[httpx.Client]:
    with service.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        yield client


def modelpack_push(registry: OciRegistryServer, folder: Path, repository: str, files: dict[str, bytes]) -> str:
    """The files pushed with oras as a ModelPack artifact (raw weight layers), tagged v1; its manifest's digest."""
    config = folder / "config.json"
    config.write_text(json.dumps({"descriptor": {"name": repository}, "config": {"format": "onnx"},
                                  "modelfs": {"type": "layers", "diffIds": []}}))  # fmt: skip
    layers = []
    for name, data in files.items():
        (folder / name).write_bytes(data)
        layers.append((folder / name, WEIGHT_RAW, {FILEPATH: name}))
    return oras_push(registry, f"{repository}:v1", layers, (config, MODELPACK_CONFIG), auth=ROBOT)


def scan_request(
    registry: OciRegistryServer, repository: str, digest: str, url: str | None = None, authorization: str = ROBOT_AUTHORIZATION
) -> dict[str, Any]:
    """Harbor's ScanRequest, with its robot account's Basic credentials (the service has no --oci-credentials)."""
    return {
        "registry": {"url": url or registry.url, "authorization": authorization},
        "artifact": {"repository": repository, "digest": digest, "tag": "v1", "mime_type": OCI_MANIFEST},
    }


def scanned(harbor: httpx.Client, request: dict[str, Any], accept: str = VULNERABILITY_REPORT) -> tuple[list[int], dict[str, Any]]:
    """Scan as Harbor does: POST the request, then GET the report until it is there; (the statuses seen, the report)."""
    accepted = harbor.post(f"{API}/scan", content=json.dumps(request), headers={"Content-Type": SCAN_REQUEST})
    assert accepted.status_code == 202, accepted.text
    scan_id = check_answer("AcceptScanRequest", accepted)["id"]
    seen = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        answer = harbor.get(f"{API}/scan/{scan_id}/report", headers={"Accept": accept})
        report = check_answer("GetScanReport", answer)
        seen.append(answer.status_code)
        if answer.status_code == 200:
            assert answer.headers["content-type"] == accept
            return seen, report
        assert answer.status_code == 302, answer.text
        time.sleep(0.2)  # Refresh-After says 5 s; a test asks sooner
    raise AssertionError(f"scan {scan_id} gave no report within 120 s: {seen}")


def operator_error_model() -> bytes:
    """A Relu, then an Add given one input where it takes two: an error of the schema stage at the Add."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Add", ["r"], ["y"], name="lonely_add")],
        "one_input_add",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
    )
    serialized: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    return serialized


def test_the_spec_is_the_pinned_copy() -> None:
    assert spec_digest() == SPEC_SHA256, "testdata/harbor/scanner-adapter-openapi-v1.2.yaml is not the pinned commit's"


def test_the_metadata_names_the_scanner_and_its_capabilities(harbor: httpx.Client) -> None:
    for accept in (
        "application/vnd.scanner.adapter.metadata+json; version=1.0",
        "application/vnd.scanner.adapter.metadata+json; version=1.1",
    ):
        answer = harbor.get(f"{API}/metadata", headers={"Accept": accept})
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == accept
        found = check_answer("GetMetadata", answer)
    assert found["scanner"]["name"] == "onnx-import" and found["scanner"]["version"]
    [capability] = found["capabilities"]
    assert capability["type"] == "vulnerability"
    assert OCI_MANIFEST in capability["consumes_mime_types"]
    assert set(capability["produces_mime_types"]) == {VULNERABILITY_REPORT, HARBOR_REPORT}
    assert found["properties"]["harbor.scanner-adapter/scanner-type"] == "onnx-model-validation"
    assert found["properties"]["org.onnx-import.checks"] == "schema,security,shape"


def test_a_modelpack_artifact_is_scanned_302_then_its_report(registry: OciRegistryServer, harbor: httpx.Client, tmp_path: Path) -> None:
    files = {"model.onnx": external_weight_model("weights.bin", 1024), "weights.bin": bytes(4096)}
    digest = modelpack_push(registry, tmp_path, "models/harbor-net", files)
    seen, report = scanned(harbor, scan_request(registry, "models/harbor-net", digest))
    assert seen[0] == 302 and seen[-1] == 200, seen
    assert report["artifact"] == {"repository": "models/harbor-net", "digest": digest, "tag": "v1", "mime_type": OCI_MANIFEST}
    assert report["scanner"]["name"] == "onnx-import"
    assert report["vulnerabilities"] == [] and report["severity"] == "Unknown"
    _, again = scanned(harbor, scan_request(registry, "models/harbor-net", digest), accept=HARBOR_REPORT)  # the other media type
    assert again["vulnerabilities"] == []


def test_each_error_finding_is_a_high_entry_with_its_place(registry: OciRegistryServer, harbor: httpx.Client, tmp_path: Path) -> None:
    model = operator_error_model()
    digest = modelpack_push(registry, tmp_path, "models/harbor-wrong", {"model.onnx": model})
    _, report = scanned(harbor, scan_request(registry, "models/harbor-wrong", digest))
    entries = [entry for entry in report["vulnerabilities"] if entry["id"] != "stage-incomplete"]
    assert entries, report
    assert report["severity"] == "High"
    assert {"too-few-inputs", "shape-inference-error"} <= {entry["id"] for entry in entries}, entries  # the schema and shape stages' codes
    for entry in entries:
        assert entry["package"] == "model.onnx#lonely_add" and entry["severity"] == "High"
        assert entry["version"] == "sha256:" + hashlib.sha256(model).hexdigest()
        attributes = entry["vendor_attributes"]
        assert attributes["node_name"] == "lonely_add" and attributes["op_type"] == "Add"
        assert isinstance(attributes["offset"], int) and attributes["offset"] > 0
        assert f"at byte offset {attributes['offset']}" in entry["description"]
        assert "node 'lonely_add' (Add)" in entry["description"] and attributes["field_path"] in entry["description"]
        [link] = entry["links"]  # the model's SARIF report, which opens without an API key
        assert link.startswith(PUBLIC_URL + "/links/")
        sarif = harbor.get(urlsplit(link).path)
        assert sarif.status_code == 200 and sarif.json()["runs"][0]["properties"]["model_id"] == attributes["model_id"]


def test_a_broken_model_is_one_critical_entry(registry: OciRegistryServer, harbor: httpx.Client, tmp_path: Path) -> None:
    broken = b"\x08\x07\x12\xff\xff\xff\xff\x0f not a model"
    digest = modelpack_push(registry, tmp_path, "models/harbor-broken", {"broken.onnx": broken})
    _, report = scanned(harbor, scan_request(registry, "models/harbor-broken", digest))
    [entry] = report["vulnerabilities"]
    assert entry["severity"] == "Critical" and report["severity"] == "Critical"
    assert (entry["id"], entry["package"], entry["version"]) == ("Malformed", "broken.onnx", "sha256:" + hashlib.sha256(broken).hexdigest())
    assert entry["description"].startswith("the service refused the model: Malformed: ")


def test_an_artifact_leaving_its_folder_is_one_critical_entry(registry: OciRegistryServer, harbor: httpx.Client, tmp_path: Path) -> None:
    model = tmp_path / "model.onnx"
    model.write_bytes(external_weight_model("weights.bin", 16))
    digest = oras_push(registry, "models/harbor-escape:v1", [(model, WEIGHT_RAW, {FILEPATH: "../model.onnx"})], None, auth=ROBOT)
    _, report = scanned(harbor, scan_request(registry, "models/harbor-escape", digest))
    [entry] = report["vulnerabilities"]
    assert (entry["id"], entry["package"], entry["severity"]) == ("refused", f"models/harbor-escape@{digest}", "Critical")
    assert "leaves the artifact" in entry["description"]


def test_an_artifact_with_no_onnx_model_has_no_entry(registry: OciRegistryServer, harbor: httpx.Client, tmp_path: Path) -> None:
    digest = modelpack_push(registry, tmp_path, "models/harbor-readme", {"README.md": b"no model here\n"})
    _, report = scanned(harbor, scan_request(registry, "models/harbor-readme", digest))
    assert report["vulnerabilities"] == [] and report["artifact"]["digest"] == digest


def test_the_pull_is_the_requests_robot_accounts(registry: OciRegistryServer, harbor: httpx.Client, tmp_path: Path) -> None:
    """The registry takes the robot account only, and the service has no credentials of its own: a scan request
    without them, or with others, ends in an error (500, the registry's 401 named), and Harbor may scan again."""
    digest = modelpack_push(registry, tmp_path, "models/harbor-robot", {"model.onnx": external_weight_model("weights.bin", 16),
                                                                       "weights.bin": bytes(64)})  # fmt: skip
    wrong = "Basic " + base64.b64encode(f"{ROBOT[0]}:another-secret".encode()).decode()
    for authorization in ("", wrong):
        accepted = harbor.post(f"{API}/scan", content=json.dumps(scan_request(registry, "models/harbor-robot", digest,
                                                                              authorization=authorization)))  # fmt: skip
        assert accepted.status_code == 202, accepted.text
        scan_id = accepted.json()["id"]
        deadline = time.monotonic() + 60
        while (answer := harbor.get(f"{API}/scan/{scan_id}/report")).status_code == 302:
            assert time.monotonic() < deadline, "the scan did not end"
            time.sleep(0.2)
        assert answer.status_code == 500, answer.text
        assert "answered 401" in check_answer("GetScanReport", answer)["error"]["message"]
    _, report = scanned(harbor, scan_request(registry, "models/harbor-robot", digest))
    assert report["vulnerabilities"] == []


def test_a_registry_other_than_the_configured_one_is_400(harbor: httpx.Client, registry: OciRegistryServer) -> None:
    digest = "sha256:" + "ab" * 32
    for url in ("http://registry.elsewhere.invalid", f"http://127.0.0.2:{registry.port}", f"https://{registry.host}", ""):
        request = scan_request(registry, "models/net", digest)
        request["registry"]["url"] = url
        answer = harbor.post(f"{API}/scan", content=json.dumps(request), headers={"Content-Type": SCAN_REQUEST})
        assert answer.status_code == 400, (url, answer.text)
        assert "--oci-registry" in check_answer("AcceptScanRequest", answer)["error"]["message"]
    same = scan_request(registry, "models/net", digest, f"HTTP://{registry.host}/")  # the same registry, spelt otherwise
    assert harbor.post(f"{API}/scan", content=json.dumps(same)).status_code == 202


def test_malformed_requests_are_refused_in_the_specs_format(harbor: httpx.Client, registry: OciRegistryServer) -> None:
    for body, status in (
        (b"not json", 400),
        (json.dumps({"registry": {"url": registry.url}}).encode(), 400),
        (json.dumps(scan_request(registry, "Models/UPPER", "sha256:" + "ab" * 32)).encode(), 422),
        (json.dumps(scan_request(registry, "models/net", "md5:abc")).encode(), 422),
    ):
        answer = harbor.post(f"{API}/scan", content=body, headers={"Content-Type": SCAN_REQUEST})
        assert answer.status_code == status, (body, answer.text)
        check_answer("AcceptScanRequest", answer)
    image_index = scan_request(registry, "models/net", "sha256:" + "ab" * 32)
    image_index["artifact"]["mime_type"] = "application/vnd.oci.image.index.v1+json"
    answer = harbor.post(f"{API}/scan", content=json.dumps(image_index))
    assert answer.status_code == 501 and check_answer("AcceptScanRequest", answer)["error"]["message"]


def test_without_the_token_or_with_another_every_route_is_401(service: AsgiService, registry: OciRegistryServer) -> None:
    body = json.dumps(scan_request(registry, "models/net", "sha256:" + "ab" * 32))
    for headers in ({}, {"Authorization": "Bearer another-token"}, {"Authorization": f"Basic {TOKEN}"}, {"Authorization": "Bearer"}):
        with service.client(headers=headers) as client:
            for operation_id, answer in (
                ("GetMetadata", client.get(f"{API}/metadata")),
                ("AcceptScanRequest", client.post(f"{API}/scan", content=body)),
                ("GetScanReport", client.get(f"{API}/scan/some-id/report")),
            ):
                assert answer.status_code == 401, (headers, operation_id, answer.text)
                assert "Bearer" in check_answer(operation_id, answer)["error"]["message"]


def test_an_unknown_scan_is_404_and_an_unknown_report_type_501(harbor: httpx.Client) -> None:
    answer = harbor.get(f"{API}/scan/3fa85f64-5717-4562-b3fc-2c963f66afa6/report", headers={"Accept": VULNERABILITY_REPORT})
    assert answer.status_code == 404
    check_answer("GetScanReport", answer)
    answer = harbor.get(f"{API}/scan/3fa85f64-5717-4562-b3fc-2c963f66afa6/report", headers={"Accept": "application/spdx+json"})
    assert answer.status_code == 501
    check_answer("GetScanReport", answer)
