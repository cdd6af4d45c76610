"""Importing many models in one process keeps memory bounded.

The importer pauses the garbage collector during an import and moves what it
allocated to the oldest generation (importer/gc_pause.py). The resolved graph
holds no reference cycle (its references back up the model are weak,
importer/graph.py), so a dropped model must be freed at once by reference
counting, leaving nothing for the collector: the number of live objects must
not grow with the number of imports, even with the collector switched off.

A host that froze objects (`gc.freeze()`, as the service's front end does at
start-up) keeps them frozen, and its imports do not walk them: CPython counts
the frozen generation by walking it, once per import that would be a full
pass over the host's heap. That rule is process-wide state, so its test runs
in a process of its own.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
from onnx import TensorProto, helper
from support.paths import REPO

import importer
from importer import load_model


def _model(path: Path) -> Path:
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"], name=f"n{i}") for i in range(200)]
    inputs = [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [4])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("v200", TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    return path



def test_a_dropped_model_is_freed_at_once_without_the_collector(tmp_path: Path) -> None:
    """Models with subgraphs, captures and consumers: after the collector's
    last run, 50 imports of each leave no object behind and nothing for the
    collector to find. In a process of its own, on the importer under test:
    the collector's counts are process-wide, and threads that other tests
    leave in theirs (a service's event loop, a client's pool) make garbage
    of their own meanwhile."""
    paths = [str(_model(tmp_path / "chain.onnx")), str(REPO / "testdata" / "samples" / "if_subgraph.onnx")]
    script = textwrap.dedent(f"""
        import gc, sys
        sys.path.insert(0, {str(Path(importer.__file__).resolve().parents[1])!r})
        from importer import load_model

        paths = {paths!r}
        for path in paths:  # the first import loads what is loaded once (schema tables, caches, and
            with load_model(path):  # the compiled `__exit__`'s argument names, made on its first call)
                pass
        gc.collect()
        gc.disable()
        settled = len(gc.get_objects())
        for _ in range(50):
            for path in paths:
                with load_model(path) as model:
                    assert model.graph.nodes and all(value.graph is model.graph for value in model.graph.values.values())
        del model
        left = len(gc.get_objects()) - settled
        print(left, gc.collect())
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    left, unreachable = map(int, result.stdout.split())
    assert left == 0, f"{left} objects more after 100 imports"
    assert unreachable == 0, f"{unreachable} objects of dropped models were only freed by the collector"


def test_values_and_nodes_refuse_to_reach_a_freed_graph(tmp_path: Path) -> None:
    with load_model(_model(tmp_path / "chain.onnx")) as model:
        value = model.graph.values["v1"]
        node = model.graph.nodes[0]
        assert value.graph is model.graph and node.graph is model.graph and value.producer is node
    del model
    try:
        value.graph  # noqa: B018 (the access is the test)
    except ReferenceError as error:
        assert "keep the model" in str(error)
    else:
        raise AssertionError("a value reached the graph of a model that was dropped")


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


def test_a_host_that_froze_objects_keeps_them_frozen_and_is_not_walked_per_import(tmp_path: Path) -> None:
    path = _model(tmp_path / "chain.onnx")
    script = textwrap.dedent(f"""
        import gc
        from importer import load_model

        load_model({str(path)!r}).close()
        host_objects = [[number] for number in range(100_000)]
        gc.freeze()
        frozen = gc.get_freeze_count()
        walks = []
        count_frozen = gc.get_freeze_count
        gc.get_freeze_count = lambda: walks.append(1) or count_frozen()
        for _ in range(50):
            load_model({str(path)!r}).close()
        print(count_frozen() - frozen, len(walks), gc.isenabled())
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    newly_frozen, walks, collecting = result.stdout.split()
    # Nothing the imports made was frozen with the host's objects (nor any of
    # those unfrozen); the frozen generation was counted once, not per import.
    assert (int(newly_frozen), int(walks), collecting) == (0, 1, "True")
