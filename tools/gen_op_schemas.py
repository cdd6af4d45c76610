# Generator of the operator-schema table the importer's check reads
# (importer/op_schemas.json.gz, loaded by importer/op_schemas.py).
#
# This module owns the table's content and encoding. It reads every schema,
# with its full history, from the installed `onnx` package
# (onnx.defs.get_all_schemas_with_history) and writes one gzip-compressed
# JSON document (keys sorted, no whitespace, gzip mtime 0: the same onnx gives
# the same bytes):
#
#   {"format": "importer-op-schemas/1", "onnx_version": "1.23.2",
#    "domains": [[domain, min_version, max_version, strict]],
#    "experimental_ops": [op_type],
#    "elem_types": [[code, name]],          TensorProto.DataType -> "float", ...
#    "type_sets": [[type_str]],             every distinct allowed-type list, sorted
#    "schema_layout", "parameter_layout", "attribute_layout": the column names
#    "schemas": [row]}                      sorted by (domain, name, since_version)
#
# A schema row holds, in the order of "schema_layout": domain, name,
# since_version, deprecated, min_input, max_input, min_output, max_output,
# input_counts and output_counts (the counts allowed within [min, max] when
# the schema allows only some of them, else null), unchecked_attributes (the
# schema accepts attributes it does not declare), inputs and outputs (one row
# per formal parameter: name, option 0 Single / 1 Optional / 2 Variadic,
# is_homogeneous, min_arity, type_str, types: index into type_sets),
# attributes (name, AttributeProto type code, required; sorted by name) and
# type_constraints ([type_param_str, index into type_sets], as the schema
# spells them). A formal parameter's `types` are the ones the checker
# compares with (FormalParameter.types: its constraint's allowed types, or the
# one type its type_str spells, in the canonical spelling: "map(int64,
# tensor(float))" where ai.onnx.ml's constraints write "map(int64, float)").
#
# What onnx.defs does not say is taken from the checker itself, by probing
# onnx.checker's check_node with synthetic nodes: which counts inside
# [min, max] are refused (OpSchema::NumInputs/NumOutputs sets, e.g.
# BatchNormalization's {1, 3} outputs), which schemas accept undeclared
# attributes (AllowUncheckedAttributes, e.g. LayerNormalization), which
# domains refuse an op they do not know ("strict": the others are custom
# domains the checker leaves unchecked), and which default-domain ops the
# checker skips as experimental (the list in onnx/checker.cc, confirmed here).
#
# Python API: build_table() -> dict, encode(table) -> bytes (the JSON, before
# gzip), compress(json_bytes) -> bytes, DEFAULT_OUT.
# Usage: gen_op_schemas.py [--out PATH] [--check]   (--check: exit 1 when the
# file differs from a fresh generation, write nothing)
from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

import onnx
import onnx.checker
import onnx.defs
from onnx import helper

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "importer" / "op_schemas.json.gz"
FORMAT = "importer-op-schemas/1"

SCHEMA_LAYOUT = [
    "domain", "name", "since_version", "deprecated", "min_input", "max_input", "min_output", "max_output",
    "input_counts", "output_counts", "unchecked_attributes", "inputs", "outputs", "attributes", "type_constraints",
]  # fmt: skip
PARAMETER_LAYOUT = ["name", "option", "is_homogeneous", "min_arity", "type_str", "types"]
ATTRIBUTE_LAYOUT = ["name", "type", "required"]

# onnx/checker.cc's experimental_ops: default-domain ops check_node skips.
EXPERIMENTAL_OPS = ["ATen", "Affine", "ConstantFill", "Crop", "DynamicSlice", "GRUUnit", "GivenTensorFill",
                    "ImageScaler", "ParametricSoftplus", "Scale", "ScaledTanh"]  # fmt: skip

# How far past the last formal parameter a count is probed (variadic schemas).
_PROBE_BEYOND = 3
_PROBE_OP = "ZzzNoSuchOpProbe"
_PROBE_ATTRIBUTE = "zzz_undeclared_probe"


def _check_node(node: onnx.NodeProto, domain: str, version: int) -> str | None:
    """The checker's verdict on one node: None when accepted, else its message."""
    ctx = onnx.checker.C.CheckerContext()
    ctx.ir_version = onnx.IR_VERSION
    ctx.opset_imports = {domain: version}
    try:
        onnx.checker.C.check_node(node.SerializeToString(), ctx, onnx.checker.C.LexicalScopeContext())
    except onnx.checker.ValidationError as error:
        return str(error)
    return None


def _node(schema: Any, inputs: int, outputs: int, **attributes: Any) -> onnx.NodeProto:
    return helper.make_node(
        schema.name, [f"i{k}" for k in range(inputs)], [f"o{k}" for k in range(outputs)], domain=schema.domain, **attributes
    )


def _allowed_counts(schema: Any, low: int, high: int, formal: int, outputs: bool) -> list[int] | None:
    """The counts in [low, high] the checker accepts, when it refuses some; else None."""
    top = min(high, formal + _PROBE_BEYOND)
    allowed: list[int] = []
    for count in range(low, top + 1):
        node = _node(schema, schema.min_input, count) if outputs else _node(schema, count, max(schema.min_output, 1))
        message = _check_node(node, schema.domain, schema.since_version)
        if message is None or ("allowed output sizes" not in message and "allowed input sizes" not in message):
            allowed.append(count)
    if len(allowed) == top - low + 1:
        return None
    if top < high:
        raise SystemExit(f"{schema.name}:{schema.since_version} refuses counts of a variadic parameter: not representable")
    return allowed


def _accepts_undeclared_attributes(schema: Any) -> bool:
    node = _node(schema, schema.min_input, max(schema.min_output, 1), **{_PROBE_ATTRIBUTE: 1})
    message = _check_node(node, schema.domain, schema.since_version)
    return message is None or "Unrecognized attribute" not in message


def _strict(domain: str, version: int) -> bool:
    """Whether the checker refuses an op it has no schema for in `domain`."""
    message = _check_node(helper.make_node(_PROBE_OP, ["x"], ["y"], domain=domain), domain, version)
    return message is not None and "No Op registered" in message


def _confirm_experimental(version: int) -> None:
    for op_type in EXPERIMENTAL_OPS:
        message = _check_node(helper.make_node(op_type, ["x"], ["y"]), "", version)
        if message is not None:
            raise SystemExit(f"the checker no longer skips experimental op {op_type}: {message}")


class _TypeSets:
    """Interns each distinct sorted list of type strings."""

    def __init__(self) -> None:
        self.index: dict[tuple[str, ...], int] = {}

    def add(self, types: list[str]) -> int:
        key = tuple(sorted(types))
        return self.index.setdefault(key, len(self.index))

    def rows(self) -> list[list[str]]:
        return [list(key) for key in self.index]


def _parameters(params: Any, constraints: dict[str, list[str]], type_sets: _TypeSets) -> list[list[Any]]:
    rows = []
    for param in params:
        if len(param.types) != len(constraints.get(param.type_str, [param.type_str])):
            raise SystemExit(f"parameter {param.name}: types {sorted(param.types)} are not those of {param.type_str}")
        option = int(param.option.value)
        rows.append(
            [param.name, option, bool(param.is_homogeneous), int(param.min_arity), param.type_str, type_sets.add(list(param.types))]
        )
    return rows


def _schema_row(schema: Any, type_sets: _TypeSets) -> list[Any]:
    constraints = {tc.type_param_str: list(tc.allowed_type_strs) for tc in schema.type_constraints}
    checkable = not schema.deprecated  # the checker stops at a deprecated schema before any other rule
    return [
        schema.domain,
        schema.name,
        int(schema.since_version),
        bool(schema.deprecated),
        int(schema.min_input),
        int(schema.max_input),
        int(schema.min_output),
        int(schema.max_output),
        _allowed_counts(schema, schema.min_input, schema.max_input, len(schema.inputs), False) if checkable else None,
        _allowed_counts(schema, schema.min_output, schema.max_output, len(schema.outputs), True) if checkable else None,
        _accepts_undeclared_attributes(schema) if checkable else False,
        _parameters(schema.inputs, constraints, type_sets),
        _parameters(schema.outputs, constraints, type_sets),
        [[name, int(attr.type), bool(attr.required)] for name, attr in sorted(schema.attributes.items())],
        [[param, type_sets.add(types)] for param, types in sorted(constraints.items())],
    ]


def build_table() -> dict[str, Any]:
    """The table from the installed onnx package."""
    versions = onnx.defs.C.schema_version_map()
    _confirm_experimental(versions[""][1])
    type_sets = _TypeSets()
    schemas = sorted(onnx.defs.get_all_schemas_with_history(), key=lambda s: (s.domain, s.name, s.since_version))
    rows = [_schema_row(schema, type_sets) for schema in schemas]
    elem_types = [[code, onnx.TensorProto.DataType.Name(code).lower()] for code in onnx.TensorProto.DataType.values() if code]
    return {
        "format": FORMAT,
        "onnx_version": onnx.__version__,
        "domains": [[domain, low, high, _strict(domain, high)] for domain, (low, high) in sorted(versions.items())],
        "experimental_ops": sorted(EXPERIMENTAL_OPS),
        "elem_types": sorted(elem_types),
        "type_sets": type_sets.rows(),
        "schema_layout": SCHEMA_LAYOUT,
        "parameter_layout": PARAMETER_LAYOUT,
        "attribute_layout": ATTRIBUTE_LAYOUT,
        "schemas": rows,
    }


def encode(table: dict[str, Any]) -> bytes:
    return json.dumps(table, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def compress(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def main() -> None:
    parser = argparse.ArgumentParser(description="Write the operator-schema table from the installed onnx.")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--check", action="store_true", help="exit 1 when the file differs from a fresh generation")
    args = parser.parse_args()
    data = encode(build_table())
    if args.check:
        current = gzip.decompress(args.out.read_bytes()) if args.out.exists() else b""
        if current != data:
            print(f"{args.out} differs from a fresh generation from onnx {onnx.__version__}", file=sys.stderr)
            raise SystemExit(1)
        print(f"{args.out} is up to date (onnx {onnx.__version__})")
        return
    args.out.write_bytes(compress(data))
    print(f"{args.out}: {len(data)} bytes of JSON, {args.out.stat().st_size} gzipped (onnx {onnx.__version__})")


if __name__ == "__main__":
    main()
