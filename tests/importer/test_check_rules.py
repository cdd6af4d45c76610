"""Each rule of the operator check on a small model, next to onnx.checker's verdict on it.

Every case states both verdicts: ours (the codes, severities and places) and
the checker's (plain `check_model`, or `full_check=True` where the rule is
one of its type inference). The cases where they differ on purpose are
named `test_deliberate_difference_*`, with the reason.
"""

from __future__ import annotations

from typing import Any

import onnx
import onnx.checker
import pytest
from onnx import TensorProto, helper
from test_check_places import assert_placed, check_bytes

from importer import Code, Diagnostic, ModelImportError, Severity, check_model, load_model_bytes

FLOAT = TensorProto.FLOAT


def _model(
    nodes: list[onnx.NodeProto],
    *,
    opsets: dict[str, int] | None = None,
    inputs: list[onnx.ValueInfoProto] | None = None,
    outputs: list[str] | None = None,
    initializers: list[onnx.TensorProto] | None = None,
    functions: list[onnx.FunctionProto] | None = None,
) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "g",
        inputs if inputs is not None else [helper.make_tensor_value_info("x", FLOAT, [2])],
        [helper.make_tensor_value_info(name, FLOAT, ["N"]) for name in (outputs or [nodes[-1].output[-1]])],
        initializer=initializers or [],
    )
    imports = [helper.make_opsetid(domain, version) for domain, version in (opsets or {"": 21}).items()]
    return helper.make_model(graph, opset_imports=imports, functions=functions or [], ir_version=10)


def _checker(model: onnx.ModelProto, full_check: bool = False) -> str | None:
    """The checker's verdict: None when it accepts, else its first message line."""
    try:
        onnx.checker.check_model(model, full_check=full_check)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as error:
        return str(error).splitlines()[0]
    return None


def _ours(model: onnx.ModelProto) -> list[Diagnostic]:
    data = model.SerializeToString()
    diagnostics = check_bytes(data)
    for diagnostic in diagnostics:
        assert_placed(data, model, diagnostic)
    return diagnostics


def _codes(diagnostics: list[Diagnostic]) -> list[tuple[str, str, str]]:
    return [(d.severity.value, d.code.value, d.field_path.removeprefix("ModelProto.")) for d in diagnostics]


def _errors(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diagnostics if d.severity is Severity.ERROR]


# --- models both accept


def test_a_valid_model_has_no_diagnostic() -> None:
    weight = helper.make_tensor("w", FLOAT, [2], [1.0, 2.0])
    nodes = [
        helper.make_node("Add", ["x", "w"], ["a"]),
        helper.make_node("LeakyRelu", ["a"], ["b"], alpha=0.1),
        helper.make_node("Concat", ["a", "b"], ["c"], axis=0),
        helper.make_node("Dropout", ["c"], ["d", ""]),  # an omitted optional output
        helper.make_node("Clip", ["d", "", "w"], ["e"]),  # an omitted optional input
    ]
    model = _model(nodes, initializers=[weight])
    assert _checker(model, full_check=True) is None
    assert _ours(model) == []


def test_layer_normalization_accepts_undeclared_attributes_as_the_checker_does() -> None:
    model = _model(
        [helper.make_node("LayerNormalization", ["x", "x"], ["y"], whatever=3)],
        opsets={"": 17},
    )
    assert _checker(model) is None
    assert _ours(model) == []


def test_internal_attributes_are_ignored_as_the_checker_does() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], __internal=1)])
    assert _checker(model) is None
    assert _ours(model) == []


def test_experimental_ops_are_a_warning_the_checker_skips_them() -> None:
    model = _model([helper.make_node("ImageScaler", ["x"], ["y"], scale=2.0)])
    assert _checker(model) is None
    assert _codes(_ours(model)) == [("warning", "experimental-op", "graph.node[0].op_type")]


def test_custom_domains_are_listed_as_not_checked_at_their_opset_import() -> None:
    nodes = [helper.make_node("Mystery", ["x"], ["a"], domain="com.example"), helper.make_node("Other", ["a"], ["b"], domain="com.example")]
    model = _model(nodes, opsets={"": 21, "com.example": 1})
    assert _checker(model) is None
    (diagnostic,) = _ours(model)
    assert _codes([diagnostic]) == [("warning", "domain-not-checked", "opset_import[1]")]
    assert diagnostic.message == "2 node(s) of custom domain 'com.example' not checked (no schema): 'Mystery', 'Other'"
    assert diagnostic.node_name is None and diagnostic.op_type is None


def test_preview_domains_are_checked_where_they_have_schemas() -> None:
    known = helper.make_node("Adagrad", ["r", "t", "x", "x", "x"], ["y", "h"], domain="ai.onnx.preview.training", bogus=1)
    unknown = helper.make_node("NotThere", ["x"], ["z"], domain="ai.onnx.preview.training")
    inputs = [helper.make_tensor_value_info(name, FLOAT, [2]) for name in ("x", "r")] + [
        helper.make_tensor_value_info("t", TensorProto.INT64, [])
    ]
    model = _model([known, unknown], opsets={"": 21, "ai.onnx.preview.training": 1}, inputs=inputs, outputs=["y", "z"])
    assert "Unrecognized attribute: bogus" in (_checker(model) or "")
    assert _codes(_ours(model)) == [  # in file order: onnx writes opset_import after the graph
        ("error", "unknown-attribute", "graph.node[0].attribute[0]"),
        ("warning", "domain-not-checked", "opset_import[1]"),
    ]


# --- the op itself


def test_an_op_used_before_its_opset() -> None:
    model = _model([helper.make_node("Gelu", ["x"], ["y"])], opsets={"": 17})
    assert _checker(model) == "No Op registered for Gelu with domain_version of 17"
    (diagnostic,) = _ours(model)
    assert _codes([diagnostic]) == [("error", "op-not-yet-defined", "graph.node[0].op_type")]
    assert diagnostic.message == "'Gelu' is defined from opset 20 of the default domain; the node's opset is 17"


def test_an_unknown_op_in_the_default_and_ml_domains() -> None:
    nodes = [helper.make_node("Frobnicate", ["x"], ["a"]), helper.make_node("Frobnicate", ["a"], ["b"], domain="ai.onnx.ml")]
    model = _model(nodes, opsets={"": 21, "ai.onnx.ml": 5})
    assert _checker(model) == "No Op registered for Frobnicate with domain_version of 21"
    assert _codes(_ours(model)) == [("error", "unknown-op", "graph.node[0].op_type"), ("error", "unknown-op", "graph.node[1].op_type")]


def test_a_deprecated_op() -> None:
    model = _model([helper.make_node("Upsample", ["x", "x"], ["y"])], opsets={"": 10})
    assert "is deprecated in domain_version of 10" in (_checker(model) or "")
    assert _codes(_ours(model)) == [("error", "op-deprecated", "graph.node[0].op_type")]


# --- inputs and outputs


@pytest.mark.parametrize(
    ("node", "message", "expected"),
    [
        (helper.make_node("Add", ["x"], ["y"]), "has input size 1 not in range [min=2, max=2]", ("too-few-inputs", "graph.node[0]")),
        (helper.make_node("Add", ["x", "x", "x"], ["y"]), "has input size 3 not in range", ("too-many-inputs", "graph.node[0].input[2]")),
        (helper.make_node("Relu", ["x"], ["y", "z"]), "has output size 2 not in range", ("too-many-outputs", "graph.node[0].output[1]")),
        (
            helper.make_node("Add", ["x", ""], ["y"]),
            "input 1 is marked single but has an empty string",
            ("required-input-empty", "graph.node[0].input[1]"),
        ),
        (
            helper.make_node("Dropout", ["x"], ["", "y"]),
            "output 0 is marked single but has an empty string",
            ("required-output-empty", "graph.node[0].output[0]"),
        ),
        (
            helper.make_node("BatchNormalization", ["x", "x", "x", "x", "x"], ["a", "y"]),
            "has output size 2 not in allowed output sizes",
            ("output-count-not-allowed", "graph.node[0]"),
        ),
    ],
)
def test_input_and_output_counts_and_empty_names(node: onnx.NodeProto, message: str, expected: tuple[str, str]) -> None:
    model = _model([node], outputs=[name for name in node.output if name][-1:])
    assert message in (_checker(model) or "")
    assert _codes(_ours(model)) == [("error", *expected)]


def test_a_node_with_no_inputs_and_no_outputs() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Thing", [], [], domain="com.example")]
    model = _model(nodes, opsets={"": 21, "com.example": 1}, outputs=["y"])
    assert "has zero input and zero output" in (_checker(model) or "")
    assert _codes(_ours(model)) == [
        ("error", "no-inputs-or-outputs", "graph.node[1]"),
        ("warning", "domain-not-checked", "opset_import[1]"),
    ]


# --- attributes


def test_attribute_rules() -> None:
    nodes = [
        helper.make_node("Concat", ["x", "x"], ["a"]),  # axis is required
        helper.make_node("LeakyRelu", ["a"], ["b"], alpha=1),  # INT where FLOAT is declared
        helper.make_node("Relu", ["b"], ["c"], slope=0.5),  # not declared
    ]
    duplicated = helper.make_node("LeakyRelu", ["c"], ["d"], alpha=0.5)
    duplicated.attribute.append(helper.make_attribute("alpha", 0.25))
    model = _model([*nodes, duplicated])
    assert _checker(model) == "Required attribute 'axis' is missing."
    diagnostics = _ours(model)
    assert _codes(diagnostics) == [
        ("error", "missing-attribute", "graph.node[0]"),
        ("error", "attribute-type", "graph.node[1].attribute[0]"),
        ("error", "unknown-attribute", "graph.node[2].attribute[0]"),
        ("error", "duplicate-attribute", "graph.node[3].attribute[1]"),
    ]
    assert diagnostics[1].message == "attribute 'alpha' is INT, the schema declares FLOAT"
    for single in (nodes[1], nodes[2], duplicated):
        assert _checker(_model([helper.make_node("Concat", ["x", "x"], ["a"], axis=0), single])) is not None


def test_constant_needs_exactly_one_value_as_full_check_says() -> None:
    none = _model([helper.make_node("Constant", [], ["y"])])
    two = _model([helper.make_node("Constant", [], ["y"], value_float=1.0, value_int=2)])
    for model in (none, two):
        assert _checker(model) is None  # the plain checker lets it through; its inference does not
        assert _checker(model, full_check=True) is not None
        assert _codes(_ours(model)) == [("error", "constant-value", "graph.node[0]")]


# --- input types


def test_an_input_type_outside_the_constraints_as_full_check_says() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], inputs=[helper.make_tensor_value_info("x", TensorProto.STRING, [2])])
    assert _checker(model) is None
    assert "has unsupported type: tensor(string)" in (_checker(model, full_check=True) or "")
    (diagnostic,) = _ours(model)
    assert _codes([diagnostic]) == [("error", "input-type", "graph.node[0].input[0]")]
    assert diagnostic.message.startswith("input 0 ('X') is tensor(string), not one of 'T': tensor(bfloat16), tensor(double)")


def test_inputs_bound_to_one_type_parameter_must_agree() -> None:
    ints = helper.make_tensor("i", TensorProto.INT64, [2], [1, 2])
    model = _model([helper.make_node("Add", ["x", "i"], ["y"])], initializers=[ints])
    assert "has inconsistent type tensor(int64)" in (_checker(model, full_check=True) or "")
    (diagnostic,) = _ours(model)
    assert _codes([diagnostic]) == [("error", "input-types-differ", "graph.node[0].input[1]")]
    assert diagnostic.message == "input 1 ('B') is tensor(int64), but input 0 binds 'T' to tensor(float)"


def test_types_from_value_info_outer_scopes_and_non_tensor_types() -> None:
    seq = helper.make_value_info("s", helper.make_sequence_type_proto(helper.make_tensor_type_proto(FLOAT, [2])))
    position = helper.make_tensor("p", TensorProto.INT64, [], [0])
    body = helper.make_graph(
        [helper.make_node("SequenceAt", ["s", "p"], ["t"])], "then", [], [helper.make_tensor_value_info("t", FLOAT, None)]
    )
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["u"])], "else", [], [helper.make_tensor_value_info("u", FLOAT, None)])
    cond = helper.make_tensor("c", TensorProto.BOOL, [], [True])
    nodes = [
        helper.make_node("SequenceAt", ["x", "p"], ["a"]),  # a tensor where a sequence is expected
        helper.make_node("If", ["c"], ["b"], then_branch=body, else_branch=other),  # reads the outer s and p: fine
    ]
    inputs = [helper.make_tensor_value_info("x", FLOAT, [2]), seq]
    model = _model(nodes, inputs=inputs, initializers=[position, cond], outputs=["a", "b"])
    assert "has unsupported type: tensor(float)" in (_checker(model, full_check=True) or "")
    assert _codes(_ours(model)) == [("error", "input-type", "graph.node[0].input[0]")]


def test_one_value_read_at_two_positions_of_different_constraints() -> None:
    model = _model([helper.make_node("Reshape", ["x", "x"], ["y"])])  # x is float: fine as data, not as shape
    assert "has unsupported type: tensor(float)" in (_checker(model, full_check=True) or "")
    assert _codes(_ours(model)) == [("error", "input-type", "graph.node[0].input[1]")]


def test_many_inputs_of_a_variadic_parameter() -> None:
    ints = helper.make_tensor("i", TensorProto.INT64, [2], [1, 2])
    inputs = ["x"] * 69 + ["i"]
    model = _model([helper.make_node("Concat", inputs, ["y"], axis=0)], initializers=[ints])
    assert "has inconsistent type tensor(int64)" in (_checker(model, full_check=True) or "")
    assert _codes(_ours(model)) == [("error", "input-types-differ", "graph.node[0].input[69]")]
    strings = _model(
        [helper.make_node("Identity", ["x"], ["a"]), helper.make_node("SequenceConstruct", ["a"] * 70, ["y"])],
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
    )
    assert _errors(_ours(strings)) == []


# --- the model


def test_an_opset_newer_than_the_table_is_a_warning_and_so_are_its_findings() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], slope=0.5)], opsets={"": 99})
    diagnostics = _ours(model)
    assert _codes(diagnostics) == [
        ("warning", "unknown-attribute", "graph.node[0].attribute[0]"),
        ("warning", "opset-newer-than-table", "opset_import[0]"),
    ]
    assert "newer than the schema table's 28 (onnx 1.23.2)" in diagnostics[1].message


def test_deliberate_difference_opset_newer_than_the_table() -> None:
    """The checker applies its newest schemas to opset 99 as if they were
    current and refuses; a newer opset may well allow the node, so we warn."""
    model = _model([helper.make_node("Relu", ["x"], ["y"], slope=0.5)], opsets={"": 99})
    assert _checker(model) == "Unrecognized attribute: slope for operator Relu"
    assert _errors(_ours(model)) == []


def test_deliberate_difference_ai_onnx_spelled_out() -> None:
    """`ai.onnx` is the default domain (onnx.proto; docs/import-rules.md §4);
    the checker's registry finds no schema for it."""
    model = _model([helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx")], opsets={"ai.onnx": 21})
    assert _checker(model) == "No Op registered for Relu with domain_version of 21"
    assert _ours(model) == []
    bad = _model([helper.make_node("Relu", ["x"], ["y"], domain="ai.onnx", slope=1.0)], opsets={"ai.onnx": 21})
    assert _codes(_ours(bad)) == [("error", "unknown-attribute", "graph.node[0].attribute[0]")]


def test_deliberate_difference_an_attribute_without_its_type_field() -> None:
    """The importer infers a missing `type` from the value field present
    (docs/import-rules.md §2) and the check uses it; the checker refuses the
    missing field before it looks at any schema."""
    axis = onnx.AttributeProto(name="axis", i=0)  # no `type`: read as INT
    alpha = onnx.AttributeProto(name="alpha", i=1)  # no `type`: INT where FLOAT is declared
    concat = helper.make_node("Concat", ["x", "x"], ["a"])
    concat.attribute.append(axis)
    leaky = helper.make_node("LeakyRelu", ["a"], ["b"])
    leaky.attribute.append(alpha)
    model = _model([concat, leaky])
    assert _checker(model) == "Field 'type' of 'attr' is required but missing."
    assert _codes(_ours(model)) == [("error", "attribute-type", "graph.node[1].attribute[0]")]


def test_deliberate_difference_functions_below_ir_version_8() -> None:
    """The checker looks at model-local functions only from IR version 8; the
    importer reads them whatever the version, and the check checks them."""
    body = [helper.make_node("Cast", ["p"], ["q"])]  # `to` missing
    model = _model(
        [helper.make_node("F", ["x"], ["y"], domain="local")], opsets={"": 13, "local": 1}, functions=[_function(body, {"": 13})]
    )
    model.ir_version = 7
    assert _checker(model) is None
    assert _codes(_ours(model)) == [("error", "missing-attribute", "functions[0].node[0]")]


# --- model-local functions


def _function(nodes: list[onnx.NodeProto], opsets: dict[str, int], domain: str = "local", name: str = "F") -> onnx.FunctionProto:
    imports = [helper.make_opsetid(d, v) for d, v in opsets.items()]
    return helper.make_function(domain, name, ["p"], ["q"], nodes, imports, attributes=["scale"])


def test_function_bodies_are_checked_against_their_own_opsets() -> None:
    body = [helper.make_node("Gelu", ["p"], ["q"])]  # defined from opset 20: fine under the function's 21
    call = helper.make_node("F", ["x"], ["y"], domain="local")
    good = _model([call], opsets={"": 21, "local": 1}, functions=[_function(body, {"": 21})])
    assert _checker(good) is None
    assert _ours(good) == []
    old = _model([call], opsets={"": 21, "local": 1}, functions=[_function(body, {"": 18})])
    assert "is not compatible with the version imported by model" in (_checker(old) or "")
    assert _codes(_ours(old)) == [
        ("error", "function-opset-incompatible", "functions[0].node[0].op_type"),
        ("error", "op-not-yet-defined", "functions[0].node[0].op_type"),
    ]


def test_calls_to_local_functions_are_resolved_and_checked() -> None:
    body = [helper.make_node("Relu", ["p"], ["q"])]
    functions = [_function(body, {"": 21})]
    good = _model([helper.make_node("F", ["x"], ["y"], domain="local", scale=2.0)], opsets={"": 21, "local": 1}, functions=functions)
    assert _checker(good) is None
    assert _ours(good) == []
    extra = helper.make_node("F", ["x", "x"], ["y", "z"], domain="local", bogus=1)
    bad = _model([extra], opsets={"": 21, "local": 1}, functions=functions, outputs=["y"])
    assert _codes(_ours(bad)) == [
        ("error", "too-many-inputs", "graph.node[0].input[1]"),
        ("error", "too-many-outputs", "graph.node[0].output[1]"),
        ("error", "unknown-attribute", "graph.node[0].attribute[0]"),
    ]


def test_a_body_node_of_a_domain_its_function_does_not_import() -> None:
    body = [helper.make_node("Relu", ["p"], ["q"], domain="ai.onnx.ml")]
    model = _model(
        [helper.make_node("F", ["x"], ["y"], domain="local")], opsets={"": 21, "local": 1}, functions=[_function(body, {"": 21})]
    )
    assert "No Opset registered for domain ai.onnx.ml" in (_checker(model) or "")
    assert _codes(_ours(model)) == [("error", "domain-not-imported", "functions[0].node[0].domain")]


def test_a_function_importing_an_incompatible_opset() -> None:
    body = [helper.make_node("Relu", ["p"], ["q"])]  # Relu-13 under opset 13, Relu-14 under the model's 21
    model = _model(
        [helper.make_node("F", ["x"], ["y"], domain="local")], opsets={"": 21, "local": 1}, functions=[_function(body, {"": 13})]
    )
    assert "is not compatible with the version imported by model" in (_checker(model) or "")
    assert _codes(_ours(model)) == [("error", "function-opset-incompatible", "functions[0].node[0].op_type")]
    same = _model([helper.make_node("F", ["x"], ["y"], domain="local")], opsets={"": 21, "local": 1}, functions=[_function(body, {"": 14})])
    assert _checker(same) is None and _ours(same) == []


def test_deliberate_difference_a_local_function_in_the_default_domain() -> None:
    """A node calling a model-local function is that function's call; the
    checker looks for a schema only, and refuses it in the default domain."""
    function = _function([helper.make_node("Relu", ["p"], ["q"])], {"": 21}, domain="", name="MyRelu")
    model = _model([helper.make_node("MyRelu", ["x"], ["y"])], functions=[function])
    assert _checker(model) == "No Op registered for MyRelu with domain_version of 21"
    assert _ours(model) == []


def test_overloaded_functions_are_told_apart() -> None:
    first = _function([helper.make_node("Relu", ["p"], ["q"])], {"": 21})
    second = _function([helper.make_node("Relu", ["p"], ["q"], bogus=1)], {"": 21})
    first.overload, second.overload = "one", "two"
    one = helper.make_node("F", ["x"], ["a"], domain="local", overload="one")
    two = helper.make_node("F", ["a"], ["b"], domain="local", overload="two", scale=1.0)
    model = _model([one, two], opsets={"": 21, "local": 1}, functions=[first, second])
    assert _codes(_ours(model)) == [("error", "unknown-attribute", "functions[1].node[0].attribute[0]")]


# --- the API


def test_a_closed_model_cannot_be_checked() -> None:
    model = load_model_bytes(_model([helper.make_node("Relu", ["x"], ["y"])]).SerializeToString())
    model.close()
    with pytest.raises(ModelImportError) as raised:
        check_model(model)
    assert raised.value.kind == "Io"


def test_the_verdict_is_deterministic() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], bogus=1), helper.make_node("Mystery", ["a"], ["b"], domain="com.example")]
    data = _model(nodes, opsets={"": 21, "com.example": 1}).SerializeToString()
    first: list[Any] = [d.as_dict() for d in check_bytes(data)]
    assert first == [d.as_dict() for d in check_bytes(data)]
    assert [d["code"] for d in first] == [Code.UNKNOWN_ATTRIBUTE, Code.DOMAIN_NOT_CHECKED]
