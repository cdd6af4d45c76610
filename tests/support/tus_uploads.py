"""Resumable uploads (tus 1.0.0 under /uploads) as a client speaks them: what
the tests of tests/service/api/test_tus_uploads.py and
tests/service/process/test_resumable_uploads.py share (a model per seed, the
requests of the protocol, the uploads a service holds, API keys per tenant).
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psycopg
from onnx import TensorProto, helper, numpy_helper

from support.api_keys import key_file
from support.service_harness import ServiceUnderTest

TUS = {"Tus-Resumable": "1.0.0"}
OCTETS = "application/offset+octet-stream"
MAX_UPLOAD = 256 << 10
MAX_TOTAL = 512 << 10


def add_model(seed: int, values: int = 6) -> bytes:
    """Y = X + W, W `values` floats made from `seed` (each test its own model, so its first import is a 201)."""
    weights = np.random.default_rng(seed).standard_normal(values).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        f"add{seed}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [values])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [values])],
        [numpy_helper.from_array(weights, name="W")],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    return data


def weights_of(seed: int, values: int = 6) -> bytes:
    data: bytes = np.random.default_rng(seed).standard_normal(values).astype(np.float32).tobytes()
    return data


def metadata(filename: str, part: str | None = None) -> str:
    """`Upload-Metadata` naming the file, and the part of an import it is (`model`, `external_data`), if given."""
    said = "filename " + base64.b64encode(filename.encode()).decode()
    return said if part is None else f"{said},part {base64.b64encode(part.encode()).decode()}"


def create(
    client: httpx.Client, length: int, auth: dict[str, str] | None = None, filename: str = "model.onnx", part: str | None = None
) -> str:
    """A new upload's URL."""
    headers = {**TUS, **(auth or {}), "Upload-Length": str(length), "Upload-Metadata": metadata(filename, part)}
    response = client.post("/uploads", headers=headers)
    assert response.status_code == 201, response.text
    assert response.headers["tus-resumable"] == "1.0.0"
    location = response.headers["location"]
    assert location.startswith("/uploads/") and len(location.rsplit("/", 1)[1]) == 32
    return location


def patch(client: httpx.Client, url: str, offset: int, data: Any, auth: dict[str, str] | None = None, **headers: str) -> httpx.Response:
    chosen = {**TUS, **(auth or {}), "Upload-Offset": str(offset), "Content-Type": OCTETS, **headers}
    return client.patch(url, headers=chosen, content=data)


def offset_of(client: httpx.Client, url: str, auth: dict[str, str] | None = None) -> int:
    response = client.head(url, headers={**TUS, **(auth or {})})
    assert response.status_code == 200, response.status_code
    return int(response.headers["upload-offset"])


def upload(client: httpx.Client, data: bytes, auth: dict[str, str] | None = None, filename: str = "model.onnx", pieces: int = 3) -> str:
    """The bytes as a finished upload, sent in `pieces` PATCHes; its id."""
    url = create(client, len(data), auth, filename)
    step = max(1, -(-len(data) // pieces))
    for offset in range(0, len(data), step):
        response = patch(client, url, offset, data[offset : offset + step], auth)
        assert response.status_code == 204, response.text
        assert response.headers["upload-offset"] == str(min(len(data), offset + step))
    return url.rsplit("/", 1)[1]


def uploads_held(server: ServiceUnderTest) -> set[str]:
    """The ids of the uploads the service holds (every tenant's): in the store's
    uploads folder, or on the fleet store the index's rows."""
    if server.fleet_store is not None:
        with psycopg.connect(server.fleet_store[1]) as connection:
            return {str(row[0]) for row in connection.execute("SELECT id FROM onnx_resumable_uploads")}
    root = server.store / "uploads"
    return {entry.name for folder in root.iterdir() if folder.is_dir() for entry in folder.iterdir() if not entry.name.startswith(".")}


def wait_until(condition: Any, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def tenant_keys(path: Path, *tenants: str) -> dict[str, dict[str, str]]:
    """A key file at `path` with a key of every scope for each tenant; each tenant's request headers."""
    secrets = key_file(path, {tenant: (tenant, ["import", "read", "delete"]) for tenant in tenants})
    return {tenant: {"Authorization": f"Bearer {secret}"} for tenant, secret in secrets.items()}


def keyed_settings(base: Path) -> tuple[dict[str, dict[str, str]], tuple[str, ...]]:
    """The API keys of alice and bob (in `base`/keys.toml) and the settings of a
    service with them and small upload limits (MAX_UPLOAD, MAX_TOTAL): each
    tenant's request headers, and the service's arguments."""
    auth = tenant_keys(base / "keys.toml", "alice", "bob")
    return auth, ("--api-keys", str(base / "keys.toml"), "--max-upload", str(MAX_UPLOAD), "--max-upload-total", str(MAX_TOTAL))
