"""POST /hooks/oci's answers that need no registry, in process: off without
--oci-registry (404), the settings it needs, the bearer token (401 without it
or with another, compared before the body is read), the envelope's parsing
(400 for a body that is none; pulls, blob and index pushes ignored; an event
with a malformed repository or digest skipped with its reason, never the
whole envelope refused, which the registry would send again and again), a
manifest push accepted (202) and its replay, or the same manifest's second
event, a duplicate (200). The validations themselves run against a real
registry in tests/service/process/test_registry_oci.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from in_process import served_app
from support.service_harness import assert_problem

from service.registry.oci_hook import webhook_secret
from service.settings import Settings
from service.settings.kinds import SettingsError

SAMPLES = Path(__file__).resolve().parents[3] / "testdata" / "samples"
TOKEN = "route-token"
EVENTS = "application/vnd.docker.distribution.events.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def hooked(tmp_path: Path) -> Iterator[TestClient]:
    yield from served_app(tmp_path, oci_registry="http://127.0.0.1:9", oci_webhook_secret=TOKEN)  # no registry answers: nothing is pulled


def _event(action: str = "push", media_type: str = MANIFEST, repository: str = "models/net", digest: str = DIGEST) -> dict[str, Any]:
    return {"id": "e1", "timestamp": "2026-12-05T00:00:00Z", "action": action,
            "target": {"mediaType": media_type, "digest": digest, "repository": repository, "size": 100,
                       "url": f"http://elsewhere.invalid/v2/{repository}/manifests/{digest}", "tag": "v1"},
            "request": {"id": "r1", "host": "registry", "method": "PUT"}, "actor": {}, "source": {"addr": "registry:5000"}}  # fmt: skip


def _post(client: TestClient, body: Any, token: str | None = TOKEN) -> Any:
    headers = {"Content-Type": EVENTS} | ({"Authorization": f"Bearer {token}"} if token is not None else {})
    return client.post("/hooks/oci", content=body if isinstance(body, bytes) else json.dumps(body).encode(), headers=headers)


def _problem(response: Any, status: int, slug: str) -> str:
    """The problem's detail, once `assert_problem` has checked the problem."""
    detail: str = assert_problem(response, status, slug)["detail"]
    return detail


def test_the_hook_is_off_without_an_oci_registry(tmp_path: Path) -> None:
    for client in served_app(tmp_path):
        assert "--oci-registry" in _problem(_post(client, {"events": []}), 404, "not-found")


def test_the_hook_needs_its_token_from_the_variable_or_a_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="ONNX_SERVICE_OCI_WEBHOOK_SECRET or --oci-webhook-secret-file"):
        Settings(oci_registry="http://127.0.0.1:5000")
    secret_file = tmp_path / "secret"
    secret_file.write_text("from-a-file\n")
    assert webhook_secret(Settings(oci_registry="http://127.0.0.1:5000", oci_webhook_secret_file=secret_file)) == "from-a-file"
    with pytest.raises(SettingsError, match="--oci-registry must be"):
        Settings(oci_registry="registry.example:5000", oci_webhook_secret=TOKEN)


def test_a_notification_without_the_token_is_refused(hooked: TestClient) -> None:
    envelope = {"events": [_event()]}
    assert "lacks Authorization" in _problem(_post(hooked, envelope, token=None), 401, "unauthorized")
    assert "not the hook's" in _problem(_post(hooked, envelope, token=TOKEN + "x"), 401, "unauthorized")
    assert "not the hook's" in _problem(_post(hooked, envelope, token=TOKEN[:-1]), 401, "unauthorized")
    basic = hooked.post("/hooks/oci", content=json.dumps(envelope), headers={"Authorization": f"Basic {TOKEN}"})
    assert "lacks Authorization" in _problem(basic, 401, "unauthorized")
    assert _post(hooked, envelope).status_code == 202  # the same envelope with the token: taken once


def test_what_is_not_an_envelope_is_a_problem(hooked: TestClient) -> None:
    assert "not JSON" in _problem(_post(hooked, b"{not json"), 400, "bad-request")
    assert "notification envelope" in _problem(_post(hooked, {"event": []}), 400, "bad-request")
    assert "notification envelope" in _problem(_post(hooked, [_event()]), 400, "bad-request")
    assert "more than 100" in _problem(_post(hooked, {"events": [_event("pull")] * 101}), 400, "bad-request")
    assert "at most 65536 bytes" in _problem(_post(hooked, b'{"events": [' + b" " * 70_000 + b"]}"), 413, "payload-too-large")


def test_events_that_start_nothing_are_answered_200(hooked: TestClient) -> None:
    others = [_event("pull"), _event("delete"), _event(media_type="application/octet-stream"),  # a pull, a deletion, a blob
              _event(media_type="application/vnd.oci.image.index.v1+json")]  # an index (the referrers tag's own)  # fmt: skip
    answer = _post(hooked, {"events": others})
    assert answer.status_code == 200 and answer.json() == {"status": "ignored", "accepted": [], "duplicates": 0, "skipped": []}


def test_a_malformed_event_is_skipped_with_its_reason_and_the_rest_taken(hooked: TestClient) -> None:
    bad = [_event(repository="../etc"), _event(repository="Models/Upper"), _event(digest="sha256:abc"),
           _event(digest="sha512:" + "ab" * 64), "not an event", {"action": "push"}]  # fmt: skip
    answer = _post(hooked, {"events": [*bad, _event(repository="models/good")]})
    assert answer.status_code == 202, answer.text
    assert answer.json()["accepted"] == [{"repository": "models/good", "digest": DIGEST}]
    assert [reason.split(":")[0] for reason in answer.json()["skipped"]] == [f"event {n}" for n in range(6)]


def test_a_replayed_push_is_a_duplicate(hooked: TestClient) -> None:
    first = _post(hooked, {"events": [_event(repository="models/replayed")]})
    assert first.status_code == 202 and first.json()["accepted"] == [{"repository": "models/replayed", "digest": DIGEST}]
    again = _post(hooked, {"events": [_event(repository="models/replayed"), _event(repository="models/replayed")]})
    assert again.status_code == 200 and again.json()["duplicates"] == 2 and again.json()["accepted"] == []
