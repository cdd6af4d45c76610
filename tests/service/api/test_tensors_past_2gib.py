"""A tensor past 2 GiB through the service, in the test process over ASGI
(support.asgi_service, its workers real): an external tensor of 2^31 + 4
bytes (support.past_2gib_model: a sparse file, known bytes near the start,
around 2^31 and at the end) is refused by default (Unsupported at its dims,
as the specification says) and imported with `--max-tensor-bytes 4GiB`, its
schema, security and shape checks passing. It then reads back byte for byte:
whole (streamed and hashed, never held: the one whole read of 2 GiB here,
some seconds), by Range at offsets past 2^31 (small ranges read at once,
large ones from the file in chunks), and as `.npy` (its header, and ranges
past 2^31 of the file). Sendfile past 2^31, on a loopback connection to a
second front end on the same store: test_a_range_past_2_31_goes_out_with_sendfile.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from support.asgi_service import AsgiService, serving_over_asgi
from support.in_process_service import serving_in_process
from support.past_2gib_model import BIG_BYTES, ELEMENTS, expected_bytes, expected_sha256, past_2gib_model
from support.service_harness import assert_problem

RAISED = ("--max-tensor-bytes", "4GiB")
PATH = "big/model.onnx"
CHECKS = "schema,security,shape"
MIB = 1 << 20
# (Range, first, last) of the raw bytes: past 2^31 read at once (up to 256 KiB), across and past it from the file
RAW_RANGES = [
    ("bytes=2147483648-2147483651", 2**31, 2**31 + 3),
    ("bytes=-6", BIG_BYTES - 6, BIG_BYTES - 1),
    ("bytes=2147483000-", 2147483000, BIG_BYTES - 1),
    (f"bytes={2**31 - MIB}-{2**31 + 3}", 2**31 - MIB, 2**31 + 3),
    (f"bytes={2**31 - 4}-99999999999", 2**31 - 4, BIG_BYTES - 1),
    ("bytes=0-1048575", 0, MIB - 1),
]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("past-2gib-data")
    past_2gib_model(root / "big")
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, data_root: Path) -> Iterator[AsgiService]:
    with serving_over_asgi(tmp_path_factory.mktemp("store") / "store", data_root, *RAISED) as service:
        yield service


@pytest.fixture(scope="module")
def client(server: AsgiService) -> Iterator[httpx.Client]:
    with server.client(timeout=300) as session:
        yield session


@pytest.fixture(scope="module")
def imported(client: httpx.Client) -> dict[str, object]:
    response = client.post("/models", params={"checks": CHECKS}, json={"path": PATH})
    assert response.status_code == 201, response.text
    summary: dict[str, object] = response.json()
    return summary


@pytest.fixture(scope="module")
def url(imported: dict[str, object]) -> str:
    return f"/models/{imported['id']}/tensors/Big"


def test_by_default_it_is_refused_as_unsupported_at_its_dims(tmp_path: Path, data_root: Path) -> None:
    with serving_over_asgi(tmp_path / "store", data_root) as default, default.client() as client:
        body = assert_problem(client.post("/models", json={"path": PATH}), 422, "unsupported")
    assert body["field_path"] == "ModelProto.graph.initializer[0].dims"
    assert f"tensor needs {BIG_BYTES} bytes, more than max_tensor_bytes={2**31 - 1}" in body["detail"]


def test_with_the_setting_it_imports_and_its_checks_pass(imported: dict[str, object]) -> None:
    checks = imported["checks"]
    assert isinstance(checks, dict)
    assert {stage: entry["status"] for stage, entry in checks.items()} == dict.fromkeys(CHECKS.split(","), "pass"), checks
    assert imported["verdict"] == "pass"


def test_it_reads_back_whole_byte_for_byte(server: AsgiService, url: str) -> None:
    digest = hashlib.sha256()
    received = [0]

    def consume(chunk: bytes) -> None:
        digest.update(chunk)
        received[0] += len(chunk)

    status, headers = server.streamed(url, consume)
    assert status == 200
    assert headers["content-length"] == str(BIG_BYTES) == str(received[0])
    assert (headers["x-tensor-element-type"], headers["x-tensor-dims"]) == ("FLOAT", f"[{ELEMENTS}]")
    assert digest.hexdigest() == expected_sha256()


@pytest.mark.parametrize(("spec", "first", "last"), RAW_RANGES)
def test_ranges_past_2_31_give_exactly_their_bytes(client: httpx.Client, url: str, spec: str, first: int, last: int) -> None:
    response = client.get(url, headers={"Range": spec})
    assert response.status_code == 206, response.text[:300]
    assert response.headers["content-range"] == f"bytes {first}-{last}/{BIG_BYTES}"
    assert response.content == expected_bytes(first, last)


def test_a_range_from_beyond_the_end_is_416(client: httpx.Client, url: str) -> None:
    response = client.get(url, headers={"Range": f"bytes={BIG_BYTES}-"})
    assert response.status_code == 416
    assert response.headers["content-range"] == f"bytes */{BIG_BYTES}"


def test_npy_header_and_ranges_past_2_31(client: httpx.Client, url: str) -> None:
    head = client.get(url, params={"format": "npy"}, headers={"Range": "bytes=0-127"})
    assert head.status_code == 206
    npy = io.BytesIO(head.content)
    assert np.lib.format.read_magic(npy) == (1, 0)
    assert np.lib.format.read_array_header_1_0(npy) == ((ELEMENTS,), False, np.dtype("<f4"))
    header_bytes = npy.tell()
    assert head.headers["content-range"] == f"bytes 0-127/{header_bytes + BIG_BYTES}"
    assert head.content[header_bytes:] == expected_bytes(0, 127 - header_bytes)
    for first in (header_bytes + 2**31 - 4, header_bytes + 2**31 - MIB):  # read at once; from the file in chunks
        response = client.get(url, params={"format": "npy"}, headers={"Range": f"bytes={first}-"})
        assert response.status_code == 206
        assert response.content == expected_bytes(first - header_bytes, BIG_BYTES - 1)


def test_a_range_past_2_31_goes_out_with_sendfile(server: AsgiService, data_root: Path, url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A second front end on the module's store (as --http-workers makes
    them), on a loopback port (support.in_process_service: the service's own
    h11 protocol, whose zero-copy send is `sendfile`): a range larger than
    what is read at once, from 1 MiB before 2^31 to the end; the kernel is
    asked for the file's bytes up to its last, past 2^31."""
    first = 2**31 - MIB
    sent: list[tuple[int, int]] = []  # (offset, bytes sent) of each os.sendfile of the range
    real_sendfile = os.sendfile

    def sendfile(out_fd: int, in_fd: int, offset: int | None, count: int) -> int:
        done = real_sendfile(out_fd, in_fd, offset, count)
        if offset is not None and offset >= first:
            sent.append((offset, done))
        return done

    monkeypatch.setattr(os, "sendfile", sendfile)
    with serving_in_process(server.store, data_root, *RAISED) as front_end, front_end.client() as client:
        response = client.get(url, headers={"Range": f"bytes={first}-"})
    assert response.status_code == 206
    assert response.content == expected_bytes(first, BIG_BYTES - 1)
    assert sent and sent[0][0] == first and max(offset + done for offset, done in sent) == BIG_BYTES
