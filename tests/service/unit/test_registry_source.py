"""A registry version as a source of the import pipeline
(`service.registry.version_source.RegistryVersion`), over a folder of
artifacts held in memory: each external file is fetched once, by the
location the model names (two spellings of one path are one file; a
location holding a percent sign is refused, since MLflow's artifact proxy
would decode it), within the byte budget. The in-process sandbox reads the model (its external
locations, then the import)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from in_process import import_parts
from onnx import TensorProto, helper, numpy_helper

from service.errors import UploadTooLarge
from service.imports import pipeline
from service.imports.answers import Imported
from service.imports.parts import ImportParts
from service.registry.folders import ObjectMissing
from service.registry.mlflow_api import Fetched
from service.registry.sources import Refused
from service.registry.version_source import RegistryVersion


class MemoryFolder:
    """A version's artifacts, by path; every download asked is noted."""

    where = "memory"

    def __init__(self, files: dict[str, bytes]) -> None:
        self.files = files
        self.downloads: list[str] = []

    async def listing(self) -> list[dict[str, Any]]:
        return [{"path": name, "is_dir": False, "file_size": len(data)} for name, data in self.files.items()]

    async def download(self, path: str, target: Path, max_bytes: int) -> Fetched:
        self.downloads.append(path)
        if path not in self.files:
            raise ObjectMissing(f"no {path!r}")
        data = self.files[path]
        target.write_bytes(data)
        return Fetched(len(data), hashlib.sha256(data).hexdigest())


def _model_naming(*locations: str) -> bytes:
    """One float tensor per location, each the first 4 bytes of the file it names, summed."""
    tensors = []
    for index, location in enumerate(locations):
        tensor = numpy_helper.from_array(np.zeros([1], np.float32), f"w{index}")
        tensor.data_location = TensorProto.EXTERNAL
        tensor.ClearField("raw_data")
        for key, value in (("location", location), ("offset", "0"), ("length", "4")):
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
        tensors.append(tensor)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Sum", [t.name for t in tensors], ["y"])], "g", [], [y], tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    data: bytes = model.SerializeToString()
    return data


@pytest.fixture
def imports(tmp_path: Path) -> ImportParts:
    return import_parts(tmp_path)


def _validated(imports: ImportParts, folder: MemoryFolder) -> Imported:
    return asyncio.run(pipeline.run(imports, RegistryVersion(folder, "models:/m/1"), "mlflow"))


def test_two_spellings_of_one_location_are_one_file_fetched_once(imports: ImportParts) -> None:
    folder = MemoryFolder({"model.onnx": _model_naming("w.bin", "./w.bin", "././w.bin"), "w.bin": b"\0" * 4})
    imported = _validated(imports, folder)
    assert imported.created
    assert folder.downloads == ["model.onnx", "w.bin"]
    record = imports.store.read_record(imported.model_id)
    assert record is not None and set(record.files) == {"model", "w.bin"}


def test_a_location_holding_a_percent_sign_is_refused_before_anything_is_fetched_for_it(imports: ImportParts) -> None:
    """Two hundred spellings `w.bi%6E`, ... of one name: MLflow's proxy would decode each to `w.bin` (attack 25)."""
    forms = [[c, f"%{ord(c):02X}", f"%{ord(c):02x}"] for c in "w.bin"]  # each character as it is, or percent-encoded
    spellings = [a + b + c + d + e for a in forms[0] for b in forms[1] for c in forms[2] for d in forms[3] for e in forms[4]]
    spellings = sorted(set(spellings) - {"w.bin"})[:200]
    folder = MemoryFolder({"model.onnx": _model_naming("w.bin", *spellings), "w.bin": b"\0" * 4})
    with pytest.raises(Refused, match="holds a '%'"):
        _validated(imports, folder)
    assert folder.downloads == ["model.onnx", "w.bin"]  # the real name once; no spelling fetched
    assert imports.store.model_count() == 0


def test_the_files_fetched_count_against_the_budget(tmp_path: Path) -> None:
    imports = import_parts(tmp_path, max_upload=1024, max_upload_total=1024)
    folder = MemoryFolder({"model.onnx": _model_naming("w.bin"), "w.bin": b"\0" * 2048})
    with pytest.raises(UploadTooLarge) as refused:
        _validated(imports, folder)
    assert refused.value.limit == "max_upload_total"
    assert imports.store.model_count() == 0


def test_the_versions_name_is_the_holdings_name(imports: ImportParts) -> None:
    """`models:/NAME/VERSION`, the source's display name, is what the tenant's listing and summary name the model by."""
    imported = _validated(imports, MemoryFolder({"model.onnx": _model_naming("w.bin"), "w.bin": b"\0" * 4}))
    (listed,) = imports.store.listing("mlflow", None, 10)
    assert (listed.model_id, listed.holding.input, listed.holding.label) == (imported.model_id, "models:/m/1", "")
    assert b'"input":"models:/m/1"' in imported.summary
