"""Large models for the memory-sizing bench, written byte by byte (never held whole in memory; never committed).

- `write_external_model(folder)`: 3 GiB of weights in external data, the
  issue 57 model: a chain of 12 MatMul nodes, `x` [batch, 8192] float times
  12 weights of [8192, 8192] float (256 MiB each), the first six in
  `weights_a.bin`, the others in `weights_b.bin`, beside `model.onnx`
  (a few KB);
- `write_inline_model(folder)`: the same chain of 7 weights inline, one
  `model.onnx` of 1.88 GB (1.75 GiB), below the 2 GiB protobuf limit.

Each weight is one MiB of small random floats (uniform in ±0.01, seeded
by the weight's index) repeated: every page is written (no sparse file), the
run's values stay finite, and no two weights are alike (onnxruntime keeps
one pre-packed copy of identical weights: with one pattern for all, its
session held 0.3 GiB for the 3 GiB model instead of the model's size). The protobuf is written field by field (`ModelProto` 7 graph, 8
opset; `GraphProto` 1 node, 2 name, 5 initializer, 11 input, 12 output;
`TensorProto` 1 dims, 2 data_type, 8 name, 9 raw_data, 13 external_data,
14 data_location), the lengths computed before the payloads are streamed.

Usage: python bench/large_models.py FOLDER   (writes FOLDER/external/ and FOLDER/inline/)
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

WIDTH = 8192  # a weight is [WIDTH, WIDTH] float32: 256 MiB
WEIGHT_BYTES = WIDTH * WIDTH * 4
EXTERNAL_WEIGHTS = 12
INLINE_WEIGHTS = 7
EXTERNAL_FILES = ("weights_a.bin", "weights_b.bin")
PATTERN_BYTES = 1 << 20
FLOAT = 1  # TensorProto.FLOAT
OPSET = 17


def varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def field(number: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    return key(number, 2) + varint(len(payload)) + payload


def number(field_number: int, value: int) -> bytes:
    return key(field_number, 0) + varint(value)


def value_info(name: str) -> bytes:
    """`name`: float [batch, WIDTH]."""
    shape = field(1, field(2, b"batch")) + field(1, number(1, WIDTH))
    return field(1, name.encode()) + field(2, field(1, number(1, FLOAT) + field(2, shape)))


def matmul_chain(weights: int) -> bytes:
    nodes = b""
    for index in range(weights):
        source = "x" if index == 0 else f"h{index}"
        target = "y" if index == weights - 1 else f"h{index + 1}"
        nodes += field(1, field(1, source.encode()) + field(1, f"w{index}".encode()) + field(2, target.encode())
                       + field(3, f"matmul{index}".encode()) + field(4, b"MatMul"))  # fmt: skip
    return nodes


def tensor_head(index: int) -> bytes:
    return number(1, WIDTH) + number(1, WIDTH) + number(2, FLOAT) + field(8, f"w{index}".encode())


def pattern(index: int) -> bytes:
    return np.random.default_rng(index).uniform(-0.01, 0.01, PATTERN_BYTES // 4).astype("<f4").tobytes()


def weight_chunks(index: int) -> Iterator[bytes]:
    """Weight `index`'s bytes, a MiB at a time."""
    chunk = pattern(index)
    for _ in range(WEIGHT_BYTES // PATTERN_BYTES):
        yield chunk


def model_bytes(graph: bytes) -> bytes:
    return number(1, 8) + field(7, graph) + field(8, number(2, OPSET))  # ir_version 8, graph, opset_import { version }


def write_external_model(folder: Path) -> Path:
    """The 3 GiB external-data model (see the module comment); its model file."""
    folder.mkdir(parents=True, exist_ok=True)
    per_file = EXTERNAL_WEIGHTS // len(EXTERNAL_FILES)
    initializers = b""
    for index in range(EXTERNAL_WEIGHTS):
        location, offset = EXTERNAL_FILES[index // per_file], (index % per_file) * WEIGHT_BYTES
        entries = [("location", location), ("offset", str(offset)), ("length", str(WEIGHT_BYTES))]
        external = b"".join(field(13, field(1, name.encode()) + field(2, value.encode())) for name, value in entries)
        initializers += field(5, tensor_head(index) + external + number(14, 1))  # data_location EXTERNAL
    graph = matmul_chain(EXTERNAL_WEIGHTS) + field(2, b"external_3gib") + initializers
    graph += field(11, value_info("x")) + field(12, value_info("y"))
    for number_in_files, name in enumerate(EXTERNAL_FILES):
        with (folder / name).open("wb") as data:
            for index in range(number_in_files * per_file, (number_in_files + 1) * per_file):
                for chunk in weight_chunks(index):
                    data.write(chunk)
    model = folder / "model.onnx"
    model.write_bytes(model_bytes(graph))
    return model


def write_inline_model(folder: Path) -> Path:
    """The 1.88 GB inline model (see the module comment); its file."""
    folder.mkdir(parents=True, exist_ok=True)
    raw_head = key(9, 2) + varint(WEIGHT_BYTES)
    heads = [tensor_head(index) + raw_head for index in range(INLINE_WEIGHTS)]
    tensor_lengths = [len(head) + WEIGHT_BYTES for head in heads]
    graph_head = matmul_chain(INLINE_WEIGHTS) + field(2, b"inline_1_9gb")
    graph_tail = field(11, value_info("x")) + field(12, value_info("y"))
    graph_length = len(graph_head) + sum(len(key(5, 2) + varint(length)) + length for length in tensor_lengths) + len(graph_tail)
    model = folder / "model.onnx"
    with model.open("wb") as out:
        out.write(number(1, 8) + key(7, 2) + varint(graph_length) + graph_head)
        for index, (head, length) in enumerate(zip(heads, tensor_lengths, strict=True)):
            out.write(key(5, 2) + varint(length) + head)
            for chunk in weight_chunks(index):
                out.write(chunk)
        out.write(graph_tail + field(8, number(2, OPSET)))
    return model


if __name__ == "__main__":
    target = Path(sys.argv[1])
    print(write_external_model(target / "external"), write_inline_model(target / "inline"))
