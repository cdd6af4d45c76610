"""Which folder of a pulled OCI artifact the `signature` stage verifies for each model (service.registry.oci_source):
the nearest holding a `model.sig`, from the model's own folder up to the artifact's root, the model named below it;
without one, the model's own folder (where the stage then says there is no signature)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.registry.oci_pull import ArtifactTree
from service.registry.oci_source import signed_folder


@pytest.mark.parametrize(
    ("files", "model", "folder", "named"),
    [
        (["model.sig", "model.onnx", "weights.bin"], "model.onnx", "", "model.onnx"),  # model.sig a layer of its own
        (["model.sig", "onnx/model.onnx", "onnx/w.bin"], "onnx/model.onnx", "", "onnx/model.onnx"),  # signed above the model
        (["model.sig", "net/model.sig", "net/sub/m.onnx"], "net/sub/m.onnx", "net", "sub/m.onnx"),  # the nearest wins
        (["net/model.sig", "net/model.onnx", "other/b.onnx"], "other/b.onnx", "other", "b.onnx"),  # a sibling's is not its
        (["a/model.onnx"], "a/model.onnx", "a", "model.onnx"),  # unsigned: its own folder
    ],
)
def test_the_nearest_folder_holding_model_sig_is_verified(tmp_path: Path, files: list[str], model: str, folder: str, named: str) -> None:
    tree = ArtifactTree(tmp_path / "tree", 1 << 20, 10, sizes=dict.fromkeys(files, 1))
    signed = signed_folder(tree, model)
    assert (signed.directory, signed.model, signed.files) == (str(tmp_path / "tree" / folder), named, None)
