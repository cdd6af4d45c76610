"""The external data files a model names, found by a walk of its wire format alone.

Owns `scan_external_locations(buf, limits)`: every TensorProto the reader
(`importer.read_model`) reads, in file order, whose `data_location` is
EXTERNAL, gives its `location` entry, checked by the lexical rules
(`external_data.check_location`) and normalised, each file once, at most
`Limits.max_external_files`. The walk descends only into the fields that can
hold a tensor: the main graph, `training_info`'s graphs, function bodies and
their default attributes; in a graph its nodes, initializers and sparse
initializers; in a node its attributes; in an attribute its tensors, graphs
and sparse tensors (whatever its type says, as the reader does); in a
sparse tensor its values and indices. Every other field is stepped over
(each key and length still checked by `FieldCursor`), and no node, name or
shape is built: a model of 200,000 nodes is listed in a fraction of its
read (`importer.load.opened_external_locations` uses it). A refusal carries
the field path and byte offset the reader would give it.
"""

from __future__ import annotations

import posixpath
from typing import Final

from importer.errors import ErrorKind, ReadFailure, malformed, quote
from importer.external_data import location_refusal
from importer.limits import Limits
from importer.wire import Buffer, FieldCursor, read_string

_MODEL_GRAPH, _MODEL_TRAINING_INFO, _MODEL_FUNCTIONS = 0x3A, 0xA2, 0xCA
_TRAINING_GRAPHS: Final = {0x0A: "initialization", 0x12: "algorithm"}
_FUNCTION_NODE, _FUNCTION_ATTRIBUTE = 0x3A, 0x5A
_GRAPH_NODE, _GRAPH_INITIALIZER, _GRAPH_SPARSE_INITIALIZER = 0x0A, 0x2A, 0x7A
_NODE_ATTRIBUTE = 0x2A
_ATTRIBUTE_TENSORS: Final = {0x2A: "t", 0x52: "tensors"}
_ATTRIBUTE_GRAPHS: Final = {0x32: "g", 0x5A: "graphs"}
_ATTRIBUTE_SPARSE: Final = {0xB2: "sparse_tensor", 0xBA: "sparse_tensors"}
_PLURAL: Final = frozenset({"tensors", "graphs", "sparse_tensors"})
_SPARSE_PARTS: Final = {0x0A: "values", 0x12: "indices"}
_TENSOR_EXTERNAL_DATA, _TENSOR_DATA_LOCATION = 0x6A, 0x70
_ENTRY_KEY, _ENTRY_VALUE = 0x0A, 0x12
_EXTERNAL: Final = 1


class _Scan:
    __slots__ = ("buf", "limits", "found")

    def __init__(self, buf: Buffer, limits: Limits) -> None:
        self.buf = buf
        self.limits = limits
        self.found: dict[str, None] = {}

    def model(self, start: int, stop: int) -> None:
        counts = {_MODEL_TRAINING_INFO: 0, _MODEL_FUNCTIONS: 0}
        fields = FieldCursor(self.buf, start, stop)
        while fields.next():
            key, at = fields.key, fields.at
            if key == _MODEL_GRAPH:
                try:
                    self.graph(fields.start, fields.stop, 1)
                except ReadFailure as failure:
                    raise failure.within("graph", at) from None
            elif key == _MODEL_TRAINING_INFO:
                index = counts[key]
                counts[key] += 1
                try:
                    self.training_info(fields.start, fields.stop)
                except ReadFailure as failure:
                    raise failure.within(f"training_info[{index}]", at) from None
            elif key == _MODEL_FUNCTIONS:
                index = counts[key]
                counts[key] += 1
                try:
                    self.function(fields.start, fields.stop)
                except ReadFailure as failure:
                    raise failure.within(f"functions[{index}]", at) from None

    def training_info(self, start: int, stop: int) -> None:
        self._depth(1)
        fields = FieldCursor(self.buf, start, stop)
        while fields.next():
            label = _TRAINING_GRAPHS.get(fields.key)
            if label is not None:
                try:
                    self.graph(fields.start, fields.stop, 2)
                except ReadFailure as failure:
                    raise failure.within(label, fields.at) from None

    def function(self, start: int, stop: int) -> None:
        self._depth(1)
        nodes = attributes = 0
        fields = FieldCursor(self.buf, start, stop)
        while fields.next():
            if fields.key == _FUNCTION_NODE:
                try:
                    self.node(fields.start, fields.stop, 2)
                except ReadFailure as failure:
                    raise failure.within(f"node[{nodes}]", fields.at) from None
                nodes += 1
            elif fields.key == _FUNCTION_ATTRIBUTE:
                try:
                    self.attribute(fields.start, fields.stop, 2)
                except ReadFailure as failure:
                    raise failure.within(f"attribute_proto[{attributes}]", fields.at) from None
                attributes += 1

    def graph(self, start: int, stop: int, depth: int) -> None:
        self._depth(depth)
        nodes = initializers = sparse = 0
        fields = FieldCursor(self.buf, start, stop)
        while fields.next():
            key = fields.key
            if key == _GRAPH_NODE:
                try:
                    self.node(fields.start, fields.stop, depth + 1)
                except ReadFailure as failure:
                    raise failure.within(f"node[{nodes}]", fields.at) from None
                nodes += 1
            elif key == _GRAPH_INITIALIZER:
                try:
                    self.tensor(fields.start, fields.stop, depth + 1, fields.at)
                except ReadFailure as failure:
                    raise failure.within(f"initializer[{initializers}]", None) from None
                initializers += 1
            elif key == _GRAPH_SPARSE_INITIALIZER:
                try:
                    self.sparse(fields.start, fields.stop, depth + 1)
                except ReadFailure as failure:
                    raise failure.within(f"sparse_initializer[{sparse}]", fields.at) from None
                sparse += 1

    def node(self, start: int, stop: int, depth: int) -> None:
        self._depth(depth)
        attributes = 0
        fields = FieldCursor(self.buf, start, stop)
        while fields.next():
            if fields.key == _NODE_ATTRIBUTE:
                try:
                    self.attribute(fields.start, fields.stop, depth + 1)
                except ReadFailure as failure:
                    raise failure.within(f"attribute[{attributes}]", fields.at) from None
                attributes += 1

    def attribute(self, start: int, stop: int, depth: int) -> None:
        self._depth(depth)
        counts: dict[str, int] = {}
        fields = FieldCursor(self.buf, start, stop)
        while fields.next():
            key, a, b, at = fields.key, fields.start, fields.stop, fields.at
            label = _ATTRIBUTE_TENSORS.get(key) or _ATTRIBUTE_GRAPHS.get(key) or _ATTRIBUTE_SPARSE.get(key)
            if label is None:
                continue
            segment = label
            if label in _PLURAL:
                segment = f"{label}[{counts.get(label, 0)}]"
                counts[label] = counts.get(label, 0) + 1
            if key in _ATTRIBUTE_TENSORS:
                try:
                    self.tensor(a, b, depth + 1, at)
                except ReadFailure as failure:
                    raise failure.within(segment, None) from None
            elif key in _ATTRIBUTE_GRAPHS:
                try:
                    self.graph(a, b, depth + 1)
                except ReadFailure as failure:
                    raise failure.within(segment, at) from None
            else:
                try:
                    self.sparse(a, b, depth + 1)
                except ReadFailure as failure:
                    raise failure.within(segment, at) from None

    def sparse(self, start: int, stop: int, depth: int) -> None:
        self._depth(depth)
        fields = FieldCursor(self.buf, start, stop)
        while fields.next():
            label = _SPARSE_PARTS.get(fields.key)
            if label is not None:
                try:
                    self.tensor(fields.start, fields.stop, depth + 1, fields.at)
                except ReadFailure as failure:
                    raise failure.within(label, None) from None

    def tensor(self, start: int, stop: int, depth: int, offset: int) -> None:
        """A TensorProto whose key is at `offset`: its location, if its data is external."""
        self._depth(depth)
        buf = self.buf
        data_location = 0
        location: str | None = None
        fields = FieldCursor(buf, start, stop)
        while fields.next():
            if fields.key == _TENSOR_DATA_LOCATION:
                data_location = fields.value
            elif fields.key == _TENSOR_EXTERNAL_DATA:
                entry = FieldCursor(buf, fields.start, fields.stop)
                name = value = ""
                while entry.next():
                    if entry.key == _ENTRY_KEY:
                        name = read_string(buf, entry.start, entry.stop, entry.at, "key")
                    elif entry.key == _ENTRY_VALUE:
                        value = read_string(buf, entry.start, entry.stop, entry.at, "value")
                if name == "location":
                    location = value
        if data_location != _EXTERNAL:
            return
        location = location or ""
        reason = location_refusal(location)
        if reason is not None:
            raise ReadFailure(ErrorKind.EXTERNAL_DATA, f"external data location {quote(location)} {reason}", offset)
        self.found.setdefault(posixpath.normpath(location))
        if len(self.found) > self.limits.max_external_files:
            message = f"more than max_external_files={self.limits.max_external_files} external files"
            raise ReadFailure(ErrorKind.EXTERNAL_DATA, message, offset)

    def _depth(self, depth: int) -> None:
        if depth > self.limits.max_nesting:
            raise malformed(f"messages nested deeper than max_nesting={self.limits.max_nesting} levels", None)


def scan_external_locations(buf: Buffer, limits: Limits) -> list[str]:
    """The external data files the ModelProto in `buf` names (see the module comment); raises ReadFailure."""
    scan = _Scan(buf, limits)
    scan.model(0, len(buf))
    return list(scan.found)
