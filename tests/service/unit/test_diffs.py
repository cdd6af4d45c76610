"""The comparison of two models (`service.imports.diffs.Diffs`) without HTTP:
compared in a worker (task "diff") and read from where it is kept, once per
tenant and pair, one at a time per tenant, the same comparison asked twice
at once run once. The in-process sandbox records the jobs it ran."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from in_process import InProcessSandbox, import_parts

from service.imports import pipeline
from service.imports.diffs import Compared, Diffs
from service.imports.parts import ImportParts
from service.imports.sources import under_data_root


@pytest.fixture
def imports(tmp_path: Path) -> ImportParts:
    return import_parts(tmp_path, workers=2)


@pytest.fixture
def diffs(tmp_path: Path) -> Diffs:
    return Diffs(tmp_path / "diffs")


def _imported(imports: ImportParts, tenant: str, *paths: str) -> list[str]:
    async def run() -> list[str]:
        return [(await pipeline.run(imports, under_data_root(imports.data_root, path, False), tenant)).model_id for path in paths]

    return asyncio.run(run())


def _tasks(imports: ImportParts, task: str) -> int:
    assert isinstance(imports.sandbox, InProcessSandbox)
    return sum(1 for job in imports.sandbox.jobs if job.task == task)


def test_a_comparison_runs_in_a_worker_once_and_its_pages_join_to_the_whole(imports: ImportParts, diffs: Diffs) -> None:
    a, b = _imported(imports, "alice", "add.onnx", "typed_fields.onnx")

    async def compare() -> Compared:
        return await diffs.compare(imports, "alice", a, b)

    compared = asyncio.run(compare())
    assert _tasks(imports, "diff") == 1
    assert compared.head["format"] == "onnx-service-diff/1" and compared.head["a"]["id"] == a and compared.head["b"]["id"] == b
    whole = [json.loads(change) for change in compared.page(0, compared.count)]
    assert len(whole) == compared.count > 0
    counted = sum(sum(kind.values()) for kind in compared.head["counts"].values())
    assert counted == compared.count
    pages = [json.loads(change) for first in range(0, compared.count, 2) for change in compared.page(first, 2)]
    assert pages == whole
    assert compared.page(compared.count, 5) == [] and compared.page(compared.count + 100, 5) == []
    again = asyncio.run(compare())
    assert _tasks(imports, "diff") == 1 and again.head == compared.head  # kept: no second worker


def test_the_same_comparison_asked_at_once_runs_once_and_another_tenant_runs_its_own(imports: ImportParts, diffs: Diffs) -> None:
    a, b = _imported(imports, "alice", "add.onnx", "typed_fields.onnx")
    _imported(imports, "bob", "add.onnx", "typed_fields.onnx")

    async def scenario() -> None:
        results = await asyncio.gather(*(diffs.compare(imports, "alice", a, b) for _ in range(5)))
        assert len({result.folder for result in results}) == 1
        assert _tasks(imports, "diff") == 1
        bobs = await diffs.compare(imports, "bob", a, b)
        assert bobs.folder != results[0].folder and bobs.head == results[0].head
        assert _tasks(imports, "diff") == 2  # bob's own, whatever alice compared

    asyncio.run(scenario())


def test_a_tenant_compares_one_pair_at_a_time(imports: ImportParts, diffs: Diffs, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = _imported(imports, "alice", "add.onnx", "typed_fields.onnx", "if_subgraph.onnx")
    running = 0
    most = 0
    original = diffs._run

    async def counted(*args: object) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        try:
            await asyncio.sleep(0.05)
            await original(*args)  # type: ignore[arg-type]
        finally:
            running -= 1

    monkeypatch.setattr(diffs, "_run", counted)

    async def scenario() -> None:
        await asyncio.gather(*(diffs.compare(imports, "alice", *pair) for pair in ((a, b), (b, c), (a, c))))

    asyncio.run(scenario())
    assert most == 1 and _tasks(imports, "diff") == 3


def test_only_the_newest_comparisons_are_kept(imports: ImportParts, diffs: Diffs, monkeypatch: pytest.MonkeyPatch) -> None:
    from service.imports import diffs as diff_module

    monkeypatch.setattr(diff_module, "KEPT_PER_TENANT", 2)
    a, b, c = _imported(imports, "alice", "add.onnx", "typed_fields.onnx", "if_subgraph.onnx")

    async def scenario() -> None:
        for pair in ((a, b), (b, c), (a, c)):
            await diffs.compare(imports, "alice", *pair)

    asyncio.run(scenario())
    tenant_folders = [path for path in diffs.folder.iterdir() if path.is_dir()]
    assert len(tenant_folders) == 1
    kept = sorted(path.name for path in tenant_folders[0].iterdir() if path.is_dir())
    assert kept == sorted([f"{b}-{c}", f"{a}-{c}"])
