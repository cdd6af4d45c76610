"""The API's HTTP edges a client relies on, in the test process over ASGI
(support.asgi_service, its workers real): Range values that used to be 500s
(200 with the header ignored, 206 or 416), If-None-Match's weak and
If-Range's strong comparison, and `X-Content-Type-Options: nosniff` on every
kind of response (JSON, problems, tensors whole, partial, streamed, HEAD).
The edge on the wire (header deadlines, slow clients, request smuggling, a
client gone, header bytes fuzzed): process/test_service_http_hardening.py."""

from __future__ import annotations

from pathlib import Path

import httpx
import numpy as np
import pytest
from support.asgi_service import AsgiService
from support.service_harness import assert_problem, copy_samples
from support.tensor_models import Tensor, imported_w, write_model

BIG_TENSOR_ELEMENTS = 100_000  # 400 kB of float: above the size from which a tensor is streamed


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The samples, plus a model whose tensor is big enough to be streamed."""
    root = copy_samples(tmp_path_factory.mktemp("http-edges-data") / "root")
    write_model(root / "big.onnx", np.arange(BIG_TENSOR_ELEMENTS, dtype=np.float32))
    return root


@pytest.fixture(scope="module")
def tensor(server: AsgiService) -> Tensor:
    """Tensor W of add.onnx, imported on the main server."""
    return imported_w(server)


# Range, If-None-Match, If-Range


@pytest.mark.parametrize(
    ("value", "status", "first", "last"),
    [
        (b"bytes=\xb2-", 200, 0, -1),  # latin-1 "²": a Unicode digit, not an ASCII one
        ("bytes=²-".encode(), 200, 0, -1),
        ("bytes=0-٣".encode(), 200, 0, -1),  # Arabic-Indic three
        (b"bytes=-\xb9", 200, 0, -1),
        (b"bytes=" + b"9" * 5000 + b"-", 416, 0, 0),  # beyond any representation
        (b"bytes=" + b"9" * 5000 + b"-" + b"9" * 5001, 416, 0, 0),
        (b"bytes=0-" + b"9" * 5000, 206, 0, -1),  # to the end
        (b"bytes=-" + b"9" * 5000, 206, 0, -1),  # a suffix longer than the whole
        (b"bytes=" + b"0" * 5000 + b"1-", 206, 1, -1),  # leading zeros
        (b"bytes=" + b"9" * 5000 + b"-1", 200, 0, -1),  # last before first: invalid, ignored
        (b"BYTES=2-3", 206, 2, 3),  # the unit is case-insensitive
        (b"bytes=1-2, 3-4", 200, 0, -1),  # several ranges: the whole
    ],
)
def test_odd_ranges_are_no_500(server: AsgiService, tensor: Tensor, value: bytes, status: int, first: int, last: int) -> None:
    """200 (the header ignored), 206 or 416; `last` -1: the last byte."""
    size = len(tensor.content)
    with server.client() as client:
        response = client.get(tensor.url, headers={b"Range": value})
    if status == 416:
        assert_problem(response, 416, "range-not-satisfiable")
        assert response.headers["content-range"] == f"bytes */{size}"
        return
    assert response.status_code == status, response.text
    end = size - 1 if last == -1 else last
    assert response.content == tensor.content[first : end + 1]
    if status == 206:
        assert response.headers["content-range"] == f"bytes {first}-{end}/{size}"


def test_if_none_match_uses_the_weak_comparison(server: AsgiService, tensor: Tensor) -> None:
    etag = tensor.etag
    with server.client() as client:

        def status(*values: str) -> int:
            headers = httpx.Headers([("If-None-Match", value) for value in values])
            return client.get(tensor.url, headers=headers).status_code

        assert status(etag) == 304
        assert status(f"W/{etag}") == 304
        assert status("*") == 304
        assert status(f'"other", W/{etag}') == 304
        assert status(f'"a,b" ,, {etag}') == 304  # a comma inside a tag, an empty element
        assert status('"other"', etag) == 304  # two header lines: one list
        assert status('"other"') == 200
        assert status(f"{etag[:-1]}") == 200  # not a list of entity tags: ignored
        assert status("W/*") == 200
        assert client.head(tensor.url, headers={"If-None-Match": f"W/{etag}"}).status_code == 304
        not_modified = client.get(tensor.url, headers={"If-None-Match": "*"})
        assert not_modified.content == b"" and not_modified.headers["etag"] == etag


def test_if_range_uses_the_strong_comparison(server: AsgiService, tensor: Tensor) -> None:
    with server.client() as client:

        def status(if_range: str) -> int:
            return client.get(tensor.url, headers={"Range": "bytes=0-3", "If-Range": if_range}).status_code

        assert status(tensor.etag) == 206
        assert status(f"W/{tensor.etag}") == 200  # a weak validator never matches
        assert status('"other"') == 200
        assert status("Mon, 30 Nov 2026 08:59:35 GMT") == 200  # a date: no Last-Modified to match
        assert status(f"{tensor.etag}, {tensor.etag}") == 200


# Headers on every response


def test_nosniff_on_every_kind_of_response(server: AsgiService, tensor: Tensor) -> None:
    with server.client() as client:
        imported = client.post("/models", json={"path": "big.onnx"})
        assert imported.status_code in (200, 201), imported.text
        big_url = f"/models/{imported.json()['id']}/tensors/Big"
        with client.stream("GET", big_url) as streamed:  # a StreamingResponse
            assert streamed.status_code == 200
            assert len(streamed.read()) == 4 * BIG_TENSOR_ELEMENTS
        responses = {
            "json": client.get("/healthz"),
            "summary": imported,
            "problem": client.get("/models/no-such-model"),
            "validation problem": client.get("/models", params={"limit": "0"}),
            "method problem": client.delete("/healthz"),
            "tensor": client.get(tensor.url),
            "partial tensor": client.get(tensor.url, headers={"Range": "bytes=0-1"}),
            "not modified": client.get(tensor.url, headers={"If-None-Match": "*"}),
            "unsatisfiable": client.get(tensor.url, headers={"Range": "bytes=9999-"}),
            "head tensor": client.head(tensor.url),
            "head json": client.head("/healthz"),
            "head streamed": client.head(big_url),
            "streamed": streamed,
        }
    for name, response in responses.items():
        assert response.status_code < 500, name
        assert response.headers.get_list("x-content-type-options") == ["nosniff"], name
    assert responses["head tensor"].content == b"" and responses["head tensor"].headers["content-length"] == str(len(tensor.content))
    assert responses["head streamed"].headers["content-length"] == str(4 * BIG_TENSOR_ELEMENTS)
