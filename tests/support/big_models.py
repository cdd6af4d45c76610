"""A model too large to import within a small worker-memory limit, written
byte by byte (fast: no onnx objects for 400,000 nodes).

Used by the service's limit tests and the container tests: a valid chain of
Identity nodes, about 10 MB on disk and hundreds of MB of graph objects once
imported.
"""

from __future__ import annotations

from pathlib import Path

from support.hostile_cases import varint

BIG_NODES = 400_000


def length_delimited(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field: key, length, payload."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def write_big_graph_model(path: Path, nodes: int = BIG_NODES) -> None:
    field = length_delimited
    float_type = field(1, b"\x08\x01")  # TypeProto.tensor_type { elem_type: FLOAT }
    chain = b"".join(field(1, field(1, b"v%d" % i) + field(2, b"v%d" % (i + 1)) + field(4, b"Identity")) for i in range(nodes))
    graph = chain + field(2, b"big") + field(11, field(1, b"v0") + field(2, float_type))
    graph += field(12, field(1, b"v%d" % nodes) + field(2, float_type))
    opset = b"\x10\x15"  # OperatorSetIdProto { version: 21 }
    path.write_bytes(b"\x08\x0a" + field(7, graph) + field(8, opset))  # ir_version 10, graph, opset_import
