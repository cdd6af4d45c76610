"""An upload refused by its model part is answered before the rest of its
body is read, in the test process over ASGI (support.asgi_service, the
workers real): the model part is checked by a sandboxed worker while the
external data that follows is still being sent, and the refusal names the
place (kind, offset, field path) as a refusal after the whole body does.
The body's external part is produced lazily, at a steady rate, by an async
generator that counts what it produced. The connection's own end (closed by
the server, the body never read): process/test_refused_early_tcp.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from support.asgi_service import AsgiService, serving_over_asgi
from support.service_harness import SAMPLES, assert_problem
from support.small_models import external_weight_model

BOUNDARY = "refused-early-boundary"
GIB = 1 << 30
CHUNK = 256 << 10
RATE = 32 << 20  # bytes a second the generator produces at most: a fast client's link
SMALL_FRACTION = 0.10  # of the external part: produced before the answer
GIVE_UP_FRACTION = 0.25  # the generator stops here: the service read on without answering


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AsgiService]:
    base = tmp_path_factory.mktemp("refused-early")
    with serving_over_asgi(base / "store", SAMPLES, "--max-upload-total", "4GiB") as running:
        yield running


class LazyBody:
    """A multipart body: the model part, then one external_data part of `external_bytes` zeros, made as it is sent."""

    def __init__(self, model: bytes, location: str, external_bytes: int, give_up: bool = True) -> None:
        self.give_up = give_up  # stop at GIVE_UP_FRACTION: the body is meant to be refused before
        self.head = (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"; filename="model.onnx"\r\n\r\n'.encode()
            + model
            + f'\r\n--{BOUNDARY}\r\nContent-Disposition: form-data; name="external_data"; filename="{location}"\r\n\r\n'.encode()
        )
        self.tail = f"\r\n--{BOUNDARY}--\r\n".encode()
        self.external_bytes = external_bytes
        self.produced = 0  # bytes of the external part produced so far

    @property
    def length(self) -> int:
        return len(self.head) + self.external_bytes + len(self.tail)

    async def chunks(self) -> AsyncIterator[bytes]:
        yield self.head
        started = time.monotonic()
        zeros = bytes(CHUNK)
        while self.produced < self.external_bytes:
            if self.give_up and self.produced > GIVE_UP_FRACTION * self.external_bytes:
                raise RuntimeError(f"the service read {self.produced} bytes of the external part without answering")
            ahead = self.produced / RATE - (time.monotonic() - started)
            if ahead > 0:
                await asyncio.sleep(ahead)
            piece = zeros[: self.external_bytes - self.produced]
            self.produced += len(piece)
            yield piece
        yield self.tail


async def _sent(service: AsgiService, body: LazyBody) -> tuple[httpx.Response, int]:
    """The answer to `body`, and the external bytes produced when it came."""
    headers = {"content-type": f"multipart/form-data; boundary={BOUNDARY}", "content-length": str(body.length)}
    async with service.async_client() as client:
        response = await client.post("/models", content=body.chunks(), headers=headers)
        return response, body.produced


def _answered_early(service: AsgiService, body: LazyBody) -> dict[str, Any]:
    response, produced = asyncio.run(_sent(service, body))
    assert produced < SMALL_FRACTION * body.external_bytes, f"answered after {produced} of {body.external_bytes} bytes"
    assert response.headers["connection"] == "close"
    problem = assert_problem(response, 422)
    assert service.temporary_files() == []
    return problem


def test_a_malformed_model_part_is_refused_before_its_external_data_arrives(service: AsgiService) -> None:
    stored = service.stored_contents()
    problem = _answered_early(service, LazyBody(b"\x08", "weights.bin", 2 * GIB))  # a varint cut off
    assert problem["kind"] == "Malformed" and problem["offset"] == 1 and problem["field_path"] == "ModelProto"
    assert problem["input"] == "model.onnx"
    assert service.stored_contents() == stored


def test_a_location_outside_the_rules_is_refused_before_the_data_arrives(service: AsgiService) -> None:
    model = external_weight_model("../secrets/weights.bin", 1024)
    stored = service.stored_contents()
    problem = _answered_early(service, LazyBody(model, "weights.bin", 2 * GIB))
    assert problem["kind"] == "ExternalData" and "'..'" in problem["detail"]
    assert problem["field_path"] == "ModelProto.graph.initializer[0]", problem
    assert isinstance(problem["offset"], int) and problem["offset"] > 0
    assert service.stored_contents() == stored


def test_a_model_part_that_passes_lets_the_whole_body_in(service: AsgiService) -> None:
    elements = 3 << 20  # 12 MiB of external data: the model part is checked while it arrives
    model = external_weight_model("weights.bin", elements)
    body = LazyBody(model, "weights.bin", elements * 4, give_up=False)
    response, produced = asyncio.run(_sent(service, body))
    assert response.status_code == 201, response.text
    assert produced == body.external_bytes
    assert response.headers.get("connection") != "close"
    summary = response.json()
    assert summary["input"] == "model.onnx" and summary["id"] in service.stored_contents()


def test_a_part_the_model_does_not_name_is_refused_once_the_model_part_has_passed(service: AsgiService) -> None:
    model = external_weight_model("weights.bin", 16)  # a model that passes; its one location is weights.bin
    body = LazyBody(model, "weight.bin", 2 * GIB)  # the external data under another name: no tensor would use it
    stored = service.stored_contents()
    response, produced = asyncio.run(_sent(service, body))
    assert produced < SMALL_FRACTION * body.external_bytes, f"answered after {produced} of {body.external_bytes} bytes"
    assert response.headers["connection"] == "close"
    problem = assert_problem(response, 400, "bad-request")
    assert problem["detail"] == "1 external_data parts are not used by any tensor: 'weight.bin'"
    assert service.temporary_files() == [] and service.stored_contents() == stored
