# Reference writer of the structural dump `onnx-dump/1` (docs/dump-format.md).
#
# This module owns the ONNX-side half of the importer check (docs/import-rules.md §8):
# it reads a model with the `onnx` package -- `onnx.load` and the generated
# message fields only (no numpy_helper, helper or checker) -- and renders the
# canonical JSON dump. Tensor values are hashed in the raw layout of
# TensorProto.raw_data, converting typed fields by docs/import-rules.md §3,
# independently of onnx's own conversion code.
#
# Python API:
#   dump_model(path) -> str              the dump text (JSON + "\n")
#   model_doc(model) -> dict             the dump document of a loaded ModelProto
#   render(doc) -> str                   the canonical rendering
#   tensor_sha256(t) -> str              hex SHA-256 of a TensorProto's values
#   load_tensor_file(path) -> TensorProto   parse a TensorProto file
#   tensor_file_sha256(path) -> str      tensor_sha256 of a TensorProto file
#   DumpError                            raised for models onnx cannot load or
#                                        that are invalid by the import rules
#                                        (docs/import-rules.md)
#
# Command line (exit 0 on success, 2 when a file is refused, message on stderr):
#   onnx_dump.py MODEL                   print the dump of MODEL
#   onnx_dump.py --tensor FILE.pb        print the SHA-256 of a TensorProto file
#   onnx_dump.py --batch LIST --out-dir DIR
#       LIST holds one model path per line (blank lines are skipped; relative
#       paths are relative to LIST's directory). Entry number i (0-based, over
#       the non-blank lines) is written to DIR/<i>.json, or, when refused, its
#       message to DIR/<i>.err (stale <i>.json/<i>.err are removed first).
#       stdout gets one line per entry: "<i>\tok\t<path>" or "<i>\terror\t<path>".
#       Exit 2 if any entry was refused, else 0.
#   onnx_dump.py --tensor-batch LIST
#       For each TensorProto file in LIST (same path rules) print
#       "<sha256>  <path>" (path as written in LIST) on stdout; refused files go
#       to stderr as "<path>: <message>". Exit 2 if any was refused, else 0.
from __future__ import annotations

import argparse
import hashlib
import json
import os
import struct
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import onnx

FORMAT = "onnx-dump/1"

Json = dict[str, Any]


class DumpError(Exception):
    """The file cannot be loaded or is not a valid model by the import rules (docs/import-rules.md)."""


# --------------------------------------------------------------------------
# Tensors
# --------------------------------------------------------------------------

# Bits per element of each TensorProto.DataType (docs/import-rules.md §3). STRING (8)
# has no fixed width and is handled separately.
_BITS: dict[int, int] = {
    1: 32,  # FLOAT
    2: 8,  # UINT8
    3: 8,  # INT8
    4: 16,  # UINT16
    5: 16,  # INT16
    6: 32,  # INT32
    7: 64,  # INT64
    9: 8,  # BOOL
    10: 16,  # FLOAT16
    11: 64,  # DOUBLE
    12: 32,  # UINT32
    13: 64,  # UINT64
    14: 64,  # COMPLEX64
    15: 128,  # COMPLEX128
    16: 16,  # BFLOAT16
    17: 8,  # FLOAT8E4M3FN
    18: 8,  # FLOAT8E4M3FNUZ
    19: 8,  # FLOAT8E5M2
    20: 8,  # FLOAT8E5M2FNUZ
    21: 4,  # UINT4
    22: 4,  # INT4
    23: 4,  # FLOAT4E2M1
    24: 8,  # FLOAT8E8M0
    25: 2,  # UINT2
    26: 2,  # INT2
    27: 6,  # FLOAT6E2M3
    28: 6,  # FLOAT6E3M2
}
_STRING = 8
_BOOL = 9

_TYPED_FIELDS = (
    "float_data",
    "int32_data",
    "string_data",
    "int64_data",
    "double_data",
    "uint64_data",
)


def _typed_field_for(data_type: int) -> str:
    if data_type in (1, 14):
        return "float_data"
    if data_type in (11, 15):
        return "double_data"
    if data_type == 7:
        return "int64_data"
    if data_type in (12, 13):
        return "uint64_data"
    if data_type == _STRING:
        return "string_data"
    return "int32_data"


MAX_ELEMENTS = 1 << 60
MAX_TENSOR_BYTES = (1 << 31) - 1


def _element_count(t: onnx.TensorProto) -> int:
    count = 1
    for d in t.dims:
        if d < 0:
            raise DumpError(f"tensor {t.name!r}: negative dimension {d}")
        count *= d
        if count > MAX_ELEMENTS:
            raise DumpError(f"tensor {t.name!r}: more than 2^60 elements")
    return count


def _wire_fields(data: bytes) -> Iterable[tuple[int, int, bytes]]:
    """Top-level (field, wire type, payload) of a serialized message.

    Used only to recover the exact bits of 32-bit floats: reading a float field
    through Python widens it to a double, and NaN payloads do not reliably
    survive the round trip back to 32 bits.
    """
    pos = 0
    n = len(data)

    def varint() -> int:
        nonlocal pos
        result = 0
        shift = 0
        while True:
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result
            shift += 7

    while pos < n:
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            start = pos
            varint()
            yield field, wire, data[start:pos]
        elif wire == 1:
            yield field, wire, data[pos : pos + 8]
            pos += 8
        elif wire == 2:
            length = varint()
            yield field, wire, data[pos : pos + length]
            pos += length
        elif wire == 5:
            yield field, wire, data[pos : pos + 4]
            pos += 4
        else:  # pragma: no cover - protobuf never serializes groups here
            raise DumpError(f"unexpected wire type {wire} in re-serialized message")


def _float_field_bits(message_bytes: bytes, field: int) -> bytes:
    """The little-endian 32-bit patterns of float field `field`, in order."""
    out = bytearray()
    for f, wire, payload in _wire_fields(message_bytes):
        if f == field and wire in (2, 5):
            out += payload
    return bytes(out)


def _floats_to_bytes(values: Sequence[float]) -> bytes | None:
    """'<f' bytes of float values, or None when a NaN makes the bits uncertain."""
    with np.errstate(all="ignore"):  # a signalling NaN may warn on conversion
        arr = np.array(values, dtype=np.float64)
    if np.isnan(arr).any():
        return None
    return arr.astype("<f4").tobytes()


def _pack6(values: Sequence[int]) -> bytes:
    """Pack 6-bit elements into a little-endian bit stream, lowest bit first."""
    out = bytearray()
    for i in range(0, len(values), 4):
        group = [v & 0x3F for v in values[i : i + 4]]
        acc = 0
        for k, v in enumerate(group):
            acc |= v << (6 * k)
        out += acc.to_bytes((6 * len(group) + 7) // 8, "little")
    return bytes(out)


def _typed_bytes(t: onnx.TensorProto, data_type: int, field: str) -> bytes:
    """Convert the typed field `field` of `t` to the raw layout."""
    if field == "float_data":
        raw = _floats_to_bytes(t.float_data)
        if raw is None:
            raw = _float_field_bits(t.SerializeToString(), 4)
        return raw
    if field == "double_data":
        return np.array(t.double_data, dtype="<f8").tobytes()
    if field == "int64_data":
        return np.array(t.int64_data, dtype="<i8").tobytes()
    if field == "uint64_data":
        u64 = np.array(t.uint64_data, dtype=np.uint64)
        if data_type == 12:  # UINT32: the low 32 bits
            return (u64 & np.uint64(0xFFFFFFFF)).astype("<u4").tobytes()
        return u64.astype("<u8").tobytes()
    # int32_data
    i32 = np.array(t.int32_data, dtype=np.int64)
    bits = _BITS[data_type]
    if data_type == 6:  # INT32
        return i32.astype("<i4").tobytes()
    if bits == 16:
        return (i32 & 0xFFFF).astype("<u2").tobytes()
    if data_type == _BOOL:
        return bytes((i32 != 0).astype("u1").tobytes())
    if bits in (8, 4, 2):  # one element (8-bit) or one packed byte (4/2-bit)
        return (i32 & 0xFF).astype("u1").tobytes()
    if bits == 6:
        return _pack6([int(v) for v in i32])
    raise DumpError(f"int32_data does not serve data type {data_type}")


def tensor_sha256(t: onnx.TensorProto) -> str:
    """Lowercase hex SHA-256 of the tensor's values in the raw layout.

    Raises DumpError when the tensor is invalid by docs/import-rules.md §3 (unknown
    type, negative dims, unsupported size, segment, mixed or wrong sources,
    wrong byte length or string count, unresolved external data).
    """
    name = t.name
    data_type = t.data_type
    if data_type != _STRING and data_type not in _BITS:
        raise DumpError(f"tensor {name!r}: unknown data type {data_type}")
    count = _element_count(t)
    if t.HasField("segment"):
        raise DumpError(f"tensor {name!r}: segments are not supported")
    if t.data_location == onnx.TensorProto.EXTERNAL:
        raise DumpError(f"tensor {name!r}: external data was not loaded")

    present = [f for f in _TYPED_FIELDS if len(getattr(t, f)) > 0]
    expected_field = _typed_field_for(data_type)

    if data_type == _STRING:
        if t.HasField("raw_data"):
            raise DumpError(f"tensor {name!r}: raw_data in a STRING tensor")
        wrong = [f for f in present if f != "string_data"]
        if wrong:
            raise DumpError(f"tensor {name!r}: {wrong[0]} in a STRING tensor")
        strings = t.string_data
        if len(strings) != count:
            raise DumpError(f"tensor {name!r}: {len(strings)} strings for {count} elements")
        h = hashlib.sha256()
        for s in strings:
            h.update(len(s).to_bytes(8, "little"))
            h.update(s)
        return h.hexdigest()

    expected_len = (count * _BITS[data_type] + 7) // 8
    if expected_len > MAX_TENSOR_BYTES:
        raise DumpError(f"tensor {name!r}: {expected_len} bytes is unsupported")

    if t.HasField("raw_data"):
        if present:
            raise DumpError(f"tensor {name!r}: both raw_data and {present[0]}")
        data = t.raw_data
    else:
        wrong = [f for f in present if f != expected_field]
        if wrong:
            raise DumpError(f"tensor {name!r}: {wrong[0]} does not serve data type {data_type}")
        data = _typed_bytes(t, data_type, expected_field)

    if len(data) != expected_len:
        raise DumpError(f"tensor {name!r}: {len(data)} bytes of data, expected {expected_len}")
    return hashlib.sha256(data).hexdigest()


def _tensor(t: onnx.TensorProto) -> Json:
    return {
        "name": t.name,
        "data_type": t.data_type,
        "dims": [int(d) for d in t.dims],
        "sha256": tensor_sha256(t),
    }


def _sparse(s: onnx.SparseTensorProto) -> Json:
    return {
        "dims": [int(d) for d in s.dims],
        "values": _tensor(s.values),
        "indices": _tensor(s.indices),
    }


# --------------------------------------------------------------------------
# Types and values
# --------------------------------------------------------------------------


def _shape(tensor_type: Any) -> list[int | str | None] | None:
    if not tensor_type.HasField("shape"):
        return None
    dims: list[int | str | None] = []
    for d in tensor_type.shape.dim:
        which = d.WhichOneof("value")
        if which == "dim_value":
            dims.append(int(d.dim_value))
        elif which == "dim_param":
            dims.append(str(d.dim_param))
        else:
            dims.append(None)
    return dims


def _type(tp: onnx.TypeProto) -> Json | None:
    which = tp.WhichOneof("value")
    if which is None:
        return None
    if which == "tensor_type":
        tt = tp.tensor_type
        return {"tensor": {"elem_type": tt.elem_type, "shape": _shape(tt)}}
    if which == "sparse_tensor_type":
        st = tp.sparse_tensor_type
        return {"sparse_tensor": {"elem_type": st.elem_type, "shape": _shape(st)}}
    if which == "sequence_type":
        seq = tp.sequence_type
        return {"sequence": _type(seq.elem_type) if seq.HasField("elem_type") else None}
    if which == "optional_type":
        opt = tp.optional_type
        return {"optional": _type(opt.elem_type) if opt.HasField("elem_type") else None}
    if which == "map_type":
        m = tp.map_type
        return {
            "map": {
                "key_type": m.key_type,
                "value_type": (_type(m.value_type) if m.HasField("value_type") else None),
            }
        }
    if which == "opaque_type":
        o = tp.opaque_type
        return {"opaque": {"domain": o.domain, "name": o.name}}
    raise DumpError(f"unknown TypeProto member {which}")


def _value(v: onnx.ValueInfoProto) -> Json:
    return {"name": v.name, "type": _type(v.type) if v.HasField("type") else None}


# --------------------------------------------------------------------------
# Attributes
# --------------------------------------------------------------------------

_ATTR_TYPE_NAMES: dict[int, str] = {
    1: "FLOAT",
    2: "INT",
    3: "STRING",
    4: "TENSOR",
    5: "GRAPH",
    11: "SPARSE_TENSOR",
    13: "TYPE_PROTO",
    6: "FLOATS",
    7: "INTS",
    8: "STRINGS",
    9: "TENSORS",
    10: "GRAPHS",
    12: "SPARSE_TENSORS",
    14: "TYPE_PROTOS",
}

# Inference order of docs/import-rules.md §2: singular fields, then repeated ones.
_SINGULAR_INFERENCE = (
    ("f", "FLOAT"),
    ("i", "INT"),
    ("s", "STRING"),
    ("t", "TENSOR"),
    ("g", "GRAPH"),
    ("sparse_tensor", "SPARSE_TENSOR"),
    ("tp", "TYPE_PROTO"),
)
_REPEATED_INFERENCE = (
    ("floats", "FLOATS"),
    ("ints", "INTS"),
    ("strings", "STRINGS"),
    ("tensors", "TENSORS"),
    ("graphs", "GRAPHS"),
    ("sparse_tensors", "SPARSE_TENSORS"),
    ("type_protos", "TYPE_PROTOS"),
)

# AttributeProto field numbers of f and floats (for exact float bits).
_ATTR_F_FIELD = 2
_ATTR_FLOATS_FIELD = 7


def _attr_type_name(a: onnx.AttributeProto) -> str:
    if a.type != 0:
        name = _ATTR_TYPE_NAMES.get(a.type)
        if name is None:
            raise DumpError(f"attribute {a.name!r}: unknown type {a.type}")
        return name
    if a.ref_attr_name:
        return "UNDEFINED"
    for field, name in _SINGULAR_INFERENCE:
        if a.HasField(field):
            return name
    for field, name in _REPEATED_INFERENCE:
        if len(getattr(a, field)) > 0:
            return name
    raise DumpError(f"attribute {a.name!r} has neither a type nor a value")


def _float_hex(bits: bytes) -> str:
    (value,) = struct.unpack("<I", bits)
    return f"0x{value:08x}"


def _bytes_value(b: bytes) -> str | Json:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": b.hex()}


def _attr_floats_bits(a: onnx.AttributeProto, single: bool) -> list[bytes]:
    if single:
        values: Sequence[float] = [a.f]
    else:
        values = a.floats
    raw = _floats_to_bytes(values)
    if raw is None:
        raw = _float_field_bits(a.SerializeToString(), _ATTR_F_FIELD if single else _ATTR_FLOATS_FIELD)
        if single:
            raw = raw[-4:]  # repeated occurrences of a singular field: last wins
    return [raw[k : k + 4] for k in range(0, len(raw), 4)]


def _attr_value(a: onnx.AttributeProto, type_name: str) -> Any:
    if type_name == "FLOAT":
        return _float_hex(_attr_floats_bits(a, True)[0])
    if type_name == "INT":
        return int(a.i)
    if type_name == "STRING":
        return _bytes_value(a.s)
    if type_name in ("TENSOR", "GRAPH", "SPARSE_TENSOR", "TYPE_PROTO"):
        field = {
            "TENSOR": "t",
            "GRAPH": "g",
            "SPARSE_TENSOR": "sparse_tensor",
            "TYPE_PROTO": "tp",
        }[type_name]
        if not a.HasField(field):
            raise DumpError(f"attribute {a.name!r} of type {type_name} has no {field}")
        if type_name == "TENSOR":
            return _tensor(a.t)
        if type_name == "GRAPH":
            return _graph(a.g)
        if type_name == "SPARSE_TENSOR":
            return _sparse(a.sparse_tensor)
        return _type(a.tp)
    if type_name == "FLOATS":
        return [_float_hex(b) for b in _attr_floats_bits(a, False)]
    if type_name == "INTS":
        return [int(v) for v in a.ints]
    if type_name == "STRINGS":
        return [_bytes_value(s) for s in a.strings]
    if type_name == "TENSORS":
        return [_tensor(t) for t in a.tensors]
    if type_name == "GRAPHS":
        return [_graph(g) for g in a.graphs]
    if type_name == "SPARSE_TENSORS":
        return [_sparse(s) for s in a.sparse_tensors]
    if type_name == "TYPE_PROTOS":
        return [_type(tp) for tp in a.type_protos]
    raise DumpError(f"attribute {a.name!r}: unhandled type {type_name}")


def _attr(a: onnx.AttributeProto) -> Json:
    type_name = _attr_type_name(a)
    value = None if a.ref_attr_name else _attr_value(a, type_name)
    return {
        "name": a.name,
        "type": type_name,
        "ref_attr_name": a.ref_attr_name,
        "value": value,
    }


# --------------------------------------------------------------------------
# Nodes, graphs, functions, model
# --------------------------------------------------------------------------


def _opset(o: onnx.OperatorSetIdProto) -> Json:
    return {"domain": o.domain, "version": int(o.version)}


def _node(n: onnx.NodeProto) -> Json:
    return {
        "name": n.name,
        "op_type": n.op_type,
        "domain": n.domain,
        "overload": n.overload,
        "doc_string": n.doc_string,
        "input": list(n.input),
        "output": list(n.output),
        "attribute": [_attr(a) for a in n.attribute],
    }


def _graph(g: onnx.GraphProto) -> Json:
    return {
        "name": g.name,
        "doc_string": g.doc_string,
        "input": [_value(v) for v in g.input],
        "output": [_value(v) for v in g.output],
        "value_info": [_value(v) for v in g.value_info],
        "initializer": [_tensor(t) for t in g.initializer],
        "sparse_initializer": [_sparse(s) for s in g.sparse_initializer],
        "node": [_node(n) for n in g.node],
    }


def _function(f: onnx.FunctionProto) -> Json:
    return {
        "name": f.name,
        "domain": f.domain,
        "overload": f.overload,
        "doc_string": f.doc_string,
        "input": list(f.input),
        "output": list(f.output),
        "attribute": list(f.attribute),
        "attribute_proto": [_attr(a) for a in f.attribute_proto],
        "opset_import": [_opset(o) for o in f.opset_import],
        "node": [_node(n) for n in f.node],
    }


MIN_IR_VERSION = 3


def model_doc(m: onnx.ModelProto) -> Json:
    """The dump document of a loaded model (external data already in raw_data)."""
    if not m.HasField("ir_version"):
        raise DumpError("model has no ir_version")
    if m.ir_version < MIN_IR_VERSION:
        raise DumpError(f"ir_version {m.ir_version} is below {MIN_IR_VERSION}")
    if not m.HasField("graph"):
        raise DumpError("model has no graph")
    return {
        "format": FORMAT,
        "ir_version": int(m.ir_version),
        "model_version": int(m.model_version),
        "producer_name": m.producer_name,
        "producer_version": m.producer_version,
        "domain": m.domain,
        "doc_string": m.doc_string,
        "opset_import": [_opset(o) for o in m.opset_import],
        "metadata_props": [{"key": p.key, "value": p.value} for p in m.metadata_props],
        "graph": _graph(m.graph),
        "functions": [_function(f) for f in m.functions],
    }


def _not_json(obj: object) -> Any:
    # upb hands back a proto2 `string` field that is not valid UTF-8 as bytes;
    # docs/import-rules.md §1 makes such a string an error.
    if isinstance(obj, bytes):
        raise DumpError(f"string field is not valid UTF-8: {obj!r}")
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")


def render(doc: Json) -> str:
    """The canonical rendering of a dump document."""
    text = json.dumps(doc, ensure_ascii=True, sort_keys=True, indent=1, default=_not_json)
    return text + "\n"


def _load_model(path: str) -> onnx.ModelProto:
    try:
        # format is explicit: onnx would otherwise pick a text format from the
        # file extension (.json, .txt, ...).
        return onnx.load(path, format="protobuf")
    except Exception as e:  # onnx raises many kinds; all mean "cannot load"
        raise DumpError(f"onnx cannot load the model: {type(e).__name__}: {e}") from e


def dump_model(path: str | os.PathLike[str]) -> str:
    """The `onnx-dump/1` text of the model file at `path`."""
    return render(model_doc(_load_model(os.fspath(path))))


def load_tensor_file(path: str | os.PathLike[str]) -> onnx.TensorProto:
    """Parse a serialized TensorProto file (no external data is resolved)."""
    t = onnx.TensorProto()
    try:
        with open(path, "rb") as f:
            t.ParseFromString(f.read())
    except Exception as e:
        raise DumpError(f"cannot parse TensorProto: {type(e).__name__}: {e}") from e
    return t


def tensor_file_sha256(path: str | os.PathLike[str]) -> str:
    """tensor_sha256 of the TensorProto file at `path`."""
    return tensor_sha256(load_tensor_file(path))


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------


def _read_list(list_file: str) -> list[tuple[str, str]]:
    """(as written, resolved) paths of a list file's non-blank lines."""
    base = os.path.dirname(os.path.abspath(list_file))
    out: list[tuple[str, str]] = []
    with open(list_file, encoding="utf-8") as f:
        for line in f:
            p = line.rstrip("\r\n")
            if not p.strip():
                continue
            out.append((p, os.path.join(base, p)))
    return out


def _batch(list_file: str, out_dir: str) -> int:
    os.makedirs(out_dir, exist_ok=True)
    failed = 0
    entries = _read_list(list_file)
    for i, (shown, path) in enumerate(entries):
        json_path = os.path.join(out_dir, f"{i}.json")
        err_path = os.path.join(out_dir, f"{i}.err")
        for stale in (json_path, err_path):
            if os.path.exists(stale):
                os.remove(stale)
        try:
            text = dump_model(path)
        except DumpError as e:
            failed += 1
            with open(err_path, "w", encoding="utf-8") as f:
                f.write(f"{e}\n")
            print(f"{i}\terror\t{shown}")
            continue
        with open(json_path, "w", encoding="ascii", newline="\n") as f:
            f.write(text)
        print(f"{i}\tok\t{shown}")
    print(f"dumped {len(entries) - failed} of {len(entries)}", file=sys.stderr)
    return 2 if failed else 0


def _tensor_batch(list_file: str) -> int:
    failed = 0
    for shown, path in _read_list(list_file):
        try:
            digest = tensor_file_sha256(path)
        except DumpError as e:
            failed += 1
            print(f"{shown}: {e}", file=sys.stderr)
            continue
        print(f"{digest}  {shown}")
    return 2 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Reference writer of the onnx-dump/1 structural dump.")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("model", nargs="?", help="model file to dump to stdout")
    mode.add_argument("--tensor", metavar="FILE", help="print a TensorProto's sha256")
    mode.add_argument("--batch", metavar="LIST", help="dump every model in LIST")
    mode.add_argument("--tensor-batch", metavar="LIST", help="sha256 of every TensorProto in LIST")
    parser.add_argument("--out-dir", metavar="DIR", help="output folder of --batch")
    args = parser.parse_args(argv)

    if args.batch is not None:
        if args.out_dir is None:
            parser.error("--batch needs --out-dir")
        return _batch(args.batch, args.out_dir)
    if args.out_dir is not None:
        parser.error("--out-dir only goes with --batch")
    if args.tensor_batch is not None:
        return _tensor_batch(args.tensor_batch)
    try:
        if args.tensor is not None:
            sys.stdout.write(tensor_file_sha256(args.tensor) + "\n")
        else:
            sys.stdout.write(dump_model(args.model))
    except DumpError as e:
        print(f"{args.tensor or args.model}: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
