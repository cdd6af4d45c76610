"""A model whose one tensor is past 2 GiB, in a sparse external file.

`past_2gib_model(folder)` writes folder/model.onnx, y = Identity(Big), Big a
float32 tensor of 2^31 + 4 bytes (`BIG_BYTES`) in folder/big.bin: a file made
with `os.truncate`, so a hole on no disk, holding `MARKS` (known bytes near
the start and on both sides of 2^31, the last 4 bytes of the file) and zeros
elsewhere; `expected_bytes(first, last)` are its bytes there, and
`expected_sha256()` the whole tensor's digest, computed without reading the
file. `inline=True` writes Big's header into the model file instead, with no
values (refused from its dims before they are looked for). Used by the
importer's tests, the `onnx-import` command's and the service's.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from onnx import TensorProto, helper

ELEMENTS = 2**29 + 1  # float32: 2^31 + 4 bytes, one dimension well within int32
BIG_BYTES = 4 * ELEMENTS
MARKS = {16: b"start!", 2**31 - 4: b"2GiB", BIG_BYTES - 4: b"end!"}
ZEROS = bytes(1 << 20)


def past_2gib_model(folder: Path, inline: bool = False) -> Path:
    big = TensorProto(name="Big", data_type=TensorProto.FLOAT, dims=[ELEMENTS])
    folder.mkdir(parents=True, exist_ok=True)
    if not inline:
        big.data_location = TensorProto.EXTERNAL
        for key, value in (("location", "big.bin"), ("length", str(BIG_BYTES))):
            entry = big.external_data.add()
            entry.key, entry.value = key, value
        with (folder / "big.bin").open("wb") as file:
            os.truncate(file.fileno(), BIG_BYTES)
            for offset, mark in MARKS.items():
                file.seek(offset)
                file.write(mark)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["Big"], ["y"])],
        "big",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [ELEMENTS])],
        [big],
    )
    path = folder / "model.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString())
    return path


def expected_bytes(first: int, last: int) -> bytes:
    """Bytes [first, last] of Big (of big.bin)."""
    found = bytearray(last + 1 - first)
    for offset, mark in MARKS.items():
        for index, byte in enumerate(mark, offset):
            if first <= index <= last:
                found[index - first] = byte
    return bytes(found)


def expected_sha256() -> str:
    """The SHA-256 of Big's 2^31 + 4 bytes, made from MARKS and zeros."""
    digest = hashlib.sha256()
    position = 0
    for offset, mark in sorted(MARKS.items()):
        while position < offset:
            step = min(len(ZEROS), offset - position)
            digest.update(ZEROS[:step])
            position += step
        digest.update(mark)
        position += len(mark)
    assert position == BIG_BYTES
    return digest.hexdigest()
