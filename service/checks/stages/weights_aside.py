"""The model's bytes for onnxruntime with its large inline weights set aside (run in the check worker).

Owns `weights_set_aside(model, takes)`: a copy of the model's bytes in which
each initializer of the main graph holding at least ASIDE_BYTES of raw data
(that `takes(tensor)` says onnxruntime can take as they lie) keeps only its
name, element type and dims and is marked as external data (`SET_ASIDE`),
and those tensors: the `runtime` stage hands them to onnxruntime as
`OrtValue`s over the importer's mapped bytes
(`SessionOptions.add_external_initializers`), as it does a model's external
data. So a model of 400 MiB of inline weights is neither copied into the
bytes onnxruntime is given (which it copies again, as a string, before it
parses them) nor parsed out of them: what is copied is the rest, nodes and
small tensors, byte for byte. None when there is nothing to set aside, or
when the model's bytes hold more than one graph field (protobuf merges
those: the copy is then not made, and the bytes are given whole).

With `in_file` (the model file's name, where the check worker has bound it
for onnxruntime: `service.sandbox.worker.bound_files`) each tensor set aside
is marked instead as external data in the model file itself, at the offset
and length of its raw data there: onnxruntime maps those bytes of the file,
as it maps a model's external data files, and uses them in place. The bytes
are those of the file from its start (`parse_buffer` of a model read from a
path), so an offset in them is an offset in the file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from importer.graph import OnnxModel
from importer.tensor import FROM_RAW_DATA, Tensor
from importer.wire import Buffer, FieldCursor
from service.checks.stages.protobuf_writing import SET_ASIDE, field, varint

ASIDE_BYTES: Final = 1 << 16  # initializers this large are set aside
_MODEL_GRAPH: Final = 7 << 3 | 2
_GRAPH_INITIALIZER: Final = 5 << 3 | 2
_TENSOR_KEPT_FIELDS: Final = frozenset({1, 2, 8})  # dims, data_type, name
_TENSOR_RAW_DATA: Final = 9
_EXTERNAL: Final = bytes([14 << 3, 1])  # data_location = EXTERNAL
_EXTERNAL_DATA: Final = 13 << 3 | 2


def weights_set_aside(model: OnnxModel, takes: Callable[[Tensor], bool], in_file: str | None = None) -> tuple[bytes, list[Tensor]] | None:
    """The model's bytes with its large inline initializers set aside (marked
    SET_ASIDE, or as external data at their place in `in_file`), and those
    initializers; None if none is."""
    graph = model.proto.graph
    if graph is None:
        return None
    initializers: list[Tensor] = list(graph.initializer)
    chosen = {
        index
        for index, tensor in enumerate(initializers)
        if tensor.source == FROM_RAW_DATA and tensor.byte_length >= ASIDE_BYTES and tensor.is_bound and takes(tensor)
    }
    if not chosen:
        return None
    buf = model.owners[0].parse_buffer()
    view = memoryview(buf)
    graphs = 0
    parts: list[bytes | memoryview] = []
    cursor = FieldCursor(buf, 0, len(buf))
    while cursor.next():
        if cursor.key != _MODEL_GRAPH:
            parts.append(view[cursor.at : cursor.stop])
            continue
        graphs += 1
        graph_parts = _graph_parts(buf, view, cursor.start, cursor.stop, chosen, in_file)
        length = sum(len(part) for part in graph_parts)
        parts += [varint(_MODEL_GRAPH), varint(length), *graph_parts]
    if graphs != 1:
        return None
    return b"".join(parts), [initializers[index] for index in sorted(chosen)]


def _graph_parts(buf: Buffer, view: memoryview, start: int, stop: int, chosen: set[int], in_file: str | None) -> list[bytes | memoryview]:
    """The graph's fields, each chosen initializer (by its position among them) without its values."""
    parts: list[bytes | memoryview] = []
    index = 0
    cursor = FieldCursor(buf, start, stop)
    while cursor.next():
        if cursor.key == _GRAPH_INITIALIZER:
            index += 1
            if index - 1 in chosen:
                kept, raw = _kept_fields(buf, view, cursor.start, cursor.stop)
                marker = SET_ASIDE if in_file is None else _in_file_at(in_file, *raw)
                parts += [varint(_GRAPH_INITIALIZER), varint(len(kept) + len(marker)), kept, marker]
                continue
        parts.append(view[cursor.at : cursor.stop])
    return parts


def _kept_fields(buf: Buffer, view: memoryview, start: int, stop: int) -> tuple[bytes, tuple[int, int]]:
    """A tensor's name, element type and dims, and nothing else; and where its
    raw data lies in `buf` (offset, length: the last raw_data field, the one
    protobuf keeps)."""
    kept: list[memoryview] = []
    raw = (0, 0)
    cursor = FieldCursor(buf, start, stop)
    while cursor.next():
        if cursor.key >> 3 in _TENSOR_KEPT_FIELDS:
            kept.append(view[cursor.at : cursor.stop])
        elif cursor.key >> 3 == _TENSOR_RAW_DATA:
            raw = (cursor.start, cursor.stop - cursor.start)
    return b"".join(kept), raw


def _in_file_at(name: str, offset: int, length: int) -> bytes:
    """data_location = EXTERNAL, and external_data: location `name`, `offset`, `length`."""
    entries = (("location", name), ("offset", str(offset)), ("length", str(length)))
    return _EXTERNAL + b"".join(
        field(_EXTERNAL_DATA, field(1 << 3 | 2, key.encode()) + field(2 << 3 | 2, value.encode())) for key, value in entries
    )
