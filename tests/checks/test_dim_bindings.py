"""The smoke run's dimension bindings, in process: `parse_dims` reads
`NAME:VALUE` and `INPUT[AXIS]:VALUE` as a request or the command line gives
them (the number after the last ':', an axis binding when the left side ends
in `[DIGITS]`), and `resolve_bindings` places each in the model or refuses it
with DimensionBindingError (a usage error: 400 through HTTP, exit 64 from
`onnx-import check`; those routes are tested against the real service and
the console script). `binding_plan` adds the model's own bindings (its
metadata) and a registry's after the request's, each only where it names a
free place of a made input nothing bound before, and says where each came from."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

import importer
from service.checks.outcome import ChecksError, DimensionBindingError, dim_target, parse_dims
from service.checks.stages.dim_bindings import MODEL_DIMS_KEY, binding_plan, model_dims, resolve_bindings


def test_parse_dims_reads_names_and_input_axes() -> None:
    assert parse_dims(["batch:4", "x[0]:2", "x[007]:3"]) == (("batch", 4), ("x[0]", 2), ("x[7]", 3))
    assert parse_dims(["a:b:2"]) == (("a:b", 2),)  # the value follows the last ':'
    assert parse_dims(["in:put[1]:5"]) == (("in:put[1]", 5),)
    assert parse_dims(["x[a]:1", "x[0]y:1", "x[]:1"]) == (("x[0]y", 1), ("x[]", 1), ("x[a]", 1))  # names, not axes
    assert parse_dims(["N:1", "N:2"]) == (("N", 2),)  # a later binding wins
    assert parse_dims(["x[0]:1", "x[00]:2"]) == (("x[0]", 2),)  # the same axis
    assert dim_target("x[0]") == ("x", 0) and dim_target("a[1][2]") == ("a[1]", 2) and dim_target("batch") == ("batch", None)


@pytest.mark.parametrize("value", ["batch", "batch:", ":3", "batch:-1", "batch:1.5", "batch:²", "batch:1234567890123", "[0]:1"])
def test_parse_dims_refuses_what_is_no_binding(value: str) -> None:
    with pytest.raises(ChecksError) as raised:
        parse_dims([value])
    assert "INPUT[AXIS]:VALUE" in str(raised.value)


def _model() -> importer.OnnxModel:
    """x: [N, ?, 3] (a symbolic, an unnamed and a fixed dimension), w: an input
    with an initializer, y: [N, M] (M only among the outputs)."""
    return importer.load_model_bytes(_bytes())


def _bytes() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("ReduceSum", ["x"], ["r"], keepdims=0), helper.make_node("Add", ["r", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", None, 3]), helper.make_tensor_value_info("w", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "M"])],
        [helper.make_tensor("w", TensorProto.FLOAT, [1], [0.0])],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    return data


def test_bindings_go_to_symbolic_dimensions_and_free_input_axes() -> None:
    bindings = resolve_bindings(_model(), {"N": 2, "M": 5, "x[1]": 7})
    assert bindings.names == {"N": 2, "M": 5} and bindings.axes == {("x", 1): 7}
    by_axis = resolve_bindings(_model(), {"x[0]": 4})  # a symbolic axis binds its name
    assert by_axis.names == {"N": 4} and by_axis.axes == {("x", 0): 4}
    assert resolve_bindings(_model(), {"N": 4, "x[0]": 4}).names == {"N": 4}


@pytest.mark.parametrize(
    ("dims", "said"),
    [
        ({"nosuch": 5}, "no dimension named 'nosuch' (their symbolic dimensions: 'N', 'M'"),
        ({"y[0]": 1}, "the model has no input 'y' (its inputs: 'x', 'w')"),
        ({"x[3]": 1}, "input 'x' has 3 dimensions, so no axis 3"),
        ({"x[2]": 1}, "axis 2 of input 'x' is declared 3"),
        ({"w[0]": 1}, "input 'w' has an initializer"),
        ({"N": 2, "x[0]": 3}, "x[0]:3 binds dimension 'N', which is bound to 2 as well"),
    ],
)
def test_a_binding_the_model_has_no_place_for_is_refused_naming_it(dims: dict[str, int], said: str) -> None:
    with pytest.raises(DimensionBindingError) as raised:
        resolve_bindings(_model(), dims)
    assert said in str(raised.value)
    assert isinstance(raised.value, ChecksError)  # a usage error wherever ChecksError is one


def test_the_models_and_a_registrys_bindings_fill_only_the_free_places_of_made_inputs() -> None:
    model = _model()
    plan = binding_plan(model, {"M": 5}, {"N": 3, "M": 9, "x[1]": 6, "x[2]": 1, "w[0]": 1, "nosuch": 2})
    assert plan.names == {"M": 5, "N": 3} and plan.axes == {("x", 1): 6}  # M, a request's, is kept; x[2] is fixed; w has an initializer
    assert plan.sources == {"M": "request", "N": "registry", "x[1]": "registry"}
    only_outputs = binding_plan(model, {}, {"M": 9})
    assert only_outputs.names == {} and only_outputs.sources == {}  # M is no dimension of an input the run makes


def test_the_models_metadata_comes_before_a_registry_and_a_malformed_entry_is_left() -> None:
    proto = onnx.load_from_string(_bytes())
    helper.set_model_props(proto, {MODEL_DIMS_KEY: "N:2, x[1]:4,bad,x[1]:-3,nosuch:1"})
    model = importer.load_model_bytes(proto.SerializeToString())
    assert model_dims(model) == {"N": 2, "x[1]": 4, "nosuch": 1}
    plan = binding_plan(model, {}, {"N": 7, "x[1]": 8})
    assert (plan.names, plan.axes) == ({"N": 2}, {("x", 1): 4}) and plan.sources == {"N": "model", "x[1]": "model"}
    assert binding_plan(model, {"x[0]": 5}, {}).sources == {"N": "request", "x[1]": "model"}  # a symbolic axis binds its name
