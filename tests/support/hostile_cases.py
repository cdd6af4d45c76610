"""Hostile ONNX model files, built byte by byte, and the refusal each must get.

A hand-rolled protobuf writer (`Msg`, `fld`, `rep`, `Raw`) whose `encode()`
returns the bytes together with the absolute offset of every field, keyed by
the field path the importer reports (`graph.node[0].input[1]`; a repeated
field's bare name, `dims`, is its first occurrence). Each case takes its
expected offset and field path from the same builder that wrote its bytes.

`CASES` is the table (named `<kind>-<case>`, kind spelled as `ErrorKind`'s
values) and `write_cases(root)` writes it to disk; `case_path` gives the
layout: `<root>/<name>.onnx` for a self-contained model; `<root>/<name>/<model
file>` with its external data files beside it for cases that need side files;
and special files (a directory, a FIFO, a dangling link) named `<name>.onnx`
for the Io cases. `CONTROLS` are valid models the cases are mutations of.
Run as a script to regenerate testdata/onnx/hostile without pytest.
"""

from __future__ import annotations

import math
import os
import shutil
import struct
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeAlias

from importer import ErrorKind, Limits
from support.paths import REPO

HOSTILE_DIR = REPO / "testdata" / "onnx" / "hostile"

VARINT, FIXED64, LEN, FIXED32 = 0, 1, 2, 5
MIB = 1 << 20
BIG_NAME = "n" * MIB  # a 1 MiB name: messages must stay bounded

# TensorProto.DataType codes used here.
FLOAT, UINT8, INT32, INT64, STRING, BOOL, COMPLEX128, UINT2 = 1, 2, 6, 7, 8, 9, 15, 25
# AttributeProto.AttributeType codes used here.
A_FLOAT, A_TENSOR, A_GRAPH, A_FLOATS, A_SPARSE_TENSOR, A_TYPE_PROTO = 1, 4, 5, 6, 11, 13


# --------------------------------------------------------------------------- the writer


def varint(value: int) -> bytes:
    """Shortest varint of a 64-bit value (a negative value as two's complement)."""
    if value < 0:
        value += 1 << 64
    if not 0 <= value < 1 << 64:
        raise ValueError(f"{value} does not fit in 64 bits")
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


@dataclass(frozen=True)
class Raw:
    """Bytes written as they are; `mark` (starting with '#') records where."""

    data: bytes
    mark: str | None = None


@dataclass(frozen=True)
class Field:
    """One field. `value`: an int for a varint (bytes: the varint as written);
    int, float or bytes for fixed32/fixed64; bytes or a `Msg` for LEN."""

    name: str | None
    number: int
    wire: int
    value: int | float | bytes | Msg
    repeated: bool = False
    length: int | bytes | None = None  # LEN: written instead of the true length (bytes: the varint as written)
    grow: int = 0  # LEN: added to the length written


Item: TypeAlias = "Field | Raw"
Value: TypeAlias = "int | float | str | bytes | Msg"


def fld(
    name: str | None,
    number: int,
    value: Value,
    *,
    wire: int | None = None,
    repeated: bool = False,
    length: int | bytes | None = None,
    grow: int = 0,
) -> Field:
    """A field; without `wire`, an int is a varint and str, bytes or Msg are LEN."""
    if isinstance(value, str):
        value = value.encode("utf-8")
    if wire is None:
        if isinstance(value, float):
            raise TypeError("a float needs an explicit wire type")
        wire = VARINT if isinstance(value, int) else LEN
    return Field(name, number, wire, value, repeated, length, grow)


def rep(name: str, number: int, value: Value, *, wire: int | None = None, grow: int = 0, length: int | bytes | None = None) -> Field:
    """One occurrence of a repeated field (labelled `name[i]`)."""
    return fld(name, number, value, wire=wire, repeated=True, grow=grow, length=length)


@dataclass
class Encoded:
    """A message's bytes and where its fields are (absolute offsets).

    keys: field path -> its key; values: -> just after its key (where its
    varint or length starts); payloads: LEN field path -> its payload;
    marks: `Raw` mark -> its first byte.
    """

    data: bytes
    keys: dict[str, int] = field(default_factory=dict)
    values: dict[str, int] = field(default_factory=dict)
    payloads: dict[str, int] = field(default_factory=dict)
    marks: dict[str, int] = field(default_factory=dict)

    def locate(self, label: str) -> int:
        """`#mark`, `path` (its key), `path@value`, `path@payload`, each optionally `+N`."""
        label, plus, extra = label.partition("+")
        delta = int(extra) if plus else 0
        if label.startswith("#"):
            return self.marks[label] + delta
        path, _, part = label.partition("@")
        table = {"": self.keys, "value": self.values, "payload": self.payloads}[part]
        return table[path] + delta


def _scalar(wire: int, value: int | float | bytes | Msg) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, Msg):
        raise TypeError("a message needs wire type LEN")
    if wire == VARINT and isinstance(value, int):
        return varint(value)
    if wire == FIXED32:
        return struct.pack("<f", value) if isinstance(value, float) else struct.pack("<I", value)
    if wire == FIXED64:
        return struct.pack("<d", value) if isinstance(value, float) else struct.pack("<Q", value)
    raise TypeError(f"cannot write {value!r} with wire type {wire}")


class Msg:
    """A message: fields and raw bytes, written in the order given."""

    def __init__(self, *items: Item) -> None:
        self.items = tuple(items)

    def plus(self, *items: Item) -> Msg:
        return Msg(*self.items, *items)

    def encode(self) -> Encoded:
        out = bytearray()
        enc = Encoded(b"")
        counts: dict[str, int] = {}
        for item in self.items:
            start = len(out)
            if isinstance(item, Raw):
                out += item.data
                if item.mark is not None:
                    _put_mark(enc.marks, item.mark, start)
                continue
            label = item.name
            if item.name is not None and item.repeated:
                index = counts.get(item.name, 0)
                counts[item.name] = index + 1
                label = f"{item.name}[{index}]"
                enc.keys.setdefault(item.name, start)
            out += key(item.number, item.wire)
            value_start = len(out)
            inner: Encoded | None = None
            if item.wire == LEN:
                if isinstance(item.value, Msg):
                    inner = item.value.encode()
                    payload = inner.data
                elif isinstance(item.value, bytes):
                    payload = item.value
                else:
                    raise TypeError("a LEN field needs bytes or a message")
                if isinstance(item.length, bytes):
                    out += item.length
                else:
                    out += varint((len(payload) if item.length is None else item.length) + item.grow)
                payload_start = len(out)
                out += payload
                if label is not None:
                    enc.payloads[label] = payload_start
            else:
                out += _scalar(item.wire, item.value)
            if label is not None:
                enc.keys[label] = start  # a singular field given twice: the last one
                enc.values[label] = value_start
            if inner is not None:
                for mark, at in inner.marks.items():
                    _put_mark(enc.marks, mark, payload_start + at)
                if label is not None:
                    for own, theirs in ((enc.keys, inner.keys), (enc.values, inner.values), (enc.payloads, inner.payloads)):
                        for path, at in theirs.items():
                            own[f"{label}.{path}"] = payload_start + at
        enc.data = bytes(out)
        return enc


def _put_mark(marks: dict[str, int], mark: str, at: int) -> None:
    if mark in marks:
        raise ValueError(f"mark {mark} used twice")
    marks[mark] = at


# --------------------------------------------------------------------------- ONNX messages

Dims: TypeAlias = Sequence[int | str | Msg]


def dim(value: int | str) -> Msg:
    return Msg(fld("dim_value", 1, value)) if isinstance(value, int) else Msg(fld("dim_param", 2, value))


def shape(dims: Dims) -> Msg:
    return Msg(*(rep("dim", 1, d if isinstance(d, Msg) else dim(d)) for d in dims))


def tensor_type(elem: int = FLOAT, dims: Dims | Msg | None = (2, 3), *items: Item) -> Msg:
    """A TypeProto holding a tensor_type; no shape field when `dims` is None."""
    inner: list[Item] = [fld("elem_type", 1, elem)]
    if dims is not None:
        inner.append(fld("shape", 2, dims if isinstance(dims, Msg) else shape(dims)))
    return Msg(fld("tensor_type", 1, Msg(*inner, *items)))


def sequence_type(elem: Msg) -> Msg:
    return Msg(fld("sequence_type", 4, Msg(fld("elem_type", 1, elem))))


def value_info(name: str | bytes, type_proto: Msg | None = None, *items: Item) -> Msg:
    fields: list[Item] = [fld("name", 1, name)] if name else []
    if type_proto is not None:
        fields.append(fld("type", 2, type_proto))
    return Msg(*fields, *items)


def float_info(name: str | bytes, dims: Dims | None = (2, 3)) -> Msg:
    return value_info(name, tensor_type(FLOAT, dims))


def tensor(name: str | bytes, data_type: int, dims: Sequence[int], *items: Item) -> Msg:
    """A TensorProto: one dims field per dimension, data_type, name, then `items`."""
    head: list[Item] = [rep("dims", 1, d) for d in dims]
    head.append(fld("data_type", 2, data_type))
    if name:
        head.append(fld("name", 8, name))
    return Msg(*head, *items)


def raw_data(data: bytes, *, length: int | bytes | None = None, grow: int = 0) -> Field:
    return fld("raw_data", 9, data, length=length, grow=grow)


def packed(name: str, number: int, values: Sequence[int]) -> Field:
    return rep(name, number, b"".join(varint(v) for v in values))


def float_weights(name: str | bytes = "W", dims: Sequence[int] = (2, 3), *items: Item) -> Msg:
    return tensor(name, FLOAT, dims, raw_data(bytes(4 * math.prod(dims))), *items)


def entry(entry_key: str | bytes, entry_value: str | bytes) -> Msg:
    return Msg(fld("key", 1, entry_key), fld("value", 2, entry_value))


def external_tensor(
    name: str, entries: Sequence[tuple[str | bytes, str | bytes]], data_type: int = FLOAT, dims: Sequence[int] = (2, 3), *items: Item
) -> Msg:
    data: list[Item] = [rep("external_data", 13, entry(k, v)) for k, v in entries]
    return tensor(name, data_type, dims, *data, fld("data_location", 14, 1), *items)


def sparse_tensor(values: Msg | None, indices: Msg | None, dims: Sequence[int]) -> Msg:
    fields: list[Item] = []
    if values is not None:
        fields.append(fld("values", 1, values))
    if indices is not None:
        fields.append(fld("indices", 2, indices))
    fields += [rep("dims", 3, d) for d in dims]
    return Msg(*fields)


def sparse_values(name: str = "S") -> Msg:
    return float_weights(name, (2,))


def sparse_indices() -> Msg:
    return tensor("", INT64, (2,), raw_data(struct.pack("<2q", 1, 4)))


def attribute(name: str | bytes, type_code: int | None, *items: Item) -> Msg:
    fields: list[Item] = [fld("name", 1, name)]
    if type_code is not None:
        fields.append(fld("type", 20, type_code))
    return Msg(*fields, *items)


def float_attr(name: str, value: float) -> Msg:
    return attribute(name, A_FLOAT, fld("f", 2, value, wire=FIXED32))


def graph_attr(name: str, body: Msg) -> Msg:
    return attribute(name, A_GRAPH, fld("g", 6, body))


def tensor_attr(name: str, value: Msg) -> Msg:
    return attribute(name, A_TENSOR, fld("t", 5, value))


def node(
    op: str | bytes,
    inputs: Sequence[str | bytes],
    outputs: Sequence[str | bytes],
    *items: Item,
    name: str | bytes = "",
    domain: str | bytes | None = None,
    attributes: Sequence[Msg] = (),
) -> Msg:
    fields: list[Item] = [rep("input", 1, i) for i in inputs]
    fields += [rep("output", 2, o) for o in outputs]
    if name:
        fields.append(fld("name", 3, name))
    fields.append(fld("op_type", 4, op))
    fields += [rep("attribute", 5, a) for a in attributes]
    if domain is not None:
        fields.append(fld("domain", 7, domain))
    return Msg(*fields, *items)


def graph(
    nodes: Sequence[Msg],
    inputs: Sequence[Msg],
    outputs: Sequence[Msg],
    *items: Item,
    initializers: Sequence[Msg] = (),
    sparse: Sequence[Msg] = (),
    name: str | bytes = "main",
) -> Msg:
    fields: list[Item] = [rep("node", 1, n) for n in nodes]
    if name:
        fields.append(fld("name", 2, name))
    fields += [rep("initializer", 5, t) for t in initializers]
    fields += [rep("input", 11, v) for v in inputs]
    fields += [rep("output", 12, v) for v in outputs]
    fields += [rep("sparse_initializer", 15, s) for s in sparse]
    return Msg(*fields, *items)


def opset(domain: str | bytes, version: int, *items: Item) -> Msg:
    return Msg(fld("domain", 1, domain), fld("version", 2, version), *items)


def model(
    graph_msg: Msg | Field | None, *items: Item, ir_version: int | None = 8, opsets: Sequence[tuple[str, int] | Msg] = (("", 17),)
) -> Msg:
    """A ModelProto: ir_version, opset_import, producer_name, then the graph
    (the last field unless `items` follow it)."""
    fields: list[Item] = [] if ir_version is None else [fld("ir_version", 1, ir_version)]
    fields += [rep("opset_import", 8, o if isinstance(o, Msg) else opset(*o)) for o in opsets]
    fields.append(fld("producer_name", 2, "hostile_cases"))
    if isinstance(graph_msg, Field):
        fields.append(graph_msg)
    elif graph_msg is not None:
        fields.append(fld("graph", 7, graph_msg))
    return Msg(*fields, *items)


# --------------------------------------------------------------------------- the valid models cases start from


def add_node(*items: Item) -> Msg:
    return node("Add", ["X", "W"], ["Y"], *items, name="add")


def add_graph(
    *items: Item,
    nodes: Sequence[Msg] | None = None,
    inputs: Sequence[Msg] | None = None,
    outputs: Sequence[Msg] | None = None,
    initializers: Sequence[Msg] | None = None,
    sparse: Sequence[Msg] = (),
    name: str | bytes = "main",
) -> Msg:
    """X (input) + W (initializer) -> Add -> Y (output), all FLOAT [2, 3]."""
    return graph(
        [add_node()] if nodes is None else nodes,
        [float_info("X")] if inputs is None else inputs,
        [float_info("Y")] if outputs is None else outputs,
        *items,
        initializers=[float_weights("W")] if initializers is None else initializers,
        sparse=sparse,
        name=name,
    )


def add_model(
    *graph_items: Item,
    nodes: Sequence[Msg] | None = None,
    inputs: Sequence[Msg] | None = None,
    outputs: Sequence[Msg] | None = None,
    initializers: Sequence[Msg] | None = None,
    sparse: Sequence[Msg] = (),
    name: str | bytes = "main",
) -> Msg:
    graph_msg = add_graph(*graph_items, nodes=nodes, inputs=inputs, outputs=outputs, initializers=initializers, sparse=sparse, name=name)
    return model(graph_msg)


def with_initializer(weights: Msg) -> Msg:
    """The Add model with `weights` as its initializer W."""
    return add_model(initializers=[weights])


def with_attribute(attr: Msg) -> Msg:
    """X -> LeakyRelu(`attr`) -> Y."""
    return model(graph([node("LeakyRelu", ["X"], ["Y"], attributes=[attr])], [float_info("X")], [float_info("Y")]))


def with_node_attribute(op: str, attr: Msg) -> Msg:
    """op(`attr`) -> Y, with no inputs (Constant, or a node whose attribute is under test)."""
    return model(graph([node(op, [], ["Y"], attributes=[attr])], [], [value_info("Y")]))


def with_input_type(type_proto: Msg) -> Msg:
    """A graph input S of the given type, passed through Identity to Y."""
    return model(graph([node("Identity", ["S"], ["Y"])], [value_info("S", type_proto)], [value_info("Y")]))


def if_model(body: Msg, *, outputs: Sequence[str] = ("Y",), more_nodes: Sequence[Msg] = ()) -> Msg:
    """If(c) with then_branch `body`, over inputs X (FLOAT [2, 3]) and c (BOOL)."""
    if_node = node("If", ["c"], outputs, attributes=[graph_attr("then_branch", body)])
    inputs = [float_info("X"), value_info("c", tensor_type(BOOL, ()))]
    return model(graph([if_node, *more_nodes], inputs, [value_info(o) for o in outputs]))


def branch(nodes: Sequence[Msg], outputs: Sequence[str] = ("t",), inputs: Sequence[Msg] = ()) -> Msg:
    return graph(nodes, inputs, [value_info(o) for o in outputs], name="then")


def if_chain(levels: int) -> Msg:
    """An If whose then_branch holds an If ..., `levels` graphs below the main one.

    Depths (ModelProto is 0): the k-th graph is at 1 + 3k, its node at 2 + 3k,
    that node's attribute at 3 + 3k. The innermost graph holds Identity(X).
    """
    body = graph([node("Identity", ["X"], ["Y"])], [], [value_info("Y")], name=f"level{levels}")
    for level in range(levels - 1, 0, -1):
        if_node = node("If", ["c"], ["Y"], attributes=[graph_attr("then_branch", body)])
        body = graph([if_node], [], [value_info("Y")], name=f"level{level}")
    return if_model(body)


def if_path(levels: int) -> str:
    """The field path of the graph `levels` below the main one in `if_chain`."""
    return "graph" + ".node[0].attribute[0].g" * levels


def sequence_chain(levels: int) -> Msg:
    """A TypeProto: a sequence of ... (`levels` times) of FLOAT tensors of unknown rank.

    As a graph input's type it is at depth 3; its j-th elem_type at 3 + 2j, the
    innermost tensor_type at 4 + 2 * levels.
    """
    type_proto = tensor_type(FLOAT, None)
    for _ in range(levels):
        type_proto = sequence_type(type_proto)
    return type_proto


def sequence_path(levels: int) -> str:
    return "graph.input[0].type" + ".sequence_type.elem_type" * levels


WEIGHTS = bytes(range(24))  # the 24 bytes of a FLOAT [2, 3]


def external_model(*entries: tuple[str | bytes, str | bytes], data_type: int = FLOAT, dims: Sequence[int] = (2, 3)) -> Msg:
    """The Add model with W in external data described by `entries`."""
    return with_initializer(external_tensor("W", entries, data_type, dims))


# --------------------------------------------------------------------------- the table


@dataclass(frozen=True)
class Folder:
    """A case's folder: the model at `model_file` and these beside it, all
    relative to the folder: `files` (name -> bytes), `symlinks` (link ->
    target, relative to the link), `hardlinks` (new name -> existing file)
    and `fifos`."""

    model_file: str = "model.onnx"
    files: Mapping[str, bytes] = field(default_factory=lambda: {"weights.bin": WEIGHTS})
    symlinks: Mapping[str, str] = field(default_factory=dict)
    hardlinks: Mapping[str, str] = field(default_factory=dict)
    fifos: Sequence[str] = ()


IO_SHAPES = ("directory", "fifo", "dangling-symlink")


@dataclass(frozen=True)
class Case:
    """One hostile input and the refusal it must get.

    `path` is the full field path (`ModelProto....`) or None, `offset` the byte
    offset from the start of the file or None. `folder`: the case needs side
    files (see `Folder`). `io_shape`: the input is not a model file at all
    (one of IO_SHAPES). `via_bytes`: the case is about a byte-array input,
    loaded with `load_model_bytes` and no external-data directory.
    """

    name: str
    kind: ErrorKind
    data: bytes = field(repr=False)
    offset: int | None
    path: str | None
    limits: Limits | None = None
    folder: Folder | None = None
    io_shape: str | None = None
    via_bytes: bool = False


SAME = "<the key of the field the path names>"


def expect(
    name: str,
    kind: ErrorKind,
    built: Msg | Encoded,
    path: str | None,
    at: str | int | None = SAME,
    *,
    limits: Limits | None = None,
    folder: Folder | None = None,
    via_bytes: bool = False,
) -> Case:
    """A case refused at `path` (relative to ModelProto; "" is the model itself).

    `at`: SAME for the key of the field `path` names, a label for
    `Encoded.locate`, an absolute offset, or None.
    """
    enc = built if isinstance(built, Encoded) else built.encode()
    if at == SAME:
        assert path is not None
        offset: int | None = enc.locate(path)
    else:
        offset = enc.locate(at) if isinstance(at, str) else at
    full = None if path is None else "ModelProto" + (f".{path}" if path else "")
    return Case(name, kind, enc.data, offset, full, limits, folder, via_bytes=via_bytes)


M, IM, U, ED, IO = ErrorKind.MALFORMED, ErrorKind.INVALID_MODEL, ErrorKind.UNSUPPORTED, ErrorKind.EXTERNAL_DATA, ErrorKind.IO
INPUT_X = "graph.input[0].type.tensor_type.shape"


def wire_cases() -> list[Case]:
    """docs/import-rules.md §1: keys, wire types, varints, lengths, truncation, strings."""
    base = add_model().encode()
    long_int32s = Msg(Raw(b"\x01" * 60 + b"\xff" * 9 + b"\x02", "#run"))
    return [
        # keys
        expect("Malformed-field-zero", M, model(add_graph(), Raw(b"\x00\x01", "#k")), "", "#k"),
        expect("Malformed-field-zero-in-graph", M, add_model(Raw(b"\x00\x00", "#k")), "graph", "#k"),
        expect("Malformed-field-zero-len-in-node", M, add_model(nodes=[add_node(Raw(b"\x02\x00", "#k"))]), "graph.node[0]", "#k"),
        expect("Malformed-field-zero-overlong-key", M, model(add_graph(), Raw(b"\x80\x80\x00", "#k")), "", "#k"),
        expect("Malformed-wire-type-3-group-in-model", M, model(add_graph(), Raw(b"\x0b\x08\x01\x0c", "#k")), "", "#k"),
        expect("Malformed-wire-type-4-in-graph", M, add_model(Raw(b"\x14", "#k")), "graph", "#k"),
        expect(
            "Malformed-wire-type-6-in-attribute",
            M,
            with_attribute(float_attr("alpha", 0.5).plus(Raw(b"\x0e\x00", "#k"))),
            "graph.node[0].attribute[0]",
            "#k",
        ),
        expect(
            "Malformed-wire-type-7-in-tensor",
            M,
            with_initializer(float_weights("W", (2, 3), Raw(b"\x0f", "#k"))),
            "graph.initializer[0]",
            "#k",
        ),
        expect(
            "Malformed-wire-type-7-in-dim",
            M,
            add_model(inputs=[value_info("X", tensor_type(FLOAT, [Msg(fld("dim_value", 1, 2), Raw(b"\x0f", "#k")), 3]))]),
            f"{INPUT_X}.dim[0]",
            "#k",
        ),
        expect("Malformed-key-over-32-bits", M, model(add_graph(), Raw(b"\x80\x80\x80\x80\x10\x00", "#k")), "", "#k"),
        expect(
            "Malformed-key-over-32-bits-in-opset",
            M,
            model(add_graph(), opsets=[opset("", 17, Raw(b"\xf8\xff\xff\xff\x1f\x00", "#k"))]),
            "opset_import[0]",
            "#k",
        ),
        # varints
        expect(
            "Malformed-varint-11-bytes",
            M,
            model(add_graph(), fld("model_version", 5, b"\x80" * 10 + b"\x00", wire=VARINT)),
            "",
            "model_version@value",
        ),
        expect(
            "Malformed-varint-tenth-byte-2-in-dims",
            M,
            with_initializer(tensor("W", FLOAT, (), rep("dims", 1, b"\xff" * 9 + b"\x02", wire=VARINT), raw_data(bytes(4)))),
            "graph.initializer[0]",
            "graph.initializer[0].dims[0]@value",
        ),
        expect(
            "Malformed-varint-tenth-byte-2-in-packed-dims",
            M,
            with_initializer(tensor("W", FLOAT, (), rep("dims", 1, Msg(Raw(b"\x02" + b"\xff" * 9 + b"\x02", "#p"))), raw_data(bytes(8)))),
            "graph.initializer[0]",
            "#p+1",
        ),
        expect(
            "Malformed-varint-tenth-byte-2-in-length",
            M,
            model(fld("graph", 7, add_graph(), length=b"\xff" * 9 + b"\x02")),
            "",
            "graph@value",
        ),
        expect(
            "Malformed-truncated-varint-in-dims",
            M,
            with_initializer(float_weights("W", (2, 3), Raw(b"\x08\x80", "#k"))),
            "graph.initializer[0]",
            "#k+1",
        ),
        expect(
            "Malformed-truncated-packed-dims",
            M,
            with_initializer(tensor("W", FLOAT, (), rep("dims", 1, Msg(Raw(b"\x06\x83", "#p"))), raw_data(bytes(24)))),
            "graph.initializer[0]",
            "#p+1",
        ),
        expect("Malformed-truncated-varint-at-end-of-file", M, model(add_graph(), Raw(b"\x28\xff", "#k")), "", "#k+1"),
        expect("Malformed-truncated-key-at-end-of-node", M, add_model(nodes=[add_node(Raw(b"\x82", "#k"))]), "graph.node[0]", "#k"),
        expect(
            "Malformed-truncated-fixed32-in-attribute",
            M,
            with_attribute(attribute("alpha", A_FLOAT, Raw(b"\x15\x00\x00", "#k"))),
            "graph.node[0].attribute[0]",
            "#k",
        ),
        expect("Malformed-truncated-fixed64-at-end-of-file", M, model(add_graph(), Raw(b"\x49\x00\x00\x00", "#k")), "", "#k"),
        expect(
            "Malformed-packed-int64-data-cut-varint",
            M,
            with_initializer(tensor("W", INT64, (100,), rep("int64_data", 7, Msg(Raw(b"\x01" * 99 + b"\x80", "#run"))))),
            "graph.initializer[0]",
            "#run+99",
        ),
        expect(
            "Malformed-packed-int32-data-overflow",
            M,
            with_initializer(tensor("W", INT32, (61,), rep("int32_data", 5, long_int32s))),
            "graph.initializer[0]",
            "#run+60",
        ),
        expect(
            "Malformed-packed-floats-not-multiple-of-4",
            M,
            with_attribute(attribute("alpha", A_FLOATS, rep("floats", 7, b"\x00" * 6))),
            "graph.node[0].attribute[0].floats",
        ),
        expect(
            "Malformed-packed-float-data-7-bytes",
            M,
            with_initializer(tensor("W", FLOAT, (2,), rep("float_data", 4, b"\x00" * 7))),
            "graph.initializer[0].float_data",
        ),
        # a length larger than what remains of the enclosing message, at every level
        expect("Malformed-length-exceeds-model", M, model(fld("graph", 7, add_graph(), grow=1)), "", "graph"),
        expect("Malformed-length-exceeds-graph", M, add_model(rep("node", 1, add_node(), grow=1)), "graph", "graph.node[1]"),
        expect(
            "Malformed-length-exceeds-node",
            M,
            add_model(nodes=[add_node(rep("attribute", 5, float_attr("alpha", 1.0), grow=3))]),
            "graph.node[0]",
            "graph.node[0].attribute[0]",
        ),
        expect(
            "Malformed-length-exceeds-attribute",
            M,
            with_node_attribute("Constant", attribute("value", A_TENSOR, fld("t", 5, float_weights("c"), grow=1))),
            "graph.node[0].attribute[0]",
            "graph.node[0].attribute[0].t",
        ),
        expect(
            "Malformed-length-exceeds-tensor",
            M,
            with_initializer(tensor("W", FLOAT, (2, 3), raw_data(bytes(24), grow=1))),
            "graph.initializer[0]",
            "graph.initializer[0].raw_data",
        ),
        expect(
            "Malformed-length-exceeds-type",
            M,
            add_model(inputs=[value_info("X", Msg(fld("tensor_type", 1, Msg(fld("elem_type", 1, FLOAT)), grow=1)))]),
            "graph.input[0].type",
            "graph.input[0].type.tensor_type",
        ),
        expect(
            "Malformed-length-exceeds-shape",
            M,
            add_model(inputs=[value_info("X", tensor_type(FLOAT, Msg(rep("dim", 1, dim(2)), rep("dim", 1, dim(3), grow=2))))]),
            INPUT_X,
            f"{INPUT_X}.dim[1]",
        ),
        expect(
            "Malformed-length-exceeds-dim",
            M,
            add_model(inputs=[value_info("X", tensor_type(FLOAT, [2, Msg(fld("dim_param", 2, "N", grow=1))]))]),
            f"{INPUT_X}.dim[1]",
            f"{INPUT_X}.dim[1].dim_param",
        ),
        expect(
            "Malformed-length-exceeds-opset",
            M,
            model(add_graph(), opsets=[Msg(fld("version", 2, 17), fld("domain", 1, "", grow=1))]),
            "opset_import[0]",
            "opset_import[0].domain",
        ),
        # huge lengths
        expect(
            "Malformed-length-2-63-raw-data",
            M,
            with_initializer(tensor("W", FLOAT, (2, 3), raw_data(bytes(24), length=1 << 63))),
            "graph.initializer[0]",
            "graph.initializer[0].raw_data",
        ),
        expect("Malformed-length-2-64-minus-1-graph", M, model(fld("graph", 7, add_graph(), length=(1 << 64) - 1)), "", "graph"),
        expect(
            "Malformed-length-2-31-node-input",
            M,
            add_model(nodes=[node("Add", [], ["Y"], rep("input", 1, "X", length=1 << 31))]),
            "graph.node[0]",
            "graph.node[0].input[0]",
        ),
        # the file cut off inside each level: the graph's own length is what runs past the end
        Case(
            "Malformed-truncated-file-after-graph-key", M, base.data[: base.locate("graph") + 1], base.locate("graph@value"), "ModelProto"
        ),
        Case(
            "Malformed-truncated-file-in-opset",
            M,
            base.data[: base.locate("opset_import[0]@payload+1")],
            base.locate("opset_import[0]"),
            "ModelProto",
        ),
        Case(
            "Malformed-truncated-file-in-node", M, base.data[: base.locate("graph.node[0].input[1]+2")], base.locate("graph"), "ModelProto"
        ),
        Case(
            "Malformed-truncated-file-in-raw-data",
            M,
            base.data[: base.locate("graph.initializer[0].raw_data@payload+5")],
            base.locate("graph"),
            "ModelProto",
        ),
        Case(
            "Malformed-truncated-file-in-output-dim",
            M,
            base.data[: base.locate("graph.output[0].type.tensor_type.shape.dim[1]+1")],
            base.locate("graph"),
            "ModelProto",
        ),
    ]


def utf8_cases() -> list[Case]:
    """String fields must be valid UTF-8 (bytes fields are never decoded)."""
    return [
        expect("Malformed-utf8-node-name", M, add_model(nodes=[node("Add", ["X", "W"], ["Y"], name=b"add\xff")]), "graph.node[0].name"),
        expect("Malformed-utf8-node-input", M, add_model(nodes=[node("Add", ["X", b"W\xc3\x28"], ["Y"])]), "graph.node[0].input[1]"),
        expect(
            "Malformed-utf8-surrogate-node-output",
            M,
            add_model(nodes=[node("Add", ["X", "W"], [b"Y\xed\xa0\x80"])]),
            "graph.node[0].output[0]",
        ),
        expect("Malformed-utf8-overlong-op-type", M, add_model(nodes=[node(b"Ad\xc0\xaf", ["X", "W"], ["Y"])]), "graph.node[0].op_type"),
        expect(
            "Malformed-utf8-node-domain", M, add_model(nodes=[node("Add", ["X", "W"], ["Y"], domain=b"\xe2\x82")]), "graph.node[0].domain"
        ),
        expect("Malformed-utf8-graph-name", M, add_model(name=b"\xfe"), "graph.name"),
        expect("Malformed-utf8-tensor-name", M, with_initializer(float_weights(b"W\x80")), "graph.initializer[0].name"),
        expect(
            "Malformed-utf8-dim-param",
            M,
            add_model(inputs=[value_info("X", tensor_type(FLOAT, [2, Msg(fld("dim_param", 2, b"N\xff"))]))]),
            f"{INPUT_X}.dim[1].dim_param",
        ),
        expect(
            "Malformed-utf8-beyond-u10ffff-output-name", M, add_model(outputs=[float_info(b"\xf5\x80\x80\x80")]), "graph.output[0].name"
        ),
        expect("Malformed-utf8-opset-domain", M, model(add_graph(), opsets=[("", 17), opset(b"com.\xff", 1)]), "opset_import[1].domain"),
        expect(
            "Malformed-utf8-attribute-name",
            M,
            with_attribute(attribute(b"alph\xa0", A_FLOAT, fld("f", 2, 0.5, wire=FIXED32))),
            "graph.node[0].attribute[0].name",
        ),
        expect("Malformed-utf8-producer-name", M, model(add_graph(), fld("producer_name", 2, b"\xc1\xbf")), "producer_name"),
        expect(
            "Malformed-utf8-external-data-key",
            M,
            external_model((b"loc\xffation", "weights.bin")),
            "graph.initializer[0].external_data[0].key",
        ),
        expect(
            "Malformed-utf8-1mib-node-name",
            M,
            add_model(nodes=[node("Add", ["X", "W"], ["Y"], name=BIG_NAME.encode() + b"\xff")]),
            "graph.node[0].name",
        ),
    ]


def nesting_cases() -> list[Case]:
    """MaxNesting: default 128, and Limits(max_nesting=8)."""
    tight = Limits(max_nesting=8)
    deep_dim = if_model(branch([node("Identity", ["P"], ["t"])], inputs=[float_info("P")]), outputs=["t"])
    return [
        expect("Malformed-nesting-graph-recursion-beyond-128", M, if_chain(50), if_path(42) + ".node[0].attribute[0]"),
        expect("Malformed-nesting-graph-recursion-limit-8", M, if_chain(5), if_path(2) + ".node[0].attribute[0]", limits=tight),
        expect("Malformed-nesting-sequence-of-sequence-beyond-128", M, with_input_type(sequence_chain(70)), sequence_path(63)),
        expect("Malformed-nesting-sequence-of-sequence-limit-8", M, with_input_type(sequence_chain(5)), sequence_path(3), limits=tight),
        expect(
            "Malformed-nesting-dim-limit-8",
            M,
            deep_dim,
            "graph.node[0].attribute[0].g.input[0].type.tensor_type.shape.dim[0]",
            limits=tight,
        ),
    ]


def model_cases() -> list[Case]:
    """docs/import-rules.md §2: the model checks."""
    return [
        Case("InvalidModel-empty-file", IM, b"", None, "ModelProto.ir_version"),
        expect("InvalidModel-ir-version-absent", IM, model(add_graph(), ir_version=None), "ir_version", None),
        expect(
            "InvalidModel-ir-version-wrong-wire-type", IM, model(add_graph(), fld(None, 1, b"\x08"), ir_version=None), "ir_version", None
        ),
        expect("InvalidModel-ir-version-2", IM, model(add_graph(), ir_version=2), "ir_version"),
        expect("InvalidModel-ir-version-negative", IM, model(add_graph(), ir_version=-1), "ir_version"),
        expect("InvalidModel-ir-version-last-one-is-2", IM, model(add_graph(), fld("ir_version", 1, 2)), "ir_version"),
        expect("InvalidModel-graph-absent", IM, model(None), "graph", None),
        expect("InvalidModel-graph-wrong-wire-type", IM, model(None, fld(None, 7, 1)), "graph", None),
    ]


def attribute_cases() -> list[Case]:
    """docs/import-rules.md §2: attributes."""
    attr0 = "graph.node[0].attribute[0]"
    return [
        expect("InvalidModel-attribute-no-type-no-value", IM, with_attribute(attribute("alpha", None)), attr0),
        expect("InvalidModel-attribute-type-0-no-value", IM, with_attribute(attribute("alpha", 0)), attr0),
        expect("InvalidModel-attribute-no-value-1mib-name", IM, with_attribute(attribute(BIG_NAME, None)), attr0),
        expect("InvalidModel-attribute-tensor-without-t", IM, with_node_attribute("Constant", attribute("value", A_TENSOR)), attr0),
        expect(
            "InvalidModel-attribute-tensor-without-t-1mib-name", IM, with_node_attribute("Constant", attribute(BIG_NAME, A_TENSOR)), attr0
        ),
        expect(
            "InvalidModel-attribute-tensor-given-a-graph",
            IM,
            with_node_attribute("Constant", attribute("value", A_TENSOR, fld("g", 6, branch([], outputs=())))),
            attr0,
        ),
        expect("InvalidModel-attribute-graph-without-g", IM, with_node_attribute("Loop", attribute("body", A_GRAPH)), attr0),
        expect(
            "InvalidModel-attribute-sparse-tensor-without-field",
            IM,
            with_node_attribute("Constant", attribute("sparse_value", A_SPARSE_TENSOR)),
            attr0,
        ),
        expect("InvalidModel-attribute-type-proto-without-tp", IM, with_node_attribute("Custom", attribute("tp", A_TYPE_PROTO)), attr0),
        expect("Unsupported-attribute-type-99", U, with_attribute(attribute("alpha", 99, fld("f", 2, 0.5, wire=FIXED32))), f"{attr0}.type"),
        expect(
            "Unsupported-attribute-type-negative",
            U,
            with_attribute(attribute("alpha", -1, fld("f", 2, 0.5, wire=FIXED32))),
            f"{attr0}.type",
        ),
    ]


def tensor_cases() -> list[Case]:
    """docs/import-rules.md §3: tensors (as initializer W of the Add model unless said)."""
    w = "graph.initializer[0]"
    six = struct.pack("<6f", *range(6))
    return [
        expect("InvalidModel-data-type-0", IM, with_initializer(tensor("W", 0, (2, 3), raw_data(bytes(24)))), f"{w}.data_type"),
        expect("Unsupported-data-type-29", U, with_initializer(tensor("W", 29, (2, 3), raw_data(bytes(24)))), f"{w}.data_type"),
        expect("Unsupported-data-type-2-31", U, with_initializer(tensor("W", 1 << 31, (2, 3), raw_data(bytes(24)))), f"{w}.data_type"),
        expect("InvalidModel-negative-dim", IM, with_initializer(tensor("W", FLOAT, (2, -3), raw_data(bytes(24)))), f"{w}.dims[1]"),
        expect(
            "InvalidModel-negative-dim-packed",
            IM,
            with_initializer(tensor("W", FLOAT, (), packed("dims", 1, [2, -3]), raw_data(bytes(24)))),
            f"{w}.dims[1]",
            f"{w}.dims[0]",
        ),
        expect("InvalidModel-element-count-over-2-60", IM, with_initializer(tensor("W", FLOAT, (1 << 31, 1 << 31))), f"{w}.dims"),
        expect("Unsupported-tensor-over-2-31-bytes", U, with_initializer(tensor("W", FLOAT, (1 << 31,))), f"{w}.dims"),
        expect("Unsupported-complex128-2-31-bytes", U, with_initializer(tensor("W", COMPLEX128, (1 << 27,))), f"{w}.dims"),
        expect("Unsupported-count-2-60-uint2", U, with_initializer(tensor("W", UINT2, (1 << 60,))), f"{w}.dims"),
        expect("InvalidModel-2-31-minus-1-bytes-no-data", IM, with_initializer(tensor("W", UINT8, ((1 << 31) - 1,))), w),
        expect("InvalidModel-tensor-elements-no-data", IM, with_initializer(tensor("W", FLOAT, (2, 3))), w),
        expect(
            "InvalidModel-raw-data-length-mismatch", IM, with_initializer(tensor("W", FLOAT, (2, 3), raw_data(bytes(23)))), f"{w}.raw_data"
        ),
        expect("InvalidModel-raw-data-empty", IM, with_initializer(tensor("W", FLOAT, (2, 3), raw_data(b""))), f"{w}.raw_data"),
        expect(
            "InvalidModel-float-data-on-int64",
            IM,
            with_initializer(tensor("W", INT64, (2, 3), rep("float_data", 4, six))),
            f"{w}.float_data",
        ),
        expect(
            "InvalidModel-int32-data-on-float",
            IM,
            with_initializer(tensor("W", FLOAT, (2, 3), packed("int32_data", 5, range(6)))),
            f"{w}.int32_data",
        ),
        expect(
            "InvalidModel-int64-data-count-mismatch",
            IM,
            with_initializer(tensor("W", INT64, (2, 3), packed("int64_data", 7, range(5)))),
            f"{w}.int64_data",
        ),
        expect(
            "InvalidModel-raw-data-plus-float-data",
            IM,
            with_initializer(tensor("W", FLOAT, (2, 3), raw_data(bytes(24)), rep("float_data", 4, six))),
            f"{w}.float_data",
        ),
        expect(
            "InvalidModel-string-count-mismatch",
            IM,
            with_initializer(tensor("W", STRING, (3,), rep("string_data", 6, "a"), rep("string_data", 6, "b"))),
            f"{w}.string_data",
        ),
        expect("InvalidModel-raw-data-on-string", IM, with_initializer(tensor("W", STRING, (1,), raw_data(b"a"))), f"{w}.raw_data"),
        expect(
            "InvalidModel-data-location-2",
            IM,
            with_initializer(tensor("W", FLOAT, (2, 3), raw_data(bytes(24)), fld("data_location", 14, 2))),
            f"{w}.data_location",
        ),
        expect(
            "Unsupported-segment",
            U,
            with_initializer(tensor("W", FLOAT, (2, 3), fld("segment", 3, Msg(fld("begin", 1, 0), fld("end", 2, 6))), raw_data(bytes(24)))),
            f"{w}.segment",
        ),
        expect(
            "InvalidModel-external-data-plus-raw-data",
            IM,
            with_initializer(external_tensor("W", [("location", "weights.bin")], FLOAT, (2, 3), raw_data(bytes(24)))),
            f"{w}.raw_data",
        ),
        expect(
            "InvalidModel-external-data-key-twice",
            IM,
            external_model(("location", "weights.bin"), ("location", "other.bin")),
            f"{w}.external_data[1]",
        ),
        expect(
            "InvalidModel-constant-data-type-0",
            IM,
            with_node_attribute("Constant", tensor_attr("value", tensor("", 0, (1,)))),
            "graph.node[0].attribute[0].t.data_type",
        ),
        expect(
            "Unsupported-constant-data-type-29",
            U,
            with_node_attribute("Constant", tensor_attr("value", tensor("", 29, (1,), raw_data(b"\x00")))),
            "graph.node[0].attribute[0].t.data_type",
        ),
        # sparse tensors
        expect(
            "InvalidModel-sparse-missing-values",
            IM,
            add_model(sparse=[sparse_tensor(None, sparse_indices(), (6,))]),
            "graph.sparse_initializer[0]",
        ),
        expect(
            "InvalidModel-sparse-missing-indices",
            IM,
            add_model(sparse=[sparse_tensor(sparse_values(), None, (6,))]),
            "graph.sparse_initializer[0]",
        ),
        expect(
            "InvalidModel-sparse-negative-dim",
            IM,
            add_model(sparse=[sparse_tensor(sparse_values(), sparse_indices(), (-6,))]),
            "graph.sparse_initializer[0].dims[0]",
        ),
        expect(
            "InvalidModel-sparse-attribute-missing-values",
            IM,
            with_node_attribute(
                "Constant",
                attribute("sparse_value", A_SPARSE_TENSOR, fld("sparse_tensor", 22, sparse_tensor(None, sparse_indices(), (6,)))),
            ),
            "graph.node[0].attribute[0].sparse_tensor",
        ),
    ]


def graph_cases() -> list[Case]:
    """docs/import-rules.md §4: values, references, opsets, order, scopes."""
    y = [float_info("Y")]
    return [
        expect("InvalidModel-input-empty-name", IM, add_model(inputs=[float_info(""), float_info("X")]), "graph.input[0]"),
        expect("InvalidModel-input-listed-twice", IM, add_model(inputs=[float_info("X"), float_info("X")]), "graph.input[1]"),
        expect(
            "InvalidModel-initializer-defined-twice",
            IM,
            add_model(initializers=[float_weights("W"), float_weights("W")]),
            "graph.initializer[1]",
        ),
        expect(
            "InvalidModel-initializer-twice-for-one-input",
            IM,
            add_model(inputs=[float_info("X"), float_info("W")], initializers=[float_weights("W"), float_weights("W")]),
            "graph.initializer[1]",
        ),
        expect("InvalidModel-initializer-empty-name", IM, add_model(initializers=[float_weights("")]), "graph.initializer[0]"),
        expect(
            "InvalidModel-initializer-1mib-name-twice",
            IM,
            add_model(initializers=[float_weights(BIG_NAME), float_weights(BIG_NAME)]),
            "graph.initializer[1]",
        ),
        expect(
            "InvalidModel-sparse-initializer-name-taken",
            IM,
            add_model(sparse=[sparse_tensor(sparse_values("W"), sparse_indices(), (6,))]),
            "graph.sparse_initializer[0]",
        ),
        expect(
            "InvalidModel-node-output-defined-twice",
            IM,
            add_model(nodes=[add_node(), node("Identity", ["X"], ["Y"])]),
            "graph.node[1].output[0]",
        ),
        expect(
            "InvalidModel-node-output-is-an-input", IM, add_model(nodes=[node("Add", ["X", "W"], ["Y", "X"])]), "graph.node[0].output[1]"
        ),
        expect(
            "InvalidModel-node-output-is-an-initializer",
            IM,
            add_model(nodes=[node("Add", ["X", "X"], ["W"])], outputs=[float_info("W")]),
            "graph.node[0].output[0]",
        ),
        expect("InvalidModel-node-input-undefined", IM, add_model(nodes=[node("Add", ["X", "Z"], ["Y"])]), "graph.node[0].input[1]"),
        expect(
            "InvalidModel-node-input-undefined-after-omitted",
            IM,
            add_model(nodes=[node("Add", ["", "Z"], ["Y"])]),
            "graph.node[0].input[1]",
        ),
        expect(
            "InvalidModel-node-input-undefined-1mib-name",
            IM,
            add_model(nodes=[node("Add", ["X", BIG_NAME], ["Y"])]),
            "graph.node[0].input[1]",
        ),
        expect("InvalidModel-graph-output-undefined", IM, add_model(outputs=[float_info("Y"), float_info("Z")]), "graph.output[1]"),
        expect("InvalidModel-graph-output-empty-name", IM, add_model(outputs=[float_info("")]), "graph.output[0]"),
        expect(
            "InvalidModel-node-domain-not-imported",
            IM,
            add_model(nodes=[node("Add", ["X", "W"], ["Y"], domain="com.example")]),
            "graph.node[0].domain",
        ),
        expect("InvalidModel-default-domain-not-imported", IM, model(add_graph(), opsets=[("ai.onnx.ml", 3)]), "graph.node[0]"),
        expect("InvalidModel-domain-imported-twice", IM, model(add_graph(), opsets=[("", 17), ("", 18)]), "opset_import[1]"),
        expect("InvalidModel-ai-onnx-alias-imported-twice", IM, model(add_graph(), opsets=[("", 17), ("ai.onnx", 18)]), "opset_import[1]"),
        expect(
            "InvalidModel-cycle-two-nodes",
            IM,
            add_model(nodes=[node("Add", ["X", "b"], ["Y"]), node("Identity", ["Y"], ["b"])], outputs=y),
            "graph.node[0]",
        ),
        expect("InvalidModel-node-reads-its-own-output", IM, add_model(nodes=[node("Add", ["X", "Y"], ["Y"])]), "graph.node[0]"),
        # node 0 only waits for the cycle of nodes 1 and 2: the error should name a node of the cycle
        expect(
            "InvalidModel-cycle-after-first-node",
            IM,
            add_model(nodes=[node("Identity", ["c"], ["Y"]), node("Add", ["X", "c"], ["b"]), node("Identity", ["b"], ["c"])]),
            "graph.node[1]",
        ),
        expect(
            "InvalidModel-cycle-through-subgraph-capture",
            IM,
            if_model(branch([node("Identity", ["b"], ["t"])]), outputs=["a"], more_nodes=[node("Identity", ["a"], ["b"])]),
            "graph.node[0]",
        ),
        expect(
            "InvalidModel-subgraph-reads-undefined",
            IM,
            if_model(branch([node("Identity", ["Z"], ["t"])]), outputs=["a"]),
            "graph.node[0].attribute[0].g.node[0].input[0]",
        ),
        expect(
            "InvalidModel-subgraph-output-undefined",
            IM,
            if_model(branch([node("Identity", ["X"], ["t"])], outputs=["Z"])),
            "graph.node[0].attribute[0].g.output[0]",
        ),
        expect(
            "InvalidModel-subgraph-input-empty-name",
            IM,
            if_model(branch([node("Identity", ["X"], ["t"])], inputs=[float_info("")]), outputs=["a"]),
            "graph.node[0].attribute[0].g.input[0]",
        ),
        expect(
            "InvalidModel-subgraph-domain-not-imported",
            IM,
            if_model(branch([node("Identity", ["X"], ["t"], domain="com.example")]), outputs=["a"]),
            "graph.node[0].attribute[0].g.node[0].domain",
        ),
    ]


def external_cases() -> list[Case]:
    """docs/import-rules.md §5: every external-data refusal. The model is <case>/model.onnx
    beside weights.bin (24 bytes) unless the folder says otherwise."""
    w = "graph.initializer[0]"
    plain = Folder()
    nested = Folder("dir/model.onnx", {"dir/weights.bin": WEIGHTS, "outside.bin": WEIGHTS})

    def ext(name: str, *entries: tuple[str | bytes, str | bytes], folder: Folder = plain) -> Case:
        return expect(name, ED, external_model(*entries), w, folder=folder)

    def loc(location: str | bytes) -> tuple[str, str | bytes]:
        return ("location", location)

    two_files = add_model(initializers=[external_tensor("W", [loc("weights.bin")]), external_tensor("V", [loc("other.bin")])])
    missing_sparse = sparse_tensor(external_tensor("S", [loc("missing.bin")], FLOAT, (2,)), sparse_indices(), (6,))
    subgraph_init = graph(
        [node("Identity", ["V"], ["t"])], [], [value_info("t")], initializers=[external_tensor("V", [loc("missing.bin")])]
    )
    return [
        ext("ExternalData-absolute-location", loc("/etc/passwd")),
        ext("ExternalData-dotdot-segment", loc("../outside.bin"), folder=nested),
        ext("ExternalData-dotdot-in-the-middle", loc("sub/../../outside.bin"), folder=nested),
        ext("ExternalData-backslash-dotdot", loc("..\\outside.bin"), folder=nested),
        ext("ExternalData-leading-backslash", loc("\\weights.bin")),
        ext("ExternalData-drive-prefix", loc("C:weights.bin")),
        ext("ExternalData-drive-absolute", loc("c:\\weights.bin")),
        ext("ExternalData-nul-in-location", loc("weights.bin\x00.txt")),
        ext("ExternalData-empty-location", loc("")),
        ext("ExternalData-no-location-entry", ("offset", "0")),
        ext("ExternalData-offset-hex", loc("weights.bin"), ("offset", "0x10")),
        ext("ExternalData-offset-negative", loc("weights.bin"), ("offset", "-4")),
        ext("ExternalData-offset-exponent", loc("weights.bin"), ("offset", "1e3")),
        ext("ExternalData-offset-plus-sign", loc("weights.bin"), ("offset", "+0")),
        ext("ExternalData-offset-non-ascii-digit", loc("weights.bin"), ("offset", "\u0660")),
        ext("ExternalData-offset-2-64", loc("weights.bin"), ("offset", str(1 << 64))),
        ext("ExternalData-length-mismatch", loc("weights.bin"), ("length", "20")),
        ext("ExternalData-length-negative", loc("weights.bin"), ("length", "-24")),
        ext("ExternalData-range-beyond-file", loc("weights.bin"), ("offset", "8")),
        ext("ExternalData-file-shorter-than-tensor", loc("short.bin"), folder=Folder(files={"short.bin": bytes(10)})),
        ext("ExternalData-file-missing", loc("missing.bin")),
        ext("ExternalData-location-is-a-directory", loc("sub"), folder=Folder(files={"sub/keep.bin": b""})),
        ext("ExternalData-location-is-the-directory", loc(".")),
        ext("ExternalData-location-is-a-fifo", loc("pipe.bin"), folder=Folder(fifos=["pipe.bin"])),
        ext(
            "ExternalData-symlink-escapes",
            loc("link.bin"),
            folder=Folder("dir/model.onnx", {"outside.bin": WEIGHTS}, symlinks={"dir/link.bin": "../outside.bin"}),
        ),
        ext(
            "ExternalData-symlinked-directory-escapes",
            loc("up/outside.bin"),
            folder=Folder("dir/model.onnx", {"outside.bin": WEIGHTS}, symlinks={"dir/up": ".."}),
        ),
        ext(
            "ExternalData-hard-link-to-outside",
            loc("weights.bin"),
            folder=Folder("dir/model.onnx", {"outside.bin": WEIGHTS}, hardlinks={"dir/weights.bin": "outside.bin"}),
        ),
        ext("ExternalData-1mib-location", loc("a" * MIB)),
        expect("ExternalData-no-directory-for-bytes", ED, external_model(loc("weights.bin")), w, folder=plain, via_bytes=True),
        expect("ExternalData-string-tensor", ED, external_model(loc("weights.bin"), data_type=STRING, dims=(2,)), w, folder=plain),
        expect(
            "ExternalData-too-many-files",
            ED,
            two_files,
            "graph.initializer[1]",
            limits=Limits(max_external_files=1),
            folder=Folder(files={"weights.bin": WEIGHTS, "other.bin": WEIGHTS}),
        ),
        expect(
            "ExternalData-missing-file-in-constant",
            ED,
            with_node_attribute("Constant", tensor_attr("value", external_tensor("", [loc("missing.bin")]))),
            "graph.node[0].attribute[0].t",
            folder=plain,
        ),
        expect(
            "ExternalData-missing-file-in-sparse-values",
            ED,
            add_model(sparse=[missing_sparse]),
            "graph.sparse_initializer[0].values",
            folder=plain,
        ),
        expect(
            "ExternalData-missing-file-in-subgraph",
            ED,
            if_model(subgraph_init, outputs=["a"]),
            "graph.node[0].attribute[0].g.initializer[0]",
            folder=plain,
        ),
    ]


def io_cases() -> list[Case]:
    """The input itself cannot be read: no offset, no field path."""
    return [Case(f"Io-{shape_}", IO, b"", None, None, io_shape=shape_) for shape_ in IO_SHAPES]


CASES: list[Case] = [
    *wire_cases(),
    *utf8_cases(),
    *nesting_cases(),
    *model_cases(),
    *attribute_cases(),
    *tensor_cases(),
    *graph_cases(),
    *external_cases(),
    *io_cases(),
]


@dataclass(frozen=True)
class Control:
    """A valid model close to some cases: it must load (with `limits`);
    `onnx_checked`: onnx.checker accepts it too."""

    name: str
    data: bytes = field(repr=False)
    folder: Folder | None = None
    limits: Limits | None = None
    onnx_checked: bool = False


CONTROLS: list[Control] = [
    Control("add", add_model().encode().data, onnx_checked=True),
    Control("leaky-relu", with_attribute(float_attr("alpha", 0.5)).encode().data, onnx_checked=True),
    Control("constant", with_node_attribute("Constant", tensor_attr("value", float_weights("c"))).encode().data),
    Control(
        "ir-version-3-initializer-as-input-default",
        model(add_graph(inputs=[float_info("X"), float_info("W")]), ir_version=3).encode().data,
        onnx_checked=True,
    ),
    Control(
        "sparse-initializer", add_model(sparse=[sparse_tensor(sparse_values(), sparse_indices(), (6,))]).encode().data, onnx_checked=True
    ),
    Control("if-with-capture", if_model(branch([node("Identity", ["X"], ["t"])]), outputs=["a"]).encode().data),
    Control("if-chain-42-at-the-nesting-limit", if_chain(42).encode().data),
    Control("sequence-of-sequence-62-at-the-nesting-limit", with_input_type(sequence_chain(62)).encode().data),
    Control("sequence-of-sequence-2-within-limit-8", with_input_type(sequence_chain(2)).encode().data, limits=Limits(max_nesting=8)),
    Control("external-data", external_model(("location", "weights.bin"), ("offset", "0"), ("length", "24")).encode().data, Folder()),
    Control("external-data-in-subdirectory", external_model(("location", "sub/w.bin")).encode().data, Folder(files={"sub/w.bin": WEIGHTS})),
]


# --------------------------------------------------------------------------- on disk


def case_path(root: Path, case: Case) -> Path:
    """Where `write_cases` puts a case's model (see the module header)."""
    if case.folder is not None:
        return root / case.name / case.folder.model_file
    return root / f"{case.name}.onnx"


def write_folder(directory: Path, folder: Folder, data: bytes) -> Path:
    """Write a model and its side files under `directory`; return the model's path."""
    directory.mkdir(parents=True, exist_ok=True)
    model_path = directory / folder.model_file
    model_path.parent.mkdir(parents=True, exist_ok=True)
    model_path.write_bytes(data)
    for name, content in folder.files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_bytes(content)
    for link, target in folder.symlinks.items():
        os.symlink(target, directory / link)
    for new, existing in folder.hardlinks.items():
        os.link(directory / existing, directory / new)
    for fifo in folder.fifos:
        os.mkfifo(directory / fifo)
    return model_path


def write_case(root: Path, case: Case) -> Path:
    path = case_path(root, case)
    if case.folder is not None:
        return write_folder(root / case.name, case.folder, case.data)
    if case.io_shape == "directory":
        path.mkdir()
    elif case.io_shape == "fifo":
        os.mkfifo(path)
    elif case.io_shape == "dangling-symlink":
        os.symlink("no-such-file.onnx", path)
    else:
        path.write_bytes(case.data)
    return path


def write_cases(root: Path = HOSTILE_DIR, cases: Sequence[Case] = CASES) -> None:
    """Replace `root` with exactly the files of `cases`."""
    if root.is_symlink() or root.is_file():
        root.unlink()
    elif root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for case in cases:
        write_case(root, case)


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HOSTILE_DIR
    write_cases(target)
    print(f"wrote {len(CASES)} hostile cases to {target}")
