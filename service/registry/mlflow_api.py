"""The MLflow tracking server's REST API, as the hook uses it: `MlflowApi`.

Owns the few calls the gate makes (a model version, a registered model's
alias, a run, a logged model, an artifact folder's listing and a file of it
through the server's artifact proxy, a file written there (`upload`: an
attestation, within `MAX_UPLOAD`), a version's tag, an alias; `version_tag`
reads one of a version's tags), with
MLflow's auth conventions (`MLFLOW_TRACKING_TOKEN` as a Bearer token, or
`MLFLOW_TRACKING_USERNAME` and `MLFLOW_TRACKING_PASSWORD` as Basic), spoken
with httpx: no MLflow package in the service. A call that cannot connect,
times out, or gets 429 or 5xx is retried with backoff (`BACKOFF`, each
retry logged), then is `MlflowUnavailable`; any other answer but 200 is
`MlflowRefused` (MLflow's error code and message). A download is streamed
into a file, hashed as it goes, and stops at its byte bound (`TooLarge`).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

log = logging.getLogger("service")

BACKOFF = (0.5, 1.0, 2.0, 4.0)  # seconds before each retry of a call MLflow did not answer
TIMEOUT = httpx.Timeout(30.0, connect=5.0)
MAX_JSON = 8 << 20  # bytes of one JSON answer
MAX_UPLOAD = 1 << 20  # bytes of one file the gate writes (an attestation: a few KiB)


class MlflowUnavailable(Exception):
    """MLflow did not answer (connection, timeout, 429 or 5xx) after every retry."""


class MlflowRefused(Exception):
    """MLflow answered the call with an error (not found, bad request, forbidden)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"MLflow answered {status}: {message}")
        self.status = status
        self.message = message  # MLflow's error code and message


class TooLarge(Exception):
    """A file past the bytes it may have."""


@dataclass(frozen=True, slots=True)
class Fetched:
    size: int
    sha256: str


def auth_headers(environ: Mapping[str, str]) -> dict[str, str]:
    """MLflow's client conventions: a token (Bearer), else a user and password (Basic)."""
    token = environ.get("MLFLOW_TRACKING_TOKEN", "")
    if token:
        return {"Authorization": f"Bearer {token}"}
    user, password = environ.get("MLFLOW_TRACKING_USERNAME", ""), environ.get("MLFLOW_TRACKING_PASSWORD", "")
    if user or password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


class MlflowApi:
    def __init__(
        self,
        base_url: str,
        environ: Mapping[str, str] | None = None,
        backoff: tuple[float, ...] = BACKOFF,
        transport: httpx.AsyncBaseTransport | None = None,  # tests: MLflow's answers without a server
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.backoff = backoff
        self.client = httpx.AsyncClient(
            base_url=self.base_url, headers=auth_headers(os.environ if environ is None else environ), timeout=TIMEOUT,
            follow_redirects=False, trust_env=False, transport=transport,
        )  # fmt: skip

    async def close(self) -> None:
        await self.client.aclose()

    async def _call(
        self, method: str, path: str, *, params: dict[str, str] | None = None, body: dict[str, Any] | None = None,
        content: bytes | None = None,
    ) -> Any:  # fmt: skip
        """One call (a JSON `body`, or bytes as they are: `content`) answered in JSON, retried while MLflow does not answer."""
        headers = {"Content-Type": "application/octet-stream"} if content is not None else None
        for attempt in range(len(self.backoff) + 1):
            try:
                response = await self.client.request(method, path, params=params, json=body, content=content, headers=headers)
            except httpx.TransportError as error:
                problem = f"{type(error).__name__}: {error}"
            else:
                if response.status_code == 200:
                    if len(response.content) > MAX_JSON:
                        raise MlflowRefused(200, f"an answer of {len(response.content)} bytes")
                    return response.json() if response.content else {}
                if not _retryable(response.status_code):
                    raise MlflowRefused(response.status_code, _message(response))
                problem = f"{response.status_code} {_message(response)}"
            if attempt == len(self.backoff):
                raise MlflowUnavailable(f"{method} {path}: {problem} ({attempt + 1} attempts)")
            log.warning("mlflow: %s %s: %s; retry in %.1f s", method, path, problem, self.backoff[attempt])
            await asyncio.sleep(self.backoff[attempt])
        raise AssertionError("unreachable")

    async def model_version(self, name: str, version: str) -> dict[str, Any]:
        answer = await self._call("GET", "/api/2.0/mlflow/model-versions/get", params={"name": name, "version": version})
        found: dict[str, Any] = answer.get("model_version", {})
        return found

    async def version_by_alias(self, name: str, alias: str) -> dict[str, Any]:
        answer = await self._call("GET", "/api/2.0/mlflow/registered-models/alias", params={"name": name, "alias": alias})
        found: dict[str, Any] = answer.get("model_version", {})
        return found

    async def run_artifact_uri(self, run_id: str) -> str:
        answer = await self._call("GET", "/api/2.0/mlflow/runs/get", params={"run_id": run_id})
        return str(answer.get("run", {}).get("info", {}).get("artifact_uri", ""))

    async def logged_model_artifact_uri(self, model_id: str) -> str:
        answer = await self._call("GET", f"/api/2.0/mlflow/logged-models/{quote(model_id, safe='')}")
        return str(answer.get("model", {}).get("info", {}).get("artifact_uri", ""))

    async def list_artifacts(self, path: str) -> list[dict[str, Any]]:
        """The entries of a folder of the artifact proxy: path (its name), is_dir, file_size."""
        answer = await self._call("GET", "/api/2.0/mlflow-artifacts/artifacts", params={"path": path})
        files: list[dict[str, Any]] = answer.get("files", [])
        return files

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched:
        """The proxy's file at `path` into `target` (at most `max_bytes`, else TooLarge)."""
        url = "/api/2.0/mlflow-artifacts/artifacts/" + quote(path, safe="/")
        for attempt in range(len(self.backoff) + 1):
            try:
                return await self._download_once(url, target, max_bytes)
            except httpx.TransportError as error:
                problem = f"{type(error).__name__}: {error}"
            except _Retry as error:
                problem = str(error)
            if attempt == len(self.backoff):
                raise MlflowUnavailable(f"GET {url}: {problem} ({attempt + 1} attempts)")
            log.warning("mlflow: GET %s: %s; retry in %.1f s", url, problem, self.backoff[attempt])
            await asyncio.sleep(self.backoff[attempt])
        raise AssertionError("unreachable")

    async def _download_once(self, url: str, target: Path, max_bytes: int) -> Fetched:
        digest, size = hashlib.sha256(), 0
        target.parent.mkdir(parents=True, exist_ok=True)
        async with self.client.stream("GET", url) as response:
            if response.status_code != 200:
                await response.aread()
                if _retryable(response.status_code):
                    raise _Retry(f"{response.status_code} {_message(response)}")
                raise MlflowRefused(response.status_code, _message(response))
            with open(target, "wb") as out:
                async for chunk in response.aiter_bytes(1 << 20):
                    size += len(chunk)
                    if size > max_bytes:
                        raise TooLarge(f"more than {max_bytes} bytes")
                    digest.update(chunk)
                    out.write(chunk)
        return Fetched(size, digest.hexdigest())

    async def upload(self, path: str, data: bytes) -> None:
        """`data` as the proxy's file at `path` (replacing one there: written again, the same bytes); TooLarge past MAX_UPLOAD."""
        if len(data) > MAX_UPLOAD:
            raise TooLarge(f"{len(data)} bytes to write, more than {MAX_UPLOAD}")
        await self._call("PUT", "/api/2.0/mlflow-artifacts/artifacts/" + quote(path, safe="/"), content=data)

    async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
        body = {"name": name, "version": version, "key": key, "value": value}
        await self._call("POST", "/api/2.0/mlflow/model-versions/set-tag", body=body)

    async def set_alias(self, name: str, alias: str, version: str) -> None:
        await self._call("POST", "/api/2.0/mlflow/registered-models/alias", body={"name": name, "alias": alias, "version": version})


class _Retry(Exception):
    """A download answered 429 or 5xx."""


def _message(response: httpx.Response) -> str:
    try:
        answer = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(answer, dict):
        return f"{answer.get('error_code', '')} {answer.get('message', '')}".strip()[:300]
    return str(answer)[:300]


def version_tag(record: dict[str, Any], key: str) -> str | None:
    """The value of a model version's tag (MLflow's list of key and value), or None."""
    tags = record.get("tags", [])
    for tag in tags if isinstance(tags, list) else []:
        if isinstance(tag, dict) and tag.get("key") == key:
            return str(tag.get("value", ""))
    return None
