"""The client's name and label of an import, against the service in the test
process over ASGI (support.asgi_service, its workers real): `import_file`'s
`name=` and `label=` (the sync client, one multipart request and resumable
uploads; the async client), and the command line's `import --name --label`
(its parser and its upload step, run on a client of the same transport),
each listed by the service under that name with that label; a label the
service refuses is a `ServiceError` naming the rule."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from graph_timing import chain_model
from support.asgi_service import AsgiService

from service.client import AsyncClient, Client, ServiceError
from service.client.__main__ import build_parser, upload


def model_file(folder: Path, seed: int) -> Path:
    path = folder / "model.onnx"
    path.write_bytes(chain_model(3, seed=seed))
    return path


def listed(client: Client, model_id: str) -> tuple[str, str | None]:
    item = next(item for item in client.models() if item["id"] == model_id)
    return item["input"], item["label"]


@pytest.mark.parametrize("resumable", [False, True], ids=["multipart", "resumable"])
def test_import_file_gives_the_name_and_label(server: AsgiService, tmp_path: Path, resumable: bool) -> None:
    path = model_file(tmp_path, seed=601 + resumable)
    with Client(server.url, transport=server.transport(), resume_store=tmp_path / "resume") as client:
        summary = client.import_file(path, name="ranker", label="v3 fp16", resumable=resumable)
        assert (summary["input"], summary["label"]) == ("ranker", "v3 fp16")
        assert listed(client, summary["id"]) == ("ranker", "v3 fp16")


def test_the_async_client_gives_them_too(server: AsgiService, tmp_path: Path) -> None:
    path = model_file(tmp_path, seed=603)

    async def run() -> dict[str, object]:
        async with AsyncClient(server.url, transport=server.async_transport()) as client:
            summary: dict[str, object] = await client.import_file(path, label="async")
            return summary

    summary = asyncio.run(run())
    assert (summary["input"], summary["label"]) == ("model.onnx", "async")


def test_the_command_lines_name_and_label(server: AsgiService, tmp_path: Path) -> None:
    path = model_file(tmp_path, seed=604)
    args = build_parser().parse_args(["--url", server.url, "import", str(path), "--name", "models:/ranker/3", "--label", "canary"])
    with Client(server.url, transport=server.transport()) as client:
        summary = json.loads(upload(client, args, False))
        assert (summary["input"], summary["label"]) == ("models:/ranker/3", "canary")
        assert listed(client, summary["id"]) == ("models:/ranker/3", "canary")


def test_a_label_the_service_refuses_is_a_service_error(server: AsgiService, tmp_path: Path) -> None:
    path = model_file(tmp_path, seed=605)
    with Client(server.url, transport=server.transport()) as client, pytest.raises(ServiceError) as refused:
        client.import_file(path, label="x" * 101)
    assert refused.value.status == 400 and "more than 100" in str(refused.value.problem.get("detail"))
