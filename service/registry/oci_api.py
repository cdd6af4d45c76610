"""The OCI distribution API of the one registry the OCI gate speaks to: `OciRegistry`.

Owns the calls the gate makes on `--oci-registry`, spoken with httpx (the
service's async client, each read bounded; PyPI's `oras` is synchronous
requests with no byte bound, and serves the tests as the pushing client): a
manifest by digest (at most `MAX_MANIFEST`, its bytes checked against the
digest), a blob streamed into a file within a byte bound and checked against
its digest as it is read (`TooLarge`, `OciRefused` on a mismatch), a blob and
a manifest pushed, the referrers API (`None` where the registry has none:
404, as distribution 2.8 answers) and a tag's index. The registry is named
by the setting only: a repository and a digest are the only things an event
gives, each checked (`REPOSITORY`, `DIGEST`) before any URL is made of it.

Credentials (`--oci-credentials`): a Docker `config.json` (its `auths` entry
for the registry's host: `auth`, or `username` and `password`, as Basic; an
`identitytoken` or `registrytoken` as Bearer), or any other file as a bearer
token. A registry that answers 401 with a `Bearer realm=...` challenge (the
token flow of Harbor, GHCR, and distribution with token auth) is asked for a
token at its realm with the Basic credentials, once per scope, and the call
made again. The Harbor scanner gives the Authorization header of its scan
request instead (Harbor's robot account: `authorization_headers`). Connection errors, timeouts, 429 and 5xx are retried with
`BACKOFF`, then `OciUnavailable`; any other failure is `OciRefused`.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

log = logging.getLogger("service")

BACKOFF = (0.5, 1.0, 2.0)  # seconds before each retry of a call the registry did not answer
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
MAX_MANIFEST = 4 << 20  # bytes of a manifest or index (distribution's own limit)
MAX_TOKEN = 64 << 10  # bytes of a token answer
# The distribution spec's grammar of a repository name, and a SHA-256 digest (the only algorithm taken).
REPOSITORY = re.compile(r"[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:\.|_|__|-+)[a-z0-9]+)*)*")
DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
MAX_REPOSITORY = 255
MAX_REDIRECTS = 3  # of a blob's GET (to the registry's storage)
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST)


class OciUnavailable(Exception):
    """The registry did not answer (connection, timeout, 429 or 5xx) after every retry."""


class OciRefused(Exception):
    """The registry answered with an error, or with what is not what was asked for."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"the registry answered {status}: {message}" if status else message)
        self.status = status


class TooLarge(Exception):
    """A blob or manifest past the bytes it may have."""


@dataclass(frozen=True, slots=True)
class Pulled:
    """A manifest: its bytes, media type and digest."""

    body: bytes
    media_type: str
    digest: str

    def json(self) -> dict[str, Any]:
        try:
            document = json.loads(self.body)
        except ValueError:
            raise OciRefused(0, f"the manifest {self.digest} is not JSON") from None
        if not isinstance(document, dict):
            raise OciRefused(0, f"the manifest {self.digest} is not a JSON object")
        return document


def valid_reference(repository: str, digest: str) -> bool:
    """A repository name and a SHA-256 digest, as the distribution spec spells them."""
    return len(repository) <= MAX_REPOSITORY and bool(REPOSITORY.fullmatch(repository)) and bool(DIGEST.fullmatch(digest))


def sha256_digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def credentials_headers(path: Path | None, registry_url: str) -> tuple[dict[str, str], str | None]:
    """(headers for every call, Basic credentials for a token realm) from `--oci-credentials`."""
    if path is None:
        return {}, None
    text = path.read_text().strip()
    try:
        config = json.loads(text)
    except ValueError:
        return {"Authorization": f"Bearer {text}"}, None
    host = urlsplit(registry_url).netloc
    auths = config.get("auths", {}) if isinstance(config, dict) else {}
    entry: dict[str, Any] = {}
    for key, value in auths.items() if isinstance(auths, dict) else []:
        if isinstance(value, dict) and (urlsplit(key).netloc or key.split("/")[0]) == host:
            entry = value
    if entry.get("registrytoken") or entry.get("identitytoken"):
        return {"Authorization": f"Bearer {entry.get('registrytoken') or entry.get('identitytoken')}"}, None
    basic = str(entry.get("auth", ""))
    if not basic and (entry.get("username") or entry.get("password")):
        basic = base64.b64encode(f"{entry.get('username', '')}:{entry.get('password', '')}".encode()).decode()
    return ({"Authorization": f"Basic {basic}"}, f"Basic {basic}") if basic else ({}, None)


def _challenge(header: str) -> dict[str, str] | None:
    """The parameters of a `Bearer realm=...,service=...,scope=...` challenge; None for another."""
    scheme, _, rest = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return dict(re.findall(r'(\w+)="([^"]*)"', rest))


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


def authorization_headers(authorization: str) -> tuple[dict[str, str], str | None]:
    """(headers for every call, Basic credentials for a token realm) of an Authorization header given as it is
    (the Harbor scanner's: Harbor's robot account, `Basic ...` or `Bearer ...`)."""
    scheme = authorization.partition(" ")[0].lower()
    return {"Authorization": authorization}, authorization if scheme == "basic" else None


class OciRegistry:
    def __init__(
        self,
        base_url: str,
        credentials: Path | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        authorization: str | None = None,
    ) -> None:
        """`authorization`, when given, is the Authorization header of every call in place of `credentials`."""
        self.base_url = base_url.rstrip("/")
        if authorization:
            headers, self.basic = authorization_headers(authorization)
        else:
            headers, self.basic = credentials_headers(credentials, self.base_url)
        self.client = httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=TIMEOUT, follow_redirects=False, trust_env=False, transport=transport
        )
        self.transport = transport  # the realm's too
        self.tokens: dict[str, str] = {}  # scope -> bearer token from the realm

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc

    async def close(self) -> None:
        await self.client.aclose()

    async def _send(self, request: httpx.Request, scope: str, stream: bool = False) -> httpx.Response:
        """One call, retried while the registry does not answer, with a realm's token when it asks for one."""
        for attempt in range(len(BACKOFF) + 1):
            if scope in self.tokens:
                request.headers["Authorization"] = f"Bearer {self.tokens[scope]}"
            try:
                response = await self.client.send(request, stream=stream)
            except httpx.TransportError as error:
                problem = f"{type(error).__name__}: {error}"
            else:
                if response.status_code == 401 and scope not in self.tokens:
                    challenge = _challenge(response.headers.get("www-authenticate", ""))
                    if challenge and challenge.get("realm"):
                        await response.aclose()
                        self.tokens[scope] = await self._token(challenge, scope)
                        continue
                if not _retryable(response.status_code):
                    return response
                await response.aread()
                problem = f"{response.status_code} {response.text[:200]}"
            if attempt == len(BACKOFF):
                raise OciUnavailable(f"{request.method} {request.url.path}: {problem} ({attempt + 1} attempts)")
            log.warning("oci: %s %s: %s; retry in %.1f s", request.method, request.url.path, problem, BACKOFF[attempt])
            await asyncio.sleep(BACKOFF[attempt])
        raise OciUnavailable(f"{request.method} {request.url.path}: no answer")

    async def _token(self, challenge: dict[str, str], scope: str) -> str:
        params = {"service": challenge.get("service", ""), "scope": challenge.get("scope", scope)}
        headers = {"Authorization": self.basic} if self.basic else {}
        try:
            async with httpx.AsyncClient(timeout=TIMEOUT, trust_env=False, transport=self.transport) as client:
                answer = await client.get(challenge["realm"], params=params, headers=headers)
        except httpx.TransportError as error:
            raise OciUnavailable(f"the registry's token realm: {type(error).__name__}: {error}") from None
        if answer.status_code != 200 or len(answer.content) > MAX_TOKEN:
            raise OciRefused(answer.status_code, f"the registry's token realm gave no token ({answer.text[:200]})")
        found = answer.json()
        token = found.get("token") or found.get("access_token") if isinstance(found, dict) else None
        if not isinstance(token, str) or not token:
            raise OciRefused(answer.status_code, "the registry's token realm gave no token")
        return token

    async def manifest(self, repository: str, reference: str, accept: tuple[str, ...] = (*MANIFEST_TYPES, OCI_INDEX)) -> Pulled:
        """The manifest (or index) at `reference`; a digest reference is checked against the bytes."""
        request = self.client.build_request("GET", f"/v2/{repository}/manifests/{reference}", headers={"Accept": ", ".join(accept)})
        response = await self._send(request, f"repository:{repository}:pull", stream=True)
        try:
            if response.status_code != 200:
                await response.aread()
                raise OciRefused(response.status_code, f"no manifest {reference} in {repository} ({response.text[:200]})")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_MANIFEST:
                    raise TooLarge(f"the manifest {reference} of {repository} is larger than {MAX_MANIFEST} bytes")
        finally:
            await response.aclose()
        digest = sha256_digest(bytes(body))
        if DIGEST.fullmatch(reference) and digest != reference:
            raise OciRefused(0, f"the registry's manifest {reference} of {repository} has the digest {digest}")
        media_type = response.headers.get("content-type", "").split(";")[0].strip()
        return Pulled(bytes(body), media_type, digest)

    async def blob(self, repository: str, digest: str, target: Path, max_bytes: int) -> int:
        """The blob `digest` into `target`, at most `max_bytes` (else TooLarge), checked against its digest; its size."""
        hasher, size = hashlib.sha256(), 0
        url = f"/v2/{repository}/blobs/{digest}"
        request = self.client.build_request("GET", url)
        response = await self._send(request, f"repository:{repository}:pull", stream=True)
        for _ in range(MAX_REDIRECTS):  # a registry may redirect a blob to its storage: followed, without its credentials
            if response.status_code not in (301, 302, 303, 307, 308):
                break
            await response.aclose()
            following = response.next_request
            if following is None or following.url.scheme not in ("http", "https"):
                raise OciRefused(response.status_code, f"the blob {digest} of {repository} redirects nowhere")
            if following.url.netloc.decode() != self.host:
                following.headers.pop("Authorization", None)
            try:
                response = await self.client.send(following, stream=True)
            except httpx.TransportError as error:
                raise OciUnavailable(f"the blob {digest}'s storage: {type(error).__name__}: {error}") from None
        try:
            if response.status_code != 200:
                await response.aread()
                raise OciRefused(response.status_code, f"no blob {digest} in {repository} ({response.text[:200]})")
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "wb") as out:
                async for chunk in response.aiter_bytes(1 << 20):
                    size += len(chunk)
                    if size > max_bytes:
                        raise TooLarge(f"more than {max_bytes} bytes")
                    hasher.update(chunk)
                    out.write(chunk)
        finally:
            await response.aclose()
        if "sha256:" + hasher.hexdigest() != digest:
            target.unlink(missing_ok=True)
            raise OciRefused(0, f"the registry's blob {digest} of {repository} has another digest")
        return size

    async def push_blob(self, repository: str, body: bytes) -> str:
        """Upload `body` (monolithic: POST, then PUT with its digest); its digest."""
        digest = sha256_digest(body)
        scope = f"repository:{repository}:pull,push"
        started = await self._send(self.client.build_request("POST", f"/v2/{repository}/blobs/uploads/"), scope)
        location = started.headers.get("location", "")
        if started.status_code != 202 or not location:
            raise OciRefused(started.status_code, f"no blob upload in {repository} ({started.text[:200]})")
        if location.startswith(("http://", "https://")) and urlsplit(location).netloc != self.host:
            raise OciRefused(started.status_code, "the blob upload's location is on another host")
        url = self.client.base_url.join(location).copy_merge_params({"digest": digest})  # its query (the upload's state) kept
        put = self.client.build_request("PUT", url, content=body, headers={"Content-Type": "application/octet-stream"})
        answer = await self._send(put, scope)
        if answer.status_code != 201:
            raise OciRefused(answer.status_code, f"the blob {digest} was not taken ({answer.text[:200]})")
        return digest

    async def push_manifest(self, repository: str, reference: str, body: bytes, media_type: str) -> str:
        """Put a manifest or index at `reference` (a tag, or its digest); its digest."""
        request = self.client.build_request(
            "PUT", f"/v2/{repository}/manifests/{reference}", content=body, headers={"Content-Type": media_type}
        )
        answer = await self._send(request, f"repository:{repository}:pull,push")
        if answer.status_code != 201:
            raise OciRefused(answer.status_code, f"the manifest was not taken at {reference} ({answer.text[:300]})")
        return sha256_digest(body)

    async def referrers(self, repository: str, digest: str) -> list[dict[str, Any]] | None:
        """The referrers of `digest` by the referrers API; None where the registry has no such API (404)."""
        request = self.client.build_request("GET", f"/v2/{repository}/referrers/{digest}", headers={"Accept": OCI_INDEX})
        response = await self._send(request, f"repository:{repository}:pull")
        if response.status_code == 404:
            return None
        if response.status_code != 200 or len(response.content) > MAX_MANIFEST:
            raise OciRefused(response.status_code, f"the referrers of {digest} ({response.text[:200]})")
        if not response.headers.get("content-type", "").startswith(OCI_INDEX):
            return None  # a registry answering something else than an index has no referrers API
        found = Pulled(response.content, OCI_INDEX, "").json().get("manifests", [])
        return [entry for entry in found if isinstance(entry, dict)] if isinstance(found, list) else []

    async def index_at_tag(self, repository: str, tag: str) -> list[dict[str, Any]] | None:
        """The manifests of the index tagged `tag`; None where there is no such tag."""
        try:
            pulled = await self.manifest(repository, tag, (OCI_INDEX,))
        except OciRefused as error:
            if error.status == 404:
                return None
            raise
        found = pulled.json().get("manifests", [])
        return [entry for entry in found if isinstance(entry, dict)] if isinstance(found, list) else []
