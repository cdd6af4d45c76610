"""Unit tests of importer/wire.py, and the wire rules of docs/import-rules.md §1 seen through the loaders.

Varint edge cases (overlong accepted, 10-byte maximum, tenth byte above 1 and
cut-off varints refused, never reading past the message's end), the int32 and
int64 readings, packed and unpacked repeated scalars mixed, last-one-wins for
singular fields and oneof members, unknown fields and known fields with the
wrong wire type skipped, and the bulk numpy varint decoder against the scalar
one (hypothesis).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.hostile_cases import (
    A_FLOAT,
    FIXED32,
    FIXED64,
    FLOAT,
    INT32,
    INT64,
    STRING,
    VARINT,
    Item,
    Msg,
    Raw,
    add_graph,
    add_model,
    attribute,
    dim,
    fld,
    float_info,
    float_weights,
    graph,
    model,
    node,
    opset,
    packed,
    raw_data,
    rep,
    sequence_type,
    shape,
    tensor,
    tensor_attr,
    tensor_type,
    value_info,
    varint,
    with_attribute,
    with_initializer,
    with_node_attribute,
)

from importer import DataType, OnnxModel, load_model_bytes, load_tensor_bytes
from importer.errors import ReadFailure
from importer.messages import Attribute, AttributeType, SequenceType, TensorType
from importer.summary import describe_type
from importer.tensor import Tensor
from importer.wire import (
    as_int32,
    as_int64,
    check_varints,
    count_varints,
    field_spans,
    iter_fields,
    read_string,
    read_varint,
    varints_to_array,
    varints_to_list,
)

MAX_U64 = (1 << 64) - 1


def view(data: bytes) -> bytes:
    """The reader parses the input object itself (bytes, bytearray or mmap)."""
    return data


def refused(call: Callable[[], object]) -> ReadFailure:
    with pytest.raises(ReadFailure) as info:
        call()
    return info.value


def load(built: Msg) -> OnnxModel:
    return load_model_bytes(built.encode().data)


def first_attribute(imported: OnnxModel) -> Attribute:
    return imported.graph.nodes[0].proto.attribute[0]


def initializer(imported: OnnxModel, index: int = 0) -> Tensor:
    assert imported.proto.graph is not None
    return imported.proto.graph.initializer[index]


# --------------------------------------------------------------------------- varints


def test_overlong_varint_is_accepted() -> None:
    assert read_varint(view(b"\x81\x80\x00"), 0, 3) == (1, 3)
    assert read_varint(view(b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x00"), 0, 10) == (0, 10)


def test_ten_byte_varint_holds_the_largest_value() -> None:
    assert read_varint(view(b"\xff" * 9 + b"\x01"), 0, 10) == (MAX_U64, 10)
    assert read_varint(view(b"\x80" * 9 + b"\x01"), 0, 10) == (1 << 63, 10)


@pytest.mark.parametrize("tenth", [0x02, 0x7F, 0x80, 0x81, 0xFF])
def test_tenth_byte_above_one_is_refused_at_the_varint_start(tenth: int) -> None:
    data = b"\x00\x00\x00" + b"\xff" * 9 + bytes([tenth]) + b"\x00"
    assert refused(lambda: read_varint(view(data), 3, len(data))).offset == 3


def test_eleven_byte_varint_is_refused() -> None:
    data = b"\x80" * 10 + b"\x00"
    assert refused(lambda: read_varint(view(data), 0, len(data))).offset == 0


def test_varint_cut_off_at_the_end_is_refused_even_if_the_buffer_goes_on() -> None:
    data = b"\x05\x80\x80\x01"
    assert read_varint(view(data), 1, 4) == (1 << 14, 4)
    assert refused(lambda: read_varint(view(data), 1, 3)).offset == 1
    assert refused(lambda: read_varint(view(data), 4, 4)).offset == 4


@pytest.mark.parametrize(
    ("value", "low32"),
    [(MAX_U64, -1), ((1 << 32) + 5, 5), (0x8000_0000, -(1 << 31)), (0x7FFF_FFFF, (1 << 31) - 1), (0x1_8000_0000, -(1 << 31))],
)
def test_as_int32_keeps_the_low_32_bits(value: int, low32: int) -> None:
    assert as_int32(value) == low32


@pytest.mark.parametrize(("value", "signed"), [(MAX_U64, -1), (1 << 63, -(1 << 63)), ((1 << 63) - 1, (1 << 63) - 1), (7, 7)])
def test_as_int64_keeps_all_64_bits(value: int, signed: int) -> None:
    assert as_int64(value) == signed


def test_int32_fields_of_a_tensor_keep_the_low_32_bits() -> None:
    """data_type (int32) 2^32 + 6 is INT32; int32_data entries of 64-bit varints wrap to 32 bits."""
    data = tensor("t", (1 << 32) + INT32, (3,), packed("int32_data", 5, [(1 << 32) + 7, -1, 1 << 31])).encode().data
    loaded = load_tensor_bytes(data)
    assert loaded.data_type == DataType.INT32
    assert loaded.to_numpy().tolist() == [7, -1, -(1 << 31)]


def test_attribute_type_keeps_the_low_32_bits_and_int_keeps_64() -> None:
    attr = attribute("axis", (1 << 32) + 2, fld("i", 3, 1 << 63))  # type INT, i = -2^63 as int64
    imported = load(with_attribute(attr))
    assert first_attribute(imported).type == AttributeType.INT
    assert first_attribute(imported).value == -(1 << 63)


def test_int64_fields_keep_all_64_bits() -> None:
    imported = load(
        model(add_graph(initializers=[tensor("W", INT64, (2,), packed("int64_data", 7, [(1 << 63) + 5, -2]))]), ir_version=1 << 40)
    )
    assert imported.ir_version == 1 << 40  # a version newer than any known is accepted
    assert initializer(imported).to_numpy().tolist() == [-(1 << 63) + 5, -2]


# --------------------------------------------------------------------------- iter_fields and strings


def test_iter_fields_gives_absolute_positions_for_every_wire_type() -> None:
    message = b"\x08\x96\x01" + b"\x11" + bytes(range(8)) + b"\x1a\x02hi" + b"\x25" + b"\x01\x02\x03\x04"
    data = b"\xee\xee" + message + b"\xee"
    fields = list(iter_fields(view(data), 2, 2 + len(message)))
    assert fields == [(0x08, 2, 3, 5, 150), (0x11, 5, 6, 14, 0), (0x1A, 14, 16, 18, 0), (0x25, 18, 19, 23, 0)]


def test_field_spans_gives_the_payloads_of_the_keys_asked_for_in_order() -> None:
    message = b"\x0a\x01a" + b"\x08\x05" + b"\x62\x02bc" + b"\x0a\x00" + b"\x6a\x01d"
    data = b"\xee" + message
    spans = field_spans(view(data), 1, len(data), frozenset({0x0A, 0x6A}))
    assert [data[start:stop] for start, stop in spans] == [b"a", b"", b"d"]
    assert refused(lambda: field_spans(view(data), 1, len(data) - 1, frozenset({0x0A}))).offset == len(data) - 3


def test_iter_fields_accepts_the_largest_field_number_and_refuses_a_33_bit_key() -> None:
    largest = varint((1 << 29) - 1 << 3 | VARINT) + b"\x01"
    assert [(k, at) for k, at, *_ in iter_fields(view(largest), 0, len(largest))] == [(((1 << 29) - 1) << 3, 0)]
    too_big = b"\x01\x80\x80\x80\x80\x10\x00"
    assert refused(lambda: list(iter_fields(view(too_big), 1, len(too_big)))).offset == 1


@pytest.mark.parametrize("bad_key", [b"\x00", b"\x07", b"\x80\x00", b"\x0b", b"\x0c", b"\x0e", b"\x0f"])
def test_field_zero_and_wire_types_3_4_6_7_are_refused_at_their_key(bad_key: bytes) -> None:
    data = b"\x08\x01" + bad_key + b"\x00\x00"
    assert refused(lambda: list(iter_fields(view(data), 0, len(data)))).offset == 2


@pytest.mark.parametrize(
    ("message", "offset"),
    [
        (b"\x08\x01\x12\x05", 2),  # a length: refused at the field's key
        (b"\x08\x01\x08\x80", 3),  # a varint value: refused where the varint starts
        (b"\x08\x01\x15\x00", 2),  # a fixed32
        (b"\x08\x01\x09\x00", 2),  # a fixed64
        (b"\x08\x01\x80\x80", 2),  # a key
    ],
)
def test_iter_fields_never_reads_past_the_message_end(message: bytes, offset: int) -> None:
    """The message is data[0:4]; its last field would be complete in the whole buffer."""
    data = message + b"\x01abcdefgh"
    assert refused(lambda: list(iter_fields(view(data), 0, 4))).offset == offset


def test_a_length_is_checked_before_any_slice() -> None:
    data = b"\x0a" + varint(1 << 63) + b"xyz"
    failure = refused(lambda: list(iter_fields(view(data), 0, len(data))))
    assert failure.offset == 0
    assert "exceeds" in failure.message


def test_read_string_decodes_utf8_and_refuses_invalid_bytes_at_the_key() -> None:
    text = "Ünïcødé 名前 🙂".encode()
    data = b"\x0a" + bytes([len(text)]) + text + b"\x12\x02\xc3\x28"
    assert read_string(view(data), 2, 2 + len(text), 0, "name") == "Ünïcødé 名前 🙂"
    failure = refused(lambda: read_string(view(data), len(data) - 2, len(data), len(data) - 4, "input", 3))
    assert failure.offset == len(data) - 4
    assert failure.segments == ["input[3]"]


def test_string_fields_accept_any_valid_utf8_and_bytes_fields_are_not_decoded() -> None:
    name = "Ünïcødé 名前 🙂\u0000"
    imported = load(with_attribute(attribute(name, 3, fld("s", 4, b"\xff\xfe"))))
    assert (first_attribute(imported).name, first_attribute(imported).value) == (name, b"\xff\xfe")
    strings = tensor("W", STRING, (2,), rep("string_data", 6, b"\xff"), rep("string_data", 6, b"\xc3\x28"))
    assert initializer(load(with_initializer(strings))).strings == [b"\xff", b"\xc3\x28"]


# --------------------------------------------------------------------------- repeated scalars, packed and not


def test_attribute_ints_mixed_packed_and_unpacked_keep_file_order() -> None:
    attr = attribute(
        "pads",
        None,  # type inferred from the ints present
        rep("ints", 8, 1),
        packed("ints", 8, [2, 3]),
        rep("ints", 8, b"\x84\x80\x00", wire=VARINT),  # 4, overlong
        packed("ints", 8, [-1, 1 << 40]),
        rep("ints", 8, 6),
    )
    imported = load(with_attribute(attr))
    assert first_attribute(imported).type == AttributeType.INTS
    assert first_attribute(imported).value == [1, 2, 3, 4, -1, 1 << 40, 6]


def test_attribute_floats_mixed_packed_and_unpacked_keep_file_order() -> None:
    attr = attribute(
        "scales",
        None,
        rep("floats", 7, 0.5, wire=FIXED32),
        rep("floats", 7, struct.pack("<2f", 1.5, 2.5)),
        rep("floats", 7, -4.0, wire=FIXED32),
    )
    assert first_attribute(load(with_attribute(attr))).float_values == [0.5, 1.5, 2.5, -4.0]


def test_dims_and_int64_data_mixed_packed_and_unpacked_over_the_bulk_threshold() -> None:
    values = [(v * 0x9E3779B97F4A7C15) % (1 << 64) for v in range(80)]  # mostly 9- and 10-byte varints
    data_fields: list[Item] = [rep("int64_data", 7, v) for v in values[:30]]
    data_fields.append(packed("int64_data", 7, values[30:70]))  # > 64 bytes: the numpy decoder
    data_fields += [rep("int64_data", 7, v) for v in values[70:]]
    weights = tensor("W", INT64, (2,), packed("dims", 1, [4, 2]), rep("dims", 1, 5), *data_fields)
    loaded = initializer(load(with_initializer(weights)))
    assert loaded.dims == (2, 4, 2, 5)
    assert loaded.to_numpy().reshape(-1).tolist() == [as_int64(v) for v in values]


def test_float_data_mixed_packed_and_unpacked() -> None:
    weights = tensor(
        "W",
        FLOAT,
        (2, 3),
        rep("float_data", 4, 1.0, wire=FIXED32),
        rep("float_data", 4, struct.pack("<4f", 2, 3, 4, 5)),
        rep("float_data", 4, 6.0, wire=FIXED32),
    )
    assert initializer(load(with_initializer(weights))).to_numpy().reshape(-1).tolist() == [1, 2, 3, 4, 5, 6]


# --------------------------------------------------------------------------- singular fields: the last one wins


def test_last_graph_name_wins() -> None:
    assert load(add_model(fld("name", 2, "second"))).graph.name == "second"


def test_last_ir_version_wins() -> None:
    assert load(model(add_graph(), fld("ir_version", 1, 9), ir_version=2)).ir_version == 9


@pytest.mark.parametrize("tensor_last", [False, True])
def test_last_member_of_the_type_oneof_wins(tensor_last: bool) -> None:
    as_tensor = tensor_type(FLOAT, (2, 3)).items
    as_sequence = sequence_type(tensor_type(FLOAT, None)).items
    type_proto = Msg(*as_sequence, *as_tensor) if tensor_last else Msg(*as_tensor, *as_sequence)
    imported = load(model(graph([node("Identity", ["S"], ["Y"])], [value_info("S", type_proto)], [value_info("Y")])))
    member = imported.graph.inputs[0].type
    assert isinstance(member, TensorType if tensor_last else SequenceType)


def test_singular_messages_are_replaced_not_merged() -> None:
    first = graph(
        [node("Add", ["X", "W"], ["Y"]), node("Identity", ["Y"], ["Z"])],
        [float_info("X")],
        [float_info("Z")],
        initializers=[float_weights("W")],
        name="first",
    )
    imported = load(model(first, fld("graph", 7, add_graph(name="second"))))
    assert (imported.graph.name, len(imported.graph.nodes)) == ("second", 1)
    two_shapes = Msg(fld("tensor_type", 1, Msg(fld("elem_type", 1, FLOAT), fld("shape", 2, shape([1, 2])), fld("shape", 2, shape([5])))))
    input_type = load(add_model(inputs=[value_info("X", two_shapes)])).graph.inputs[0].type
    assert isinstance(input_type, TensorType)
    assert input_type.shape == (5,)


def test_last_tensor_of_an_attribute_wins() -> None:
    attr = tensor_attr("value", float_weights("a", (1,))).plus(fld("t", 5, float_weights("b", (2, 3))))
    value = first_attribute(load(with_node_attribute("Constant", attr))).value
    assert isinstance(value, Tensor)
    assert (value.name, value.dims) == ("b", (2, 3))


# --------------------------------------------------------------------------- skipped fields


def described(imported: OnnxModel) -> object:
    """What a user reads back from a model, without byte offsets."""
    nodes = [
        (
            n.op_type,
            n.name,
            n.domain,
            n.proto.input,
            n.proto.output,
            [(a.name, a.type, a.value if not isinstance(a.value, Tensor) else a.value.tobytes()) for a in n.proto.attribute],
        )
        for n in imported.graph.nodes
    ]
    values = [(v.name, describe_type(v.type)) for v in (*imported.graph.inputs, *imported.graph.outputs)]
    tensors = [(t.name, t.data_type, t.dims, t.tobytes()) for t in imported.graph.initializers()]
    return (imported.ir_version, imported.opsets, imported.graph.name, nodes, values, tensors)


def sample_model(extra: Callable[[str], list[Item]]) -> Msg:
    """Two nodes, an attribute, an initializer and a shaped input, with `extra(level)` appended to each message."""
    x_shape = Msg(rep("dim", 1, dim(2).plus(*extra("dim"))), rep("dim", 1, dim("N").plus(*extra("dim"))), *extra("shape"))
    x = value_info("X", tensor_type(FLOAT, x_shape, *extra("tensor_type")).plus(*extra("type")), *extra("value_info"))
    alpha = attribute("alpha", A_FLOAT, fld("f", 2, 0.25, wire=FIXED32), *extra("attribute"))
    nodes = [
        node("Add", ["X", "W"], ["S"], *extra("node"), name="add"),
        node("LeakyRelu", ["S"], ["Y"], *extra("node"), attributes=[alpha]),
    ]
    weights = tensor("W", FLOAT, (2, 3), raw_data(bytes(range(24))), *extra("tensor"))
    body = graph(nodes, [x], [float_info("Y")], *extra("graph"), initializers=[weights])
    return model(body, *extra("model"), opsets=[opset("", 17, *extra("opset"))])


def unknown_fields(level: str) -> list[Item]:
    """Unknown field numbers with every wire type a reader accepts (including the largest field number)."""
    numbers = (1000, (1 << 29) - 1)
    return [
        item
        for n in numbers
        for item in (fld(None, n, 7), fld(None, n, 1.5, wire=FIXED64), fld(None, n, b"skip me"), fld(None, n, 2.5, wire=FIXED32))
    ]


WRONG_WIRE: dict[str, list[Item]] = {
    "model": [fld(None, 1, 3.0, wire=FIXED64), fld(None, 7, 5), fld(None, 8, 1), fld(None, 2, 9)],
    "opset": [fld(None, 2, b"\x05"), fld(None, 1, 5)],
    "graph": [fld(None, 2, 1.0, wire=FIXED32), fld(None, 1, 3), fld(None, 11, 3), fld(None, 5, 1)],
    "node": [fld(None, 4, 9), fld(None, 1, 5), fld(None, 2, 5), fld(None, 5, 5), fld(None, 3, 1.0, wire=FIXED64)],
    "attribute": [fld(None, 2, 7), fld(None, 20, b"\x02"), fld(None, 1, 3), fld(None, 8, 1.0, wire=FIXED32)],
    "tensor": [fld(None, 1, 1.0, wire=FIXED64), fld(None, 2, b"\x07"), fld(None, 9, 3), fld(None, 8, 4)],
    "value_info": [fld(None, 1, 4), fld(None, 2, 4)],
    "type": [fld(None, 1, 4), fld(None, 4, 4)],
    "tensor_type": [fld(None, 1, b"\x01"), fld(None, 2, 7)],
    "shape": [fld(None, 1, 5)],
    "dim": [fld(None, 1, b"\x05"), fld(None, 2, 9)],
}


def test_sample_model_reads_as_written() -> None:
    imported = load(sample_model(lambda level: []))
    assert [n.op_type for n in imported.graph.nodes] == ["Add", "LeakyRelu"]
    assert describe_type(imported.graph.inputs[0].type) == {"kind": "tensor", "elem_type": "FLOAT", "shape": [2, "N"]}
    assert imported.graph.nodes[1].proto.attribute[0].float_value == 0.25
    assert initializer(imported).tobytes() == bytes(range(24))


def test_unknown_fields_are_skipped_at_every_level() -> None:
    assert described(load(sample_model(unknown_fields))) == described(load(sample_model(lambda level: [])))


def test_known_fields_with_the_wrong_wire_type_are_skipped_at_every_level() -> None:
    noisy = sample_model(lambda level: WRONG_WIRE[level])
    assert described(load(noisy)) == described(load(sample_model(lambda level: [])))


def test_overlong_key_is_accepted() -> None:
    imported = load(model(add_graph(), Raw(b"\x88\x80\x00" + varint(9)), ir_version=None))
    assert imported.ir_version == 9


# --------------------------------------------------------------------------- the bulk decoder


def encode_run(values: list[int], padding: list[int]) -> bytes:
    """Varints of `values`, each made overlong by up to its `padding` bytes (at most 10 bytes in all)."""
    out = bytearray()
    for value, wanted in zip(values, padding, strict=True):
        encoded = bytearray(varint(value))
        pad = min(wanted, 10 - len(encoded))
        if pad:
            encoded[-1] |= 0x80
            encoded += b"\x80" * (pad - 1) + b"\x00"
        out += encoded
    return bytes(out)


RUNS = st.lists(st.tuples(st.integers(0, MAX_U64), st.integers(0, 3)), max_size=150)


def decode_both(data: bytes, start: int) -> tuple[object, object]:
    """The outcome of both decoders on data[start:]: the values, or the refusal's offset."""
    outcomes: list[object] = []
    for decoder in (varints_to_list, varints_to_array):
        try:
            outcomes.append(("values", [int(v) for v in decoder(view(data), start, len(data))]))
        except ReadFailure as failure:
            outcomes.append(("refused", failure.offset))
    return outcomes[0], outcomes[1]


@settings(deadline=None)
@given(RUNS, st.binary(max_size=3))
def test_bulk_and_scalar_decoders_agree_on_valid_runs(run: list[tuple[int, int]], prefix: bytes) -> None:
    values = [v for v, _ in run]
    data = prefix + encode_run(values, [p for _, p in run])
    assert decode_both(data, len(prefix)) == (("values", values), ("values", values))


@settings(deadline=None)
@given(st.lists(st.integers(0, MAX_U64), min_size=65, max_size=200))
def test_bulk_decoder_on_runs_longer_than_64_bytes(values: list[int]) -> None:
    data = encode_run(values, [0] * len(values))
    decoded = varints_to_array(view(data), 0, len(data))
    assert decoded.dtype == np.uint64
    assert decoded.tolist() == values


@settings(deadline=None)
@given(st.binary(max_size=200), st.binary(max_size=3))
def test_bulk_and_scalar_decoders_agree_on_any_bytes(data: bytes, prefix: bytes) -> None:
    """Valid or not, both decoders agree with the reference: the same values, or a refusal at the same offset."""
    expected = reference_decode(prefix + data, len(prefix))
    assert decode_both(prefix + data, len(prefix)) == (expected, expected)


def reference_decode(data: bytes, start: int) -> tuple[str, object]:
    """docs/import-rules.md §1 spelled out: the values of data[start:], or where its first bad varint starts."""
    values = []
    pos = start
    while pos < len(data):
        end = pos
        while end < len(data) and data[end] >= 0x80:
            end += 1
        size = end - pos + 1
        if end == len(data) or size > 10 or (size == 10 and data[end] > 1):
            return ("refused", pos)
        values.append(sum((byte & 0x7F) << (7 * i) for i, byte in enumerate(data[pos : end + 1])))
        pos = end + 1
    return ("values", values)


VALID_VARINT = st.integers(0, MAX_U64).map(varint)
OVERFLOWING = st.integers(2, 0x7F).map(lambda tenth: b"\xff" * 9 + bytes([tenth]))
TOO_LONG = st.integers(11, 14).map(lambda size: b"\x80" * (size - 1) + b"\x00")
CUT_OFF = st.integers(1, 9).map(lambda size: b"\x80" * size)
RUN_OF_ONES = st.integers(1, 70).map(lambda size: b"\x01" * size)


@settings(deadline=None)
@example([b"\xff" * 9 + b"\x02", b"\x01" * 60], b"\x80")  # overflow first, cut off at the end
@example([b"\xff" * 9 + b"\x02", b"\x01" * 60, b"\x80" * 11 + b"\x00"], b"")  # overflow first, too long later
@given(st.lists(st.one_of(VALID_VARINT, RUN_OF_ONES, OVERFLOWING, TOO_LONG), max_size=40), st.sampled_from([b""]) | CUT_OFF)
def test_both_decoders_refuse_at_the_first_bad_varint(chunks: list[bytes], tail: bytes) -> None:
    """Bad varints among good ones, under and over the bulk threshold: both decoders
    give the values, or refuse where the first bad varint starts."""
    data = b"".join(chunks) + tail
    expected = reference_decode(data, 0)
    assert decode_both(data, 0) == (expected, expected)


@pytest.mark.parametrize(
    ("run", "offset"),
    [
        (b"\x01" * 70 + b"\x80", 70),  # cut off at the end
        (b"\x01" * 60 + b"\xff" * 9 + b"\x02", 60),  # tenth byte 2
        (b"\x01" * 60 + b"\x80" * 11 + b"\x00", 60),  # eleven bytes
    ],
)
def test_both_decoders_refuse_a_bad_run_at_the_bad_varint(run: bytes, offset: int) -> None:
    assert decode_both(b"\x00\x00" + run, 2) == (("refused", offset + 2), ("refused", offset + 2))


def test_bulk_decoding_across_chunk_boundaries_agrees_with_the_scalar_decoder() -> None:
    """More bytes than one window of the bulk decoder, varints of every length."""
    rng = np.random.default_rng(7)
    raw, shifts = rng.integers(0, 2**63, size=300_000), rng.integers(0, 63, size=300_000)
    values = [int(v) >> int(shift) for v, shift in zip(raw, shifts, strict=True)]
    encoded = b"".join(varint(v) for v in values)
    view = encoded
    assert varints_to_array(view, 0, len(encoded)).tolist() == values
    assert count_varints(view, 0, len(encoded)) == len(values)
    check_varints(view, 0, len(encoded))
