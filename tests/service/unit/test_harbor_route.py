"""The Harbor scanner's answers that need no registry, in process: off
without a token (404, in the spec's error format, never a problem), the
settings it needs (--oci-registry; the token from its variable or a file),
a scan whose process died (its lease lapsed) or that failed answered 500,
and the Accept header choosing the report's media type. Scans themselves
run against a real registry in tests/service/api/test_harbor_scanner.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from in_process import served_app

from service.registry.harbor_scanner import harbor_token, same_registry
from service.settings import Settings
from service.settings.kinds import SettingsError

SAMPLES = Path(__file__).resolve().parents[3] / "testdata" / "samples"
TOKEN = "harbor-token"
ERROR_TYPE = "application/vnd.scanner.adapter.error+json; version=1.0"
VULNERABILITY_REPORT = "application/vnd.security.vulnerability.report; version=1.1"
HARBOR_REPORT = "application/vnd.scanner.adapter.vuln.report.harbor+json; version=1.0"
REPORT = "/harbor/api/v1/scan/{}/report"


@pytest.fixture
def scanner(tmp_path: Path) -> Iterator[TestClient]:
    yield from served_app(tmp_path, oci_registry="http://127.0.0.1:9", oci_webhook_secret="hook", harbor_token=TOKEN)


def _error(response: Any, status: int) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == ERROR_TYPE
    message: str = response.json()["error"]["message"]
    return message


def test_the_scanner_is_off_without_a_token(tmp_path: Path) -> None:
    for client in served_app(tmp_path, oci_registry="http://127.0.0.1:9", oci_webhook_secret="hook"):
        for response in (client.get("/harbor/api/v1/metadata"), client.post("/harbor/api/v1/scan", content=b"{}")):
            assert "ONNX_SERVICE_HARBOR_TOKEN" in _error(response, 404)


def test_the_scanner_needs_the_oci_registry_and_takes_its_token_from_a_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="needs --oci-registry"):
        Settings(harbor_token=TOKEN)
    token_file = tmp_path / "token"
    token_file.write_text("from-a-file\n")
    chosen = Settings(oci_registry="http://127.0.0.1:9", oci_webhook_secret="hook", harbor_token_file=token_file)
    assert harbor_token(chosen) == "from-a-file"
    assert harbor_token(Settings()) == ""


def test_a_registry_is_the_same_however_its_url_is_spelt() -> None:
    assert same_registry("HTTPS://Harbor.Example/", "https://harbor.example")
    assert same_registry("https://harbor.example:443", "https://harbor.example")
    assert same_registry("http://core:8080", "http://core:8080/")
    assert not same_registry("http://harbor.example", "https://harbor.example")
    assert not same_registry("https://harbor.example:8443", "https://harbor.example")
    assert not same_registry("https://harbor.example.evil", "https://harbor.example")
    assert not same_registry("https://harbor.example/other", "https://harbor.example")
    assert not same_registry("https://harbor.example:port", "https://harbor.example")
    assert not same_registry("", "https://harbor.example")


def test_a_scan_that_died_or_failed_is_500_and_one_done_is_its_report(scanner: TestClient) -> None:
    rows = scanner.app.state.service.store.registry_rows()  # type: ignore[attr-defined]
    headers = {"Authorization": f"Bearer {TOKEN}"}
    rows.begin_scan("died", 0.1)
    rows.begin_scan("failed", 60)
    rows.end_scan("failed", "error", "the registry did not answer")
    rows.begin_scan("done", 60)
    rows.end_scan("done", "done", '{"vulnerabilities":[]}')
    time.sleep(0.2)
    assert "stopped before the scan ended" in _error(scanner.get(REPORT.format("died"), headers=headers), 500)
    assert "the registry did not answer" in _error(scanner.get(REPORT.format("failed"), headers=headers), 500)
    for accept, media_type in (
        ("", VULNERABILITY_REPORT),
        ("*/*", VULNERABILITY_REPORT),
        ("application/vnd.scanner.adapter.vuln.report.harbor+json;version=1.0", HARBOR_REPORT),
        (VULNERABILITY_REPORT, VULNERABILITY_REPORT),
    ):
        answer = scanner.get(REPORT.format("done"), headers=headers | ({"Accept": accept} if accept else {}))
        assert answer.status_code == 200 and answer.headers["content-type"] == media_type, (accept, answer.headers)
        assert answer.json() == {"vulnerabilities": []}
    assert "produces" in _error(
        scanner.get(REPORT.format("done"), headers=headers | {"Accept": "application/vnd.scanner.adapter.vuln.report.raw"}), 501
    )
