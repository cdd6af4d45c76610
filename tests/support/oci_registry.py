"""A real OCI registry for the OCI gate's tests: `OciRegistryServer`, and `oras_push`.

Debian's `docker-registry` (CNCF distribution 2.8: no referrers API, so the
gate takes the referrers tag schema) on the loopback, a free port, a
filesystem store in a folder of its own, and one notification endpoint: the
service's `/hooks/oci` with `Authorization: Bearer TOKEN`, retried every
second (or none: the Harbor scanner's tests pull, nobody is notified), and
optionally Basic authentication (htpasswd) with one robot account's
credentials. `tools/dev.sh test` installs the package as root (Debian's apt);
without `/usr/bin/docker-registry` the tests skip with that reason.
`oras_push` pushes files as an artifact with PyPI's `oras`, as a user would;
`modelpack_config` writes a ModelPack config for it; `referrer_of` waits for
the gate's referrer of an artifact, found by the referrers tag schema.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from support.service_harness import free_port

BINARY = "/usr/bin/docker-registry"
MISSING = f"no {BINARY} (Debian's docker-registry, distribution 2.8, installed as root by tools/dev.sh test)"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MODELPACK_CONFIG = "application/vnd.cncf.model.config.v1+json"
# A registry started with `robot=True` takes these Basic credentials only (as a Harbor robot account's). The
# htpasswd line needs their bcrypt hash, made once with `crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH,
# rounds=16))` and kept here: Python 3.13 has no crypt module, and bcrypt is no dependency of the tests.
ROBOT = ("robot$onnx-import", "harbor-robot-secret")
ROBOT_BCRYPT = "$2b$04$viJ6veqaOwp5johBZqMYuenL1S9ccuqc1P1cHDC6cgBNCydqJt5RW"


def registry_available() -> bool:
    return os.access(BINARY, os.X_OK) and shutil.which("docker-registry") is not None


class OciRegistryServer:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.log = folder / "registry.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def start(self, notify_url: str | None, token: str = "", timeout: float = 30.0, *, robot: bool = False) -> OciRegistryServer:
        """The registry, sending its notifications to `notify_url` with the bearer `token` (None: it sends none);
        `robot`: every call needs Basic credentials, `ROBOT`'s (distribution's htpasswd authentication)."""
        config = self.folder / "config.yml"
        document: dict[str, Any] = {
            "version": 0.1,
            "log": {"level": "info", "formatter": "text"},
            "storage": {"filesystem": {"rootdirectory": str(self.folder / "data")}, "delete": {"enabled": True}},
            "http": {"addr": self.host},
        }
        if robot:
            htpasswd = self.folder / "htpasswd"
            htpasswd.write_text(f"{ROBOT[0]}:{ROBOT_BCRYPT}\n")
            document["auth"] = {"htpasswd": {"realm": "onnx-import-tests", "path": str(htpasswd)}}
        if notify_url is not None:
            document["notifications"] = {"endpoints": [{
                "name": "onnx-import", "url": notify_url, "headers": {"Authorization": [f"Bearer {token}"]},
                "timeout": "5s", "threshold": 3, "backoff": "1s", "ignoredmediatypes": ["application/octet-stream"],
            }]}  # fmt: skip
        config.write_text(json.dumps(document))  # YAML is a superset of JSON
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([BINARY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"docker-registry exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/v2/", timeout=2, auth=ROBOT if robot else None).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"docker-registry did not answer:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def manifest(self, repository: str, reference: str, accept: str = OCI_MANIFEST) -> httpx.Response:
        return httpx.get(f"{self.url}/v2/{repository}/manifests/{reference}", headers={"Accept": accept}, timeout=10)

    def blob(self, repository: str, digest: str) -> bytes:
        return httpx.get(f"{self.url}/v2/{repository}/blobs/{digest}", timeout=10).content

    def referrers_by_tag(self, repository: str, digest: str) -> list[dict[str, Any]]:
        """The referrers tag schema's index of `digest` (`sha256-<hex>`), [] while there is none."""
        answer = self.manifest(repository, digest.replace(":", "-", 1), OCI_INDEX)
        if answer.status_code == 404:
            return []
        answer.raise_for_status()
        found: list[dict[str, Any]] = answer.json()["manifests"]
        return found


def oras_push(
    registry: OciRegistryServer,
    target: str,
    layers: list[tuple[Path, str, dict[str, str]]],
    config: tuple[Path, str] | None,
    auth: tuple[str, str] | None = None,
) -> str:
    """Push `layers` (each a file, its media type and its annotations) to `target` (REPOSITORY:TAG) with
    oras, `config` (a file and its media type) as the manifest's config, as the user `auth` (Basic) if
    given; the manifest's digest."""
    import oras.provider

    client = oras.provider.Registry(hostname=registry.host, insecure=True, auth_backend="basic" if auth else "token")
    if auth:
        client.auth.set_basic_auth(*auth)  # oras's login() would write ~/.docker/config.json
    annotations = registry.folder / f"annotations-{time.monotonic_ns()}.json"
    annotations.write_text(json.dumps({str(path): extra for path, _, extra in layers}))
    response = client.push(
        target=f"{registry.host}/{target}",
        files=[f"{path}:{media_type}" for path, media_type, _ in layers],
        manifest_config=f"{config[0]}:{config[1]}" if config else None,
        annotation_file=str(annotations),
        disable_path_validation=True,
        quiet=True,
    )
    digest = response.headers["Docker-Content-Digest"]
    assert isinstance(digest, str)
    return digest


def modelpack_config(folder: Path) -> tuple[Path, str]:
    """A ModelPack config (an ONNX model, its files as layers) in `folder`, and its media type: `oras_push`'s `config`."""
    config = folder / "config.json"
    config.write_text(json.dumps({"descriptor": {"name": "net"}, "config": {"format": "onnx"},
                                  "modelfs": {"type": "layers", "diffIds": []}}))  # fmt: skip
    return config, MODELPACK_CONFIG


def referrer_of(registry: OciRegistryServer, repository: str, digest: str, artifact_type: str, timeout: float = 90.0) -> dict[str, Any]:
    """The referrer of `digest` of `artifact_type`, found by the referrers tag schema, once it is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [entry for entry in registry.referrers_by_tag(repository, digest) if entry.get("artifactType") == artifact_type]
        if found:
            return found[0]
        time.sleep(0.25)
    raise AssertionError(f"{repository}@{digest} got no {artifact_type} referrer in {timeout} s")
