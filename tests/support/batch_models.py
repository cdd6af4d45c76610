"""Small models with a free batch dimension, for the smoke run's bindings.

`baked_batch(batch)`: input x [batch, 4] (`batch` a dim_param, or None for a
dimension without a name), Relu, then a Reshape named `Reshape_3` whose
target is the constant [1, 4]: the batch the exporter traced, baked into the
graph. It runs at batch 1 and fails at any other. `any_batch(batch)`: the
same with Identity in place of the Reshape, fine at every batch. Both take
`metadata` (the model's metadata_props) and give the file's bytes.
`rotary_cache_of_batch_1()`: what a Llama-shaped export at opset 23 holds, an
ONNX RotaryEmbedding (node `RotaryEmbedding_7`) whose cos and sin caches
were traced at batch 1: onnxruntime runs it at batch 1 and refuses any other.
"""

from __future__ import annotations

import numpy as np
from onnx import NodeProto, TensorProto, helper, numpy_helper


def _model(nodes: list[NodeProto], batch: str | None, metadata: dict[str, str] | None, initializers: list[TensorProto]) -> bytes:
    graph = helper.make_graph(
        nodes,
        "batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, metadata or {})
    data: bytes = model.SerializeToString()
    return data


def baked_batch(batch: str | None = "batch", metadata: dict[str, str] | None = None) -> bytes:
    """x [batch, 4] -> Relu -> Reshape_3 to the constant [1, 4]: runs at batch 1 only."""
    target = numpy_helper.from_array(np.array([1, 4], np.int64), "traced_shape")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="Relu_1"),
        helper.make_node("Reshape", ["r", "traced_shape"], ["y"], name="Reshape_3"),
    ]
    return _model(nodes, batch, metadata, [target])


def any_batch(batch: str | None = "batch", metadata: dict[str, str] | None = None) -> bytes:
    """x [batch, 4] -> Relu -> Identity: runs at every batch."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="Relu_1"), helper.make_node("Identity", ["r"], ["y"], name="Identity_2")]
    return _model(nodes, batch, metadata, [])


def rotary_cache_of_batch_1(sequence: int = 4, heads: int = 2, head_size: int = 8) -> bytes:
    """x [batch, sequence, heads * head_size] -> RotaryEmbedding_7 with cos and sin caches of shape [1, sequence, head_size / 2]."""
    caches = [
        numpy_helper.from_array(np.ones((1, sequence, head_size // 2), np.float32), "cos_cache"),
        numpy_helper.from_array(np.zeros((1, sequence, head_size // 2), np.float32), "sin_cache"),
    ]
    node = helper.make_node("RotaryEmbedding", ["x", "cos_cache", "sin_cache"], ["y"], name="RotaryEmbedding_7", num_heads=heads)
    shape: list[str | int] = ["batch", sequence, heads * head_size]
    graph = helper.make_graph(
        [node],
        "rotary",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        caches,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    model.ir_version = 11
    data: bytes = model.SerializeToString()
    return data
