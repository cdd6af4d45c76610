"""Importing many models in one process keeps memory bounded.

The importer pauses the garbage collector during an import and moves what it
allocated to the oldest generation (importer/gc_pause.py); the resolved graph
holds reference cycles, so this checks that dropped models are still
collected: the number of live objects must not grow with the number of imports.
"""

from __future__ import annotations

import gc
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from importer import load_model


def _model(path: Path) -> Path:
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(200)]
    inputs = [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("v200", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    return path


def test_repeated_imports_do_not_accumulate_objects(tmp_path: Path) -> None:
    """Dropped models are collected: live objects stay within the amortized
    bound (a full collection runs once the objects moved past the collector
    outnumber the survivors of the last one), whatever the process's size."""
    path = _model(tmp_path / "chain.onnx")
    for _ in range(200):
        load_model(path).close()
    gc.collect()
    settled = len(gc.get_objects())
    gc.disable()  # measure what one import leaves to the collector
    try:
        load_model(path).close()
        per_import = len(gc.get_objects()) - settled
    finally:
        gc.enable()
    gc.collect()
    allowance = max(settled, 100_000)
    imports = 3 * allowance // per_import + 1  # moves three times the allowance: uncollected, it would show
    for _ in range(imports):
        load_model(path).close()
    live = len(gc.get_objects())
    bound = settled + allowance + 2 * per_import
    assert live <= bound * 1.05, f"{live - settled} objects more after {imports} imports ({per_import} each)"


def test_the_collector_state_is_restored(tmp_path: Path) -> None:
    path = _model(tmp_path / "chain.onnx")
    assert gc.isenabled()
    load_model(path).close()
    assert gc.isenabled()
    gc.disable()
    try:
        load_model(path).close()
        assert not gc.isenabled()
    finally:
        gc.enable()
