"""The five held-in models the explorer's layout is measured on, by the
browser tests (tests/e2e/test_explorer_layout.py) and bench/explorer_bench.py
alike: three real PaddleOCR models from the `rapidocr-onnxruntime` wheel
(the direction classifier, 566 nodes; the text detector, 672; the
recogniser, 860) and two generated graphs of 5,000 and 50,000 nodes.

The wheel is fetched once per machine with pip (from the registry pip is
configured with), its SHA-256 checked against the pin, and the three models
extracted into the ignored cache .cache/held-in/; the generated graphs are
written beside them. Nothing here is committed data.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx
from cache_lock import cache_lock
from onnx import TensorProto, helper

from support.paths import CACHE

HELD_IN = CACHE / "held-in"
RAPIDOCR = "rapidocr-onnxruntime==1.4.4"
RAPIDOCR_WHEEL = "rapidocr_onnxruntime-1.4.4-py3-none-any.whl"
RAPIDOCR_SHA256 = "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"
REAL = {  # file name here -> member of the wheel
    "paddleocr_cls.onnx": "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    "paddleocr_det.onnx": "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
    "paddleocr_rec.onnx": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
}
GENERATED = {"blocks_5000.onnx": 5000, "blocks_50000.onnx": 50_000}
NODES = {"paddleocr_cls.onnx": 566, "paddleocr_det.onnx": 672, "paddleocr_rec.onnx": 860, **GENERATED}


GENERATOR = "2"  # written beside the generated graphs: one written by another version of block_model is written again


def block_model(count: int) -> bytes:
    """`count` nodes in blocks of six (a fan-out, a join and a residual Add)
    of three op families (activation, arithmetic, shape), the skeleton of a
    deep network. Only its input and output are declared: the types between
    are the shape stage's to infer."""
    nodes: list[onnx.NodeProto] = []
    last = "X"
    pattern = [
        ("Relu", ["{x}"]),
        ("Sigmoid", ["{x}"]),
        ("Tanh", ["{0}"]),
        ("Mul", ["{2}", "{1}"]),
        ("Flatten", ["{3}"]),
        ("Add", ["{x}", "{4}"]),
    ]
    block = 0
    while len(nodes) < count:
        outputs: list[str] = []
        for step, (op, inputs) in enumerate(pattern):
            if len(nodes) == count:
                break
            names = [i.format(*outputs, x=last) for i in inputs]
            out = f"b{block}_{op.lower()}"
            nodes.append(helper.make_node(op, names, [out], name=f"block{block}/{op.lower()}_{step}"))
            outputs.append(out)
        last = outputs[-1]
        block += 1
    graph = helper.make_graph(
        nodes,
        f"blocks_{count}",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [1, 16])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="held_in_models", producer_version="1")
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    return data


def _rapidocr_wheel() -> Path:
    wheel = HELD_IN / RAPIDOCR_WHEEL
    if not wheel.exists():
        HELD_IN.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", RAPIDOCR, "-d", str(HELD_IN)]
        ran = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if ran.returncode != 0 or not wheel.exists():
            raise RuntimeError(f"pip could not fetch {RAPIDOCR}: {ran.stderr.strip()[-600:]}")
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != RAPIDOCR_SHA256:
        wheel.unlink()
        raise RuntimeError(f"{RAPIDOCR_WHEEL}: sha256 {digest}, expected {RAPIDOCR_SHA256}")
    return wheel


def held_in_models() -> dict[str, Path]:
    """The five models' paths (fetched or written on first use, one process at a time), smallest first."""
    with cache_lock(HELD_IN):
        missing = [name for name in REAL if not (HELD_IN / name).exists()]
        if missing:
            with zipfile.ZipFile(_rapidocr_wheel()) as wheel:
                for name in missing:
                    (HELD_IN / (name + ".part")).write_bytes(wheel.read(REAL[name]))
                    (HELD_IN / (name + ".part")).rename(HELD_IN / name)
        marker = HELD_IN / "generator"
        current = marker.exists() and marker.read_text() == GENERATOR
        for name, count in GENERATED.items():
            if not current or not (HELD_IN / name).exists():
                HELD_IN.mkdir(parents=True, exist_ok=True)
                (HELD_IN / (name + ".part")).write_bytes(block_model(count))
                (HELD_IN / (name + ".part")).rename(HELD_IN / name)
        marker.write_text(GENERATOR)
    return {name: HELD_IN / name for name in NODES}
