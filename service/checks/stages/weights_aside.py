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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from importer.graph import OnnxModel
from importer.tensor import FROM_RAW_DATA, Tensor
from importer.wire import Buffer, FieldCursor
from service.checks.stages.protobuf_writing import SET_ASIDE, varint

ASIDE_BYTES: Final = 1 << 16  # initializers this large are set aside
_MODEL_GRAPH: Final = 7 << 3 | 2
_GRAPH_INITIALIZER: Final = 5 << 3 | 2
_TENSOR_KEPT_FIELDS: Final = frozenset({1, 2, 8})  # dims, data_type, name


def weights_set_aside(model: OnnxModel, takes: Callable[[Tensor], bool]) -> tuple[bytes, list[Tensor]] | None:
    """The model's bytes with its large inline initializers set aside, and those initializers; None if none is."""
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
        graph_parts = _graph_parts(buf, view, cursor.start, cursor.stop, chosen)
        length = sum(len(part) for part in graph_parts)
        parts += [varint(_MODEL_GRAPH), varint(length), *graph_parts]
    if graphs != 1:
        return None
    return b"".join(parts), [initializers[index] for index in sorted(chosen)]


def _graph_parts(buf: Buffer, view: memoryview, start: int, stop: int, chosen: set[int]) -> list[bytes | memoryview]:
    """The graph's fields, each chosen initializer (by its position among them) without its values."""
    parts: list[bytes | memoryview] = []
    index = 0
    cursor = FieldCursor(buf, start, stop)
    while cursor.next():
        if cursor.key == _GRAPH_INITIALIZER:
            index += 1
            if index - 1 in chosen:
                kept = _kept_fields(buf, view, cursor.start, cursor.stop)
                parts += [varint(_GRAPH_INITIALIZER), varint(len(kept) + len(SET_ASIDE)), kept, SET_ASIDE]
                continue
        parts.append(view[cursor.at : cursor.stop])
    return parts


def _kept_fields(buf: Buffer, view: memoryview, start: int, stop: int) -> bytes:
    """A tensor's name, element type and dims, and nothing else."""
    kept: list[memoryview] = []
    cursor = FieldCursor(buf, start, stop)
    while cursor.next():
        if cursor.key >> 3 in _TENSOR_KEPT_FIELDS:
            kept.append(view[cursor.at : cursor.stop])
    return b"".join(kept)
