"""The OCI gate's registry client (service.registry.oci_api) against a registry's answers
made in process (httpx's MockTransport): credentials from a Docker config.json or a token
file, a realm's token fetched on a Bearer challenge, a blob redirected to storage fetched
without the registry's credentials, a manifest checked against its digest, and a pushed
blob's upload state kept."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from pathlib import Path

import httpx
import pytest

from service.registry.oci_api import OciRefused, OciRegistry, credentials_headers, valid_reference

DIGEST = "sha256:" + "ab" * 32


def test_credentials_from_a_docker_config_or_a_token_file(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    encoded = base64.b64encode(b"user:pass").decode()
    config.write_text(json.dumps({"auths": {"other.example": {"auth": "eA=="}, "https://registry.example:5000": {"auth": encoded}}}))
    assert credentials_headers(config, "https://registry.example:5000") == ({"Authorization": f"Basic {encoded}"}, f"Basic {encoded}")
    config.write_text(json.dumps({"auths": {"registry.example:5000": {"username": "user", "password": "pass"}}}))
    assert credentials_headers(config, "https://registry.example:5000")[0] == {"Authorization": f"Basic {encoded}"}
    config.write_text(json.dumps({"auths": {"registry.example:5000": {"identitytoken": "tok"}}}))
    assert credentials_headers(config, "https://registry.example:5000") == ({"Authorization": "Bearer tok"}, None)
    assert credentials_headers(config, "https://elsewhere.example") == ({}, None)  # no entry for this registry: anonymous
    token = tmp_path / "token"
    token.write_text("a-token\n")
    assert credentials_headers(token, "https://registry.example") == ({"Authorization": "Bearer a-token"}, None)
    assert credentials_headers(None, "https://registry.example") == ({}, None)


def test_references_are_checked() -> None:
    assert valid_reference("models/net", DIGEST) and valid_reference("a.b/c_d/e-f", DIGEST)
    for repository in ("../x", "Models", "a//b", "/a", "a/", "a" * 256, "a?b"):
        assert not valid_reference(repository, DIGEST), repository
    for digest in ("sha256:abc", "sha512:" + "ab" * 64, "sha256:" + "AB" * 32, DIGEST + "/x"):
        assert not valid_reference("models/net", digest), digest


def test_a_bearer_challenge_is_answered_with_the_realms_token(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {"registry.test": {"username": "u", "password": "p"}}}))
    body = b'{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}'
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    seen: list[tuple[str, str]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host + request.url.path, request.headers.get("authorization", "")))
        if request.url.host == "auth.test":
            assert request.url.params["scope"] == "repository:models/net:pull"
            return httpx.Response(200, json={"token": "realm-token"})
        if request.headers.get("authorization") != "Bearer realm-token":
            challenge = 'Bearer realm="http://auth.test/token",service="registry.test",scope="repository:models/net:pull"'
            return httpx.Response(401, headers={"WWW-Authenticate": challenge})
        return httpx.Response(200, content=body, headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})

    async def pulled() -> bytes:
        registry = OciRegistry("http://registry.test", config, transport=httpx.MockTransport(answer))
        found = await registry.manifest("models/net", digest)
        await registry.close()
        return found.body

    assert asyncio.run(pulled()) == body
    basic = "Basic " + base64.b64encode(b"u:p").decode()
    assert seen[0] == (f"registry.test/v2/models/net/manifests/{digest}", basic)
    assert seen[1] == ("auth.test/token", basic)
    assert seen[2] == (f"registry.test/v2/models/net/manifests/{digest}", "Bearer realm-token")


def test_a_manifest_that_is_not_its_digest_is_refused() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"{}", headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"})

    registry = OciRegistry("http://registry.test", transport=httpx.MockTransport(answer))
    with pytest.raises(OciRefused, match="has the digest"):
        asyncio.run(registry.manifest("models/net", DIGEST))


def test_a_blob_redirected_to_storage_is_fetched_without_the_registrys_credentials(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("secret-token")
    data = b"weights"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    seen: dict[str, str] = {}

    def answer(request: httpx.Request) -> httpx.Response:
        seen[request.url.host] = request.headers.get("authorization", "")
        if request.url.host == "registry.test":
            return httpx.Response(307, headers={"Location": "http://storage.test/blob?signed=1"})
        return httpx.Response(200, content=data)

    registry = OciRegistry("http://registry.test", token, transport=httpx.MockTransport(answer))
    assert asyncio.run(registry.blob("models/net", digest, tmp_path / "blob", 100)) == len(data)
    assert seen == {"registry.test": "Bearer secret-token", "storage.test": ""}


def test_a_pushed_blob_keeps_its_uploads_state() -> None:
    puts: list[httpx.URL] = []

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v2/models/net/blobs/uploads/u1?_state=abc"})
        puts.append(request.url)
        return httpx.Response(201)

    registry = OciRegistry("http://registry.test", transport=httpx.MockTransport(answer))
    digest = asyncio.run(registry.push_blob("models/net", b"{}"))
    assert puts[0].params["_state"] == "abc" and puts[0].params["digest"] == digest
