"""The MLflow gate's report and diff tags are report links (`service.imports.report_links`),
in process: the hook (`RegistryHook.validate`) over the in-process sandbox
and an MLflow answered in memory (a version's artifacts, its tags, the
alias). A version's `onnx_import.report` is a link to its model's SARIF as
the hook's tenant, under `--public-url`; the next version's
`onnx_import.diff_url` a link to the comparison with the version holding the
alias. That they open over HTTP without a key: tests/service/api/test_report_links.py
and, against a real MLflow, tests/service/process/test_registry_mlflow.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from in_process import import_parts

from service.imports.diffs import Diffs
from service.registry.folders import ObjectMissing
from service.registry.hook import RegistryHook
from service.registry.mlflow_api import Fetched, MlflowApi, MlflowRefused

SAMPLES = Path(__file__).resolve().parents[3] / "testdata" / "samples"
PUBLIC_URL = "https://onnx-import.example/prefix"


class RegistryInMemory(MlflowApi):
    """One registered model whose version N's artifacts are `models[N]` (one .onnx file); the tags and alias it is given."""

    def __init__(self, models: dict[str, bytes]) -> None:
        super().__init__("http://mlflow.test", environ={})
        self.models = models
        self.tags: dict[str, dict[str, str]] = {version: {} for version in models}
        self.holder = ""

    async def model_version(self, name: str, version: str) -> dict[str, Any]:
        return {"name": name, "version": version, "source": f"mlflow-artifacts:/v{version}"}

    async def list_artifacts(self, path: str) -> list[dict[str, Any]]:
        return [{"path": "model.onnx", "is_dir": False, "file_size": len(self.models[path.removeprefix("v")])}]

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched:
        folder, _, name = path.partition("/")
        if name != "model.onnx":
            raise ObjectMissing(path)
        data = self.models[folder.removeprefix("v")]
        target.write_bytes(data)
        return Fetched(len(data), "")

    async def version_by_alias(self, name: str, alias: str) -> dict[str, Any]:
        if not self.holder:
            raise MlflowRefused(404, "RESOURCE_DOES_NOT_EXIST")
        return {"version": self.holder, "tags": [{"key": key, "value": value} for key, value in self.tags[self.holder].items()]}

    async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
        self.tags[version][key] = value

    async def set_alias(self, name: str, alias: str, version: str) -> None:
        self.holder = version


def test_the_gate_tags_a_version_with_links_to_its_report_and_its_diff(tmp_path: Path) -> None:
    parts = import_parts(
        tmp_path, mlflow_url="http://mlflow.test", mlflow_webhook_secret="s", mlflow_checks="schema", public_url=PUBLIC_URL
    )
    mlflow = RegistryInMemory({version: (SAMPLES / name).read_bytes() for version, name in (("1", "add.onnx"), ("2", "typed_fields.onnx"))})
    hook = RegistryHook(parts, Diffs(tmp_path / "diffs"), mlflow)

    try:
        asyncio.run(hook.validate("m", "1"))
        asyncio.run(hook.validate("m", "2"))
    finally:
        asyncio.run(mlflow.close())
    first = mlflow.tags["1"]
    assert first["onnx_import.verdict"] == "pass", first
    assert first["onnx_import.report"].startswith(f"{PUBLIC_URL}/links/"), first
    report = parts.links.opened(first["onnx_import.report"].rpartition("/")[2])
    assert (report.kind, report.tenant, report.model_ids) == ("sarif", "mlflow", (first["onnx_import.model_id"],))

    second = mlflow.tags["2"]
    assert second["onnx_import.compared_with"] == "1" and second["onnx_import.diff_url"].startswith(f"{PUBLIC_URL}/links/"), second
    diff = parts.links.opened(second["onnx_import.diff_url"].rpartition("/")[2])
    assert (diff.kind, diff.tenant, diff.model_ids) == ("diff", "mlflow", (first["onnx_import.model_id"], second["onnx_import.model_id"]))
