"""Generated mutations of real and exported models, each breaking one rule, against onnx.checker.

Each model is a backend test model (every one that is not a node case, and
every fifth node case) or a cached torch export, that onnx.checker accepts
and our check passes. Each mutation breaks one rule on one node of its main
graph, the first node the rule applies to:

  drop-required-attribute   a required attribute removed
  extra-input               inputs added up to one more than the schema allows
  extra-output              outputs added up to one more than the schema allows
  wrong-attribute-type      an attribute replaced by one of another type
  unknown-attribute         an attribute the schema does not declare added
  unknown-op                the op renamed to one no schema defines
  op-before-opset           the default opset lowered below the op's first version
  input-type                a graph input the node reads given an element type
                            outside the node's type constraint

The checker must refuse every mutated model (`full_check=True` for
input-type: only its type inference checks types), and our check must give
an error with the rule's code at the node's field path (the field at fault,
or the node when something is missing), whose offset is that field's key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnx
import onnx.checker
from onnx import helper
from test_check import _exported_models
from test_check_places import assert_placed, check_bytes

from importer import Severity
from importer.op_schemas import OpSchema, schema_table

NODE_CASE_STRIDE = 5
MIN_PER_KIND = 20
STRICT_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
_UNBOUNDED = 1 << 30
_SUBSTITUTE_TYPES = [
    onnx.TensorProto.STRING,
    onnx.TensorProto.BOOL,
    onnx.TensorProto.COMPLEX128,
    onnx.TensorProto.INT8,
    onnx.TensorProto.FLOAT,
]


@dataclass(frozen=True)
class Mutation:
    model: onnx.ModelProto
    code: str
    field_path: str
    full_check: bool = False


def _checker_refuses(model: onnx.ModelProto, full_check: bool) -> bool:
    try:
        onnx.checker.check_model(model, full_check=full_check)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
        return True
    return False


def _version(model: onnx.ModelProto, domain: str) -> int | None:
    for entry in model.opset_import:
        if (entry.domain or "") in ((domain,) if domain not in ("", "ai.onnx") else ("", "ai.onnx")):
            return int(entry.version)
    return None


def _targets(model: onnx.ModelProto) -> Iterator[tuple[int, onnx.NodeProto, OpSchema]]:
    """Main-graph nodes of a checked domain, with the schema in force."""
    table = schema_table()
    for index, node in enumerate(model.graph.node):
        if node.domain not in STRICT_DOMAINS:
            continue
        version = _version(model, node.domain)
        schema = table.lookup(node.domain, node.op_type, version) if version is not None else None
        if schema is not None and not schema.deprecated:
            yield index, node, schema


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy


def _node_path(index: int) -> str:
    return f"ModelProto.graph.node[{index}]"


def drop_required_attribute(model: onnx.ModelProto) -> Mutation | None:
    for index, node, schema in _targets(model):
        for position, attribute in enumerate(node.attribute):
            spec = schema.attributes.get(attribute.name)
            if spec is not None and spec.required:
                mutated = _copy(model)
                del mutated.graph.node[index].attribute[position]
                return Mutation(mutated, "missing-attribute", _node_path(index))
    return None


def extra_input(model: onnx.ModelProto) -> Mutation | None:
    for index, node, schema in _targets(model):
        name = next((name for name in node.input if name), None)
        if name is not None and schema.max_input < _UNBOUNDED:
            mutated = _copy(model)
            inputs = mutated.graph.node[index].input
            while len(inputs) <= schema.max_input:
                inputs.append(name)
            return Mutation(mutated, "too-many-inputs", f"{_node_path(index)}.input[{schema.max_input}]")
    return None


def extra_output(model: onnx.ModelProto) -> Mutation | None:
    for index, _node, schema in _targets(model):
        if schema.max_output < _UNBOUNDED:
            mutated = _copy(model)
            outputs = mutated.graph.node[index].output
            while len(outputs) <= schema.max_output:
                outputs.append(f"zz_extra_output_{len(outputs)}")
            return Mutation(mutated, "too-many-outputs", f"{_node_path(index)}.output[{schema.max_output}]")
    return None


def wrong_attribute_type(model: onnx.ModelProto) -> Mutation | None:
    for index, node, schema in _targets(model):
        for position, attribute in enumerate(node.attribute):
            spec = schema.attributes.get(attribute.name)
            if spec is None:
                continue
            replacement = helper.make_attribute(attribute.name, 1.5 if int(spec.type) == int(onnx.AttributeProto.INT) else 1)
            mutated = _copy(model)
            mutated.graph.node[index].attribute[position].CopyFrom(replacement)
            return Mutation(mutated, "attribute-type", f"{_node_path(index)}.attribute[{position}]")
    return None


def unknown_attribute(model: onnx.ModelProto) -> Mutation | None:
    for index, node, schema in _targets(model):
        if not schema.unchecked_attributes:
            mutated = _copy(model)
            mutated.graph.node[index].attribute.append(helper.make_attribute("zz_unknown_attribute", 7))
            return Mutation(mutated, "unknown-attribute", f"{_node_path(index)}.attribute[{len(node.attribute)}]")
    return None


def unknown_op(model: onnx.ModelProto) -> Mutation | None:
    for index, _node, _schema in _targets(model):
        mutated = _copy(model)
        mutated.graph.node[index].op_type = "ZzNoSuchOp"
        return Mutation(mutated, "unknown-op", f"{_node_path(index)}.op_type")
    return None


def op_before_opset(model: onnx.ModelProto) -> Mutation | None:
    table = schema_table()
    for index, node, _schema in _targets(model):
        first = table.first_version(node.domain, node.op_type)
        if node.domain in ("", "ai.onnx") and first is not None and first > 1:
            mutated = _copy(model)
            for entry in mutated.opset_import:
                if entry.domain in ("", "ai.onnx"):
                    entry.version = first - 1
            return Mutation(mutated, "op-not-yet-defined", f"{_node_path(index)}.op_type")
    return None


def input_type(model: onnx.ModelProto) -> Mutation | None:
    declared = {info.name: position for position, info in enumerate(model.graph.input) if info.type.HasField("tensor_type")}
    names = schema_table().elem_type_names
    for index, node, schema in _targets(model):
        for position, name in enumerate(node.input):
            if name not in declared or position >= len(schema.inputs) or not model.graph.input[declared[name]].type.tensor_type.elem_type:
                continue
            allowed = schema.inputs[position].types
            outside = next((t for t in _SUBSTITUTE_TYPES if f"tensor({names[t]})" not in allowed), None)
            if outside is None:
                continue
            mutated = _copy(model)
            mutated.graph.input[declared[name]].type.tensor_type.elem_type = outside
            return Mutation(mutated, "input-type", f"{_node_path(index)}.input[{position}]", full_check=True)
    return None


MUTATIONS: dict[str, Callable[[onnx.ModelProto], Mutation | None]] = {
    "drop-required-attribute": drop_required_attribute,
    "extra-input": extra_input,
    "extra-output": extra_output,
    "wrong-attribute-type": wrong_attribute_type,
    "unknown-attribute": unknown_attribute,
    "unknown-op": unknown_op,
    "op-before-opset": op_before_opset,
    "input-type": input_type,
}


def _sources(backend_dir: Path, backend_manifest: dict[str, Any]) -> Iterator[tuple[str, Path]]:
    node_cases = 0
    for relative in backend_manifest["models"]:
        if relative.startswith("node/"):
            node_cases += 1
            if node_cases % NODE_CASE_STRIDE:
                continue
        yield relative, backend_dir / relative
    for name, path in _exported_models().items():
        yield f"torch-exports/{name}", path


def test_each_mutation_is_refused_by_the_checker_and_placed_by_us(
    backend_dir: Path, backend_manifest: dict[str, Any], report: list[str]
) -> None:
    made: Counter[str] = Counter()
    failures: list[str] = []
    for source, path in _sources(backend_dir, backend_manifest):
        model = onnx.load(str(path))  # external data read in: the mutated copy is self-contained
        if _checker_refuses(model, False) or [d for d in check_bytes(model.SerializeToString()) if d.severity is Severity.ERROR]:
            continue  # only models both accept are mutated
        fully_accepted: bool | None = None
        for kind, mutate in MUTATIONS.items():
            mutation = mutate(model)
            if mutation is None:
                continue
            if mutation.full_check:
                if fully_accepted is None:
                    fully_accepted = not _checker_refuses(model, True)
                if not fully_accepted:
                    continue  # full_check refuses the original already: no evidence either way
            made[kind] += 1
            data = mutation.model.SerializeToString()
            if not _checker_refuses(mutation.model, mutation.full_check):
                failures.append(f"{source} {kind}: the checker accepts the mutated model")
            diagnostics = check_bytes(data)
            hits = [
                d for d in diagnostics if d.severity is Severity.ERROR and d.code == mutation.code and d.field_path == mutation.field_path
            ]
            if not hits:
                found = [(d.code.value, d.field_path) for d in diagnostics][:4]
                failures.append(f"{source} {kind}: no {mutation.code} at {mutation.field_path}; found {found}")
                continue
            assert_placed(data, mutation.model, hits[0])
    report.append(f"check mutations: {sum(made.values())} ({', '.join(f'{kind} {count}' for kind, count in sorted(made.items()))})")
    assert failures == []
    for kind in MUTATIONS:
        assert made[kind] >= MIN_PER_KIND, (kind, made[kind])
