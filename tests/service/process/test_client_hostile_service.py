"""The client against a hostile service (issue 35): it stays on its origin,
and its resume loop is bounded.

Over real sockets on the loopback (tests/support/hostile_tus.py): a
`POST /uploads` answered with a `Location` on another port gets
`CrossOriginURL` naming both origins, from the synchronous and asynchronous
clients and the command line, and the other port's listener never sees a
connection (no token, no byte), nor does the resume store keep anything; a
service whose offset goes forward, then back, forever gets
`ResumeBoundExceeded` within the bound on bytes (a 4 MiB file) or on PATCH
requests (a 64 KiB one), in seconds. In memory (an httpx mock transport): a
URL kept in the resume store by an earlier run on another origin is not
followed, and forgotten; a same-origin absolute `Location` is followed.

Why a process: the service under test here is a hostile one, a listener on
loopback ports of its own (tests/support/hostile_tus.py) answering the
client's connections, and a second port must see no connection at all; the
command line runs as a subprocess.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.hostile_tus import UPLOAD, HostileTus
from support.paths import REPO

from service.client import AsyncClient, Client, CrossOriginURL, ResumeBoundExceeded, Retry, ServiceError
from service.client.resumable import MAX_RESUMES, PATCH_BYTES
from service.client.resume_store import ResumeStore, fingerprint

TOKEN = "secret-of-the-test-0123456789"
MIB = 1 << 20
QUICK = Retry(attempts=0, backoff=0.01)  # a client that went elsewhere fails fast, rather than hang the test


def model_file(folder: Path, size: int) -> Path:
    path = folder / "model.onnx"
    path.write_bytes(os.urandom(size))
    return path


# -- the origin


def test_a_location_on_another_port_is_refused_before_anything_goes_there(tmp_path: Path) -> None:
    model = model_file(tmp_path, 256 << 10)
    store = tmp_path / "resume"
    with HostileTus("elsewhere") as hostile:
        with Client(hostile.url, token=TOKEN, retry=QUICK, resume_store=store) as client, pytest.raises(CrossOriginURL) as refused:
            client.import_file(model, resumable=True)

        async def twin() -> None:
            async with AsyncClient(hostile.url, token=TOKEN, retry=QUICK, resume_store=store) as client:
                await client.import_file(model, resumable=True)

        with pytest.raises(CrossOriginURL) as refused_async:
            asyncio.run(twin())
        elsewhere = hostile.elsewhere
        time.sleep(0.2)  # a connection made would have been accepted by now
    assert elsewhere.connections == 0 and elsewhere.received == b""
    assert hostile.log == [("POST", "/uploads", f"Bearer {TOKEN}")] * 2  # no PATCH, no import, here either
    assert not store.exists() or not list(store.iterdir())
    for error in (refused.value, refused_async.value):
        assert isinstance(error, ServiceError) and error.status == 0 and error.kind == "CrossOriginURL"
        assert error.origin == f"http://127.0.0.1:{hostile.port}" and error.other == f"http://127.0.0.1:{elsewhere.port}"
        assert error.origin in str(error) and error.other in str(error) and "nothing was sent there" in str(error)


def test_the_command_line_exits_2_with_the_refusal_as_a_problem(tmp_path: Path) -> None:
    model = model_file(tmp_path, 64 << 10)
    store = tmp_path / "resume"
    with HostileTus("elsewhere") as hostile:
        args = ["--url", hostile.url, "--token", TOKEN, "--retries", "0", "--retry-backoff", "0.01", "import", str(model)]
        args += ["--resumable-above", "0", "--resume-store", str(store)]
        ran = subprocess.run([sys.executable, "-m", "service.client", *args], cwd=REPO, capture_output=True, text=True, timeout=60)
        time.sleep(0.2)
    assert ran.returncode == 2 and ran.stdout == ""
    problem = json.loads(ran.stderr)
    assert problem["kind"] == "CrossOriginURL" and problem["other_origin"] == f"http://127.0.0.1:{hostile.elsewhere.port}"
    assert hostile.elsewhere.connections == 0 and TOKEN not in ran.stderr
    assert not store.exists() or not list(store.iterdir())


def test_a_kept_url_on_another_origin_is_not_followed_but_forgotten(tmp_path: Path) -> None:
    model = model_file(tmp_path, 3 * MIB)
    seen: list[httpx.Request] = []
    created = "/uploads/" + "a" * 32

    def service(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        request.read()
        if request.url.path == "/uploads":
            return httpx.Response(201, headers={"Location": f"http://service.test{created}"})  # absolute, same origin: followed
        if request.method == "PATCH":
            return httpx.Response(204, headers={"Upload-Offset": request.headers["Content-Length"]})
        return httpx.Response(201, json={"id": "imported"})

    store = ResumeStore(tmp_path / "resume")
    status = model.stat()
    key = fingerprint("http://service.test/", model, status.st_size, status.st_mtime_ns, "model.onnx")
    store.put(key, "http://elsewhere.test:8000" + UPLOAD)  # what an earlier run was handed
    with Client("http://service.test", token=TOKEN, transport=httpx.MockTransport(service), resume_store=store.folder) as client:
        assert client.import_file(model, resumable=True) == {"id": "imported"}
    assert {request.url.host for request in seen} == {"service.test"}
    assert [f"{request.method} {request.url.path}" for request in seen] == ["POST /uploads", f"PATCH {created}", "POST /models"]
    assert json.loads(seen[-1].content) == {"upload": "a" * 32}
    assert store.get(key) is None


# -- the resume loop's bound


@pytest.mark.parametrize(("size", "bound"), [(4 * MIB, "bytes"), (64 << 10, "PATCH requests")])
def test_an_offset_going_forward_then_back_forever_is_given_up(tmp_path: Path, size: int, bound: str) -> None:
    model = model_file(tmp_path, size)
    most_bytes, most_patches = 2 * size + PATCH_BYTES, math.ceil(size / PATCH_BYTES) + MAX_RESUMES
    started = time.monotonic()
    with HostileTus("seesaw") as hostile:
        policy = Retry(backoff=0.01)
        with Client(hostile.url, retry=policy, resume_store=tmp_path / "resume") as client, pytest.raises(ResumeBoundExceeded) as gave_up:
            client.import_file(model, resumable=True)
    took = time.monotonic() - started
    error = gave_up.value
    assert took < 30, took
    assert hostile.received <= error.sent <= most_bytes and hostile.patches() == error.patches <= most_patches
    assert (error.max_bytes, error.max_patches, error.size, error.name) == (most_bytes, most_patches, size, "model.onnx")
    assert f"the bound on {bound}" in str(error) and f"{size:,} bytes" in str(error) and f"{error.patches} PATCH requests" in str(error)
    assert hostile.received > 2 * size  # it did go round, more than once
    if bound == "bytes":
        assert error.sent + size > most_bytes  # the next PATCH, from the start again, would have passed it
    else:
        assert error.patches == most_patches
    assert len(list((tmp_path / "resume").iterdir())) == 1  # the upload kept, for a later run


def test_the_async_client_is_bounded_too(tmp_path: Path) -> None:
    size = 64 << 10
    model = model_file(tmp_path, size)

    async def upload(url: str) -> dict[str, Any]:
        async with AsyncClient(url, retry=Retry(backoff=0.01), resume_store=tmp_path / "resume") as client:
            return await client.import_file(model, resumable=True)

    with HostileTus("seesaw") as hostile, pytest.raises(ResumeBoundExceeded) as gave_up:
        asyncio.run(upload(hostile.url))
    assert hostile.patches() == gave_up.value.patches == 1 + MAX_RESUMES
    assert hostile.received == gave_up.value.sent <= 2 * size + PATCH_BYTES
