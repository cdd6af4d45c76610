"""A tensor's bytes as clients rely on them, in the test process over ASGI
(support.asgi_service, its workers real): a tensor of a few MiB uploaded
(served from the store's copy) and imported by path (served from the data
root): the raw bytes equal onnx's, `?format=npy` loads to the same array,
Range requests (start, middle, across the .npy header, suffix; small ones
read at once, large ones from the file) give exactly their bytes, HEAD the
length and no body, the plain route (no query string) answers as the full
one, and with API keys it refuses as the full one does. A data-root file
truncated or deleted after its import is never served stale (409, 410), and
its descriptor is let go. On the wire (keep-alive framing, sendfile, a file
cut while sent, the front end's memory): process/test_tensor_bytes.py.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from support.api_keys import key_file
from support.asgi_service import AsgiService, serving_over_asgi
from support.service_harness import assert_problem, copy_samples, open_files
from support.tensor_models import BIG_DIMS, LARGE, MIB, Big, import_path, values, write_model

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)

# Headers that differ from one response to the next whatever the route
PER_RESPONSE = {"date", "x-request-id"}


@pytest.fixture(scope="module")
def data_root(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Path:
    """The samples, plus: big/ (a 4 MiB tensor inline), changed/ and gone/
    (1 MiB each in external data, for the tests that change them)."""
    root = copy_samples(tmp_path_factory.mktemp("tensor-ranges-data") / "root")
    write_model(root / "big" / "model.onnx", values(1, BIG_DIMS[0] * BIG_DIMS[1]).reshape(BIG_DIMS))
    write_model(root / "changed" / "model.onnx", values(3, MIB // 4), "weights.bin")
    write_model(root / "gone" / "model.onnx", values(4, MIB // 4), "weights.bin")
    return root


def test_an_upload_and_a_path_import_are_two_models(big_uploaded: Big, big_by_path: Big) -> None:
    assert big_uploaded.url != big_by_path.url  # the origin is part of the id: each is served from its own file


def test_raw_bytes_equal_onnx(client: httpx.Client, big: Big) -> None:
    response = client.get(big.url)
    assert response.status_code == 200
    assert response.headers["content-length"] == str(len(big.raw)) == str(4 * MIB)
    assert response.headers["x-tensor-element-type"] == "FLOAT"
    assert response.headers["x-tensor-dims"] == "[1024,1024]"
    assert response.content == big.raw


def test_npy_loads_to_the_same_array(client: httpx.Client, big: Big) -> None:
    response = client.get(big.url, params={"format": "npy"})
    assert response.status_code == 200
    assert int(response.headers["content-length"]) == len(response.content)
    loaded = np.load(io.BytesIO(response.content), allow_pickle=False)
    assert loaded.dtype == np.float32 and loaded.shape == tuple(BIG_DIMS)
    assert np.array_equal(loaded, big.array)
    assert response.content.endswith(big.raw)


def assert_range(client: httpx.Client, url: str, whole: bytes, spec: str, first: int, last: int) -> None:
    response = client.get(url, headers={"Range": f"bytes={spec}"})
    assert response.status_code == 206, (spec, response.text[:300])
    assert response.headers["content-range"] == f"bytes {first}-{last}/{len(whole)}", spec
    assert response.headers["content-length"] == str(last - first + 1), spec
    assert response.content == whole[first : last + 1], spec


RAW_RANGES = [  # (Range value, first, last) of the 4 MiB; a `size` stands for the representation's length
    ("0-99", 0, 99),
    ("0-299999", 0, LARGE - 1),
    ("1000001-1000100", 1_000_001, 1_000_100),
    ("1000001-2500000", 1_000_001, 2_500_000),  # an odd offset into the file, sent with sendfile
    ("3000000-", 3_000_000, "size-1"),
    ("4194303-4194303", 4 * MIB - 1, 4 * MIB - 1),
    ("-10", "size-10", "size-1"),
    (f"-{LARGE}", f"size-{LARGE}", "size-1"),
    ("0-99999999", 0, "size-1"),  # past the end: up to the end
]


def position(value: int | str, size: int) -> int:
    return value if isinstance(value, int) else size + int(value.removeprefix("size"))


@pytest.mark.parametrize(("spec", "first", "last"), RAW_RANGES, ids=[spec for spec, _, _ in RAW_RANGES])
def test_ranges_of_the_raw_bytes(client: httpx.Client, big: Big, spec: str, first: int | str, last: int | str) -> None:
    size = len(big.raw)
    assert_range(client, big.url, big.raw, spec, position(first, size), position(last, size))


def test_ranges_of_the_npy_file(client: httpx.Client, big: Big) -> None:
    url = f"{big.url}?format=npy"
    whole = client.get(url).content
    header = len(whole) - len(big.raw)
    assert header == 128 and whole[:6] == b"\x93NUMPY"
    size = len(whole)
    for spec, first, last in [
        ("0-5", 0, 5),  # the magic, from the header alone
        ("100-300", 100, 300),  # the end of the header and the first values, read at once
        (f"50-{LARGE}", 50, LARGE),  # the header's end and the data, header bytes then sendfile
        (f"{header}-{header + LARGE}", header, header + LARGE),  # exactly the data's start
        (f"{header - 1}-{header + LARGE}", header - 1, header + LARGE),  # the header's last byte, then the data
        ("2000000-3999999", 2_000_000, 3_999_999),  # the middle: data only
        ("-10", size - 10, size - 1),
        (f"-{LARGE}", size - LARGE, size - 1),
        (f"-{size + 5}", 0, size - 1),  # a suffix longer than the file: all of it
    ]:
        assert_range(client, url, whole, spec, first, last)


def test_head_gives_the_length_and_no_body(client: httpx.Client, big: Big) -> None:
    for url, length in ((big.url, len(big.raw)), (f"{big.url}?format=npy", len(big.raw) + 128)):
        response = client.head(url)
        assert response.status_code == 200
        assert response.headers["content-length"] == str(length)
        assert response.content == b""
        ranged = client.head(url, headers={"Range": f"bytes=10-{LARGE}"})
        assert ranged.status_code == 206 and ranged.headers["content-length"] == str(LARGE - 9)
        assert ranged.headers["content-range"] == f"bytes 10-{LARGE}/{length}" and ranged.content == b""
    assert client.get(big.url).content == big.raw  # the connection after the HEADs answers as before


def comparable(response: httpx.Response) -> tuple[dict[str, str], object]:
    """Its headers and body, but for what differs from one response to the next."""
    headers = {name: value for name, value in response.headers.items() if name not in PER_RESPONSE}
    if response.headers.get("content-type", "").startswith("application/problem+json"):
        return headers, {**response.json(), "request_id": ""}
    return headers, response.content


def test_the_plain_route_answers_as_the_full_one(client: httpx.Client, big: Big) -> None:
    """No query string takes the plain route, `?format=raw` the full FastAPI one."""
    whole = client.get(big.url)
    for method, headers in [
        ("GET", {}),
        ("HEAD", {}),
        ("GET", {"Range": f"bytes=5-{LARGE}"}),
        ("GET", {"Range": "bytes=-100"}),
        ("GET", {"Range": f"bytes={len(big.raw)}-"}),  # unsatisfiable
        ("GET", {"If-None-Match": whole.headers["etag"]}),
        ("HEAD", {"Range": "bytes=0-0"}),
    ]:
        plain = client.request(method, big.url, headers=headers)
        full = client.request(method, f"{big.url}?format=raw", headers=headers)
        assert plain.status_code == full.status_code, (method, headers)
        assert comparable(plain) == comparable(full), (method, headers)
    assert whole.headers["etag"] and whole.headers["x-tensor-dims"] == "[1024,1024]"
    assert whole.headers["content-length"] == str(len(big.raw))


def test_the_plain_route_refuses_what_the_full_one_refuses(client: httpx.Client, big: Big) -> None:
    model_id = big.url.split("/")[2]
    for path in (f"/models/{model_id}/tensors/NoSuchTensor", f"/models/{'0' * 64}/tensors/Big"):
        plain, full = client.get(path), client.get(f"{path}?format=raw")
        assert plain.status_code == full.status_code == 404
        assert comparable(plain) == comparable(full)


# A data-root file changed after the import


def test_a_data_root_file_truncated_after_import_is_409_never_stale_bytes(
    server: AsgiService, client: httpx.Client, data_root: Path
) -> None:
    url = f"/models/{import_path(client, 'changed/model.onnx')}/tensors/Big"
    expected = values(3, MIB // 4).tobytes()
    assert client.get(url).content == expected  # its file is now kept open by the service
    assert client.get(url, headers={"Range": "bytes=0-9"}).content == expected[:10]
    weights = data_root / "changed" / "weights.bin"
    os.truncate(weights, MIB // 2)  # the same inode, half its bytes
    for headers in ({}, {"Range": "bytes=0-9"}, {"Range": f"bytes=-{LARGE}"}):
        got = client.get(url, headers=headers)
        assert_problem(got, 409, "tensor-source-changed")
        assert expected[:64] not in got.content
        assert_problem(client.get(f"{url}?format=npy", headers=headers), 409, "tensor-source-changed")
    assert client.head(url).status_code == 409
    assert_holds(weights, 0)  # the changed file's descriptor was closed


def test_a_data_root_file_deleted_after_import_is_410_and_released(server: AsgiService, client: httpx.Client, data_root: Path) -> None:
    url = f"/models/{import_path(client, 'gone/model.onnx')}/tensors/Big"
    assert client.get(url).content == values(4, MIB // 4).tobytes()
    weights = data_root / "gone" / "weights.bin"
    assert_holds(weights, 1)  # kept open between requests
    weights.unlink()
    assert_problem(client.get(url), 410, "tensor-source-gone")
    assert_problem(client.get(f"{url}?format=npy"), 410, "tensor-source-gone")
    assert_holds(weights, 0)  # its space is freed


def assert_holds(path: Path, count: int) -> None:
    """The service (this process: its app runs here) has `count` descriptors open on `path` (deleted or not)."""
    held = open_files(os.getpid())
    assert sum(target in (str(path), f"{path} (deleted)") for target in held) == count, held


# API keys on the plain route


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    roles = {
        "importer": ("team-a", ["import", "read"]),
        "reader": ("team-a", ["read"]),
        "other-tenant": ("team-b", ["read"]),
        "metrics-only": ("team-a", ["metrics"]),
    }
    path = tmp_path_factory.mktemp("tensor-bytes-keys") / "keys.toml"
    return path, key_file(path, roles)


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory: pytest.TempPathFactory, data_root: Path, keys: tuple[Path, dict[str, str]]) -> Iterator[AsgiService]:
    with serving_over_asgi(tmp_path_factory.mktemp("tensor-ranges-keyed") / "store", data_root, "--api-keys", str(keys[0])) as service:
        yield service


def test_with_api_keys_the_plain_route_needs_a_read_key(
    keyed_server: AsgiService, keys: tuple[Path, dict[str, str]], big_reference: np.ndarray
) -> None:
    secrets = keys[1]

    def as_(role: str | None) -> httpx.Client:
        return keyed_server.client(headers={"Authorization": f"Bearer {secrets[role]}"} if role else {})

    with as_("importer") as importer:
        url = f"/models/{import_path(importer, 'big/model.onnx')}/tensors/Big"
    with as_(None) as anonymous:
        for target in (url, f"{url}?format=raw"):
            refused = assert_problem(anonymous.get(target), 401, "unauthorized")
            assert refused["status"] == 401
            assert anonymous.head(target).status_code == 401
            assert anonymous.get(target, headers={"Range": "bytes=0-9"}).status_code == 401
    with keyed_server.client(headers={"Authorization": "Bearer oik_not-a-key"}) as stranger:
        assert_problem(stranger.get(url), 401, "unauthorized")
    with as_("metrics-only") as metrics_only:
        assert_problem(metrics_only.get(url), 403, "forbidden")
    with as_("other-tenant") as other:
        assert_problem(other.get(url), 404)  # another tenant's model is not there for it
    with as_("reader") as reader:
        plain, full = reader.get(url), reader.get(f"{url}?format=raw")
        assert plain.status_code == full.status_code == 200
        assert plain.content == full.content == big_reference.tobytes()
