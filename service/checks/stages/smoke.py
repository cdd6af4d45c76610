"""The `smoke` stage: does the model run, and are its outputs what it declares?

Owns `smoke_stage`: a run of the `runtime` stage's session on inputs made
from the declared types of the graph's inputs (those without an initializer),
then each output's actual type and shape compared with its declaration; and,
when that passes with dimensions left unbound, a second run with those at
`second_dim` (--smoke-second-dim, 2), compared the same way. The stage
passes only if both do.

Synthetic inputs: every dimension of a declared shape is its value; a
symbolic one (`dim_param`) or one without a name takes its value from the
bindings (`dim_bindings.binding_plan`: the request's `dims`, `NAME:VALUE` or
`INPUT[AXIS]:VALUE`, then the model's metadata, then a registry's
`soft_dims`; a request's binding the model has no place for raises
DimensionBindingError, a usage error, not a stage result), else 1 in the
first run and `second_dim` in the second. A failed run, or an output shape
unlike its declaration, names the run's binding ("at the second binding
(batch=2)"), the dimensions that took the default, and the binding that
would change each. The result lists each run's binding (`bindings`, keyed
by `NAME`, or `INPUT[AXIS]` for a dimension without a name) and where each
value came from (`binding_sources`). Values: 1 for the float types
(bfloat16 and float8 given as bit patterns), 0 for the integer types, False,
and "" for strings. An optional input of a tensor type gets that tensor. The
stage is `skipped`, with the reason, when an input cannot be made: a
sequence, map, sparse or opaque type, a declared type without a shape, an
element type onnxruntime does not take; and `incomplete` (a limit) when the
inputs would take more than MAX_SYNTHETIC_INPUT_BYTES in all. The packed 4- and 2-bit types (which
onnxruntime's Python API takes from no numpy array) are written packed into
an OrtValue onnxruntime allocates. A test passes
inputs of its own (`inputs`) and may collect the outputs (`outputs_sink`:
numpy arrays, or onnxruntime's `OrtValue` where numpy has no dtype).

Outputs: a declared tensor type must be a tensor of that element type and
rank, each declared dimension of that value, and each symbolic dimension the
same wherever its name appears (among the inputs as made and the outputs). A
declared sequence must be a sequence and a declared map a map, and their
contents are judged by the declared types: element by element when the run
gives Python values (a list of dicts for skl2onnx's ZipMap output,
sequence(map(int64, tensor(float))): each element a dict, each key an int,
each value a float), else by onnxruntime's name of the value's type
(`seq(map(int64,tensor(float)))`). The numpy API, which gives those values,
runs the model when an output declares a map and every input is of a type
numpy has (or a string); else `run_with_ort_values`. Optional and undeclared
outputs are not compared.

Codes (stable, kebab-case; each finding is an error):

- `smoke-run-failed`: the run failed (placed at the node onnxruntime names);
- `smoke-output-type`: an output's kind or element type is not the declared
  one (for a sequence or map, the first element, key or value that is not);
- `smoke-output-shape`: an output's rank or a dimension is not the declared one.

Each run has its own CPU budget (`cpu_seconds`, the service's
`--smoke-cpu-seconds`, 3 by default, below the worker's limits), enforced with
onnxruntime's own cancellation (`service.checks.stages.cpu_budget`:
both ways of running take its `RunOptions`): a run that uses it without
finishing (a `Loop` of 10^15 trips) is stopped, and the stage is `incomplete`
(a limit, fail closed), its reason naming the setting.

`incomplete` (fail closed) when memory runs out or on an exception the stage
does not expect.
"""

from __future__ import annotations

import ctypes
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt

import importer
from importer.element_types import BITS_PER_ELEMENT, DataType, has_native_numpy_dtype, raw_layout_dtype
from importer.messages import MapType, OpaqueType, OptionalType, SequenceType, TensorType, TypeProto
from service.checks.outcome import DEFAULT_SECOND_DIM, BindingSource, DimensionBindingError, Finding, StageResult, incomplete
from service.checks.stages.cpu_budget import cpu_budget
from service.checks.stages.dim_bindings import MAX_HINTED, Bindings, binding_plan, default_hint, dimension_key
from service.checks.stages.runtime import finding_at_message, load_onnxruntime

SMOKE_RUN_FAILED: Final = "smoke-run-failed"
SMOKE_OUTPUT_TYPE: Final = "smoke-output-type"
SMOKE_OUTPUT_SHAPE: Final = "smoke-output-shape"

NO_SESSION: Final = "the runtime stage made no session"
MAX_SYNTHETIC_INPUT_BYTES: Final = 1 << 30  # the synthetic inputs, all together
DEFAULT_CPU_SECONDS: Final = 3.0  # the run's CPU budget (--smoke-cpu-seconds)

_OUT_OF_MEMORY: Final = re.compile(r"bad_alloc|Failed to allocate memory|out of memory", re.IGNORECASE)
_ORT_TYPE: Final = re.compile(r"tensor\((\w+)\)")
_FLOAT_TYPES: Final = frozenset({DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.COMPLEX64, DataType.COMPLEX128})
_BFLOAT16_ONE: Final = 0x3F80
_MAX_JUDGED: Final = 100_000  # the elements, keys and values of one output judged one by one


@dataclass(frozen=True, slots=True)
class _Actual:
    """What an output is, as the run gave it."""

    kind: str  # "tensor", "sequence", "map", "none", "other"
    element: int | None = None  # a tensor's element type (DataType value)
    shape: tuple[int, ...] | None = None  # a tensor's
    value: object = None  # a sequence or map of the numpy API: judged element by element
    type_text: str = ""  # onnxruntime's name of a sequence's or map's type (an OrtValue's)


@dataclass(slots=True)
class _Binding:
    """One run's free dimensions: each one's value by key (`NAME`, or
    `INPUT[AXIS]` without a name), in the order the inputs give them; and
    those that took `default`, the run's value for what nothing bound."""

    ordinal: str  # "first", "second"
    default: int
    values: dict[str, int] = field(default_factory=dict)
    names: dict[str, None] = field(default_factory=dict)  # symbolic dimensions that took `default`
    axes: list[tuple[str, int]] = field(default_factory=list)  # axes without a name that took `default`

    def hint(self) -> str:
        return default_hint(self.names, self.axes, self.default)

    def at(self) -> str:
        """The run's binding in a message, ` at the first binding (batch=1, x[1]=1)`
        (its first MAX_HINTED dimensions); "" for a run with none."""
        if not self.values:
            return ""
        shown = [f"{key}={value}" for key, value in list(self.values.items())[:MAX_HINTED]]
        more = ", ..." if len(self.values) > MAX_HINTED else ""
        return f" at the {self.ordinal} binding ({', '.join(shown)}{more})"


class _Skip(Exception):
    """An input the stage cannot make: the stage is skipped, with this reason."""


class _TooLarge(Exception):
    """Inputs past MAX_SYNTHETIC_INPUT_BYTES: a limit, so the stage is incomplete."""


class _OverBudget(Exception):
    """The run used its CPU budget without finishing: a limit, so the stage is incomplete."""


def smoke_stage(
    session: object | None,
    model: importer.OnnxModel,
    dims: Mapping[str, int],
    inputs: Mapping[str, np.ndarray[Any, Any]] | None = None,
    outputs_sink: list[object] | None = None,
    *,
    cpu_seconds: float = DEFAULT_CPU_SECONDS,
    soft_dims: Mapping[str, int] | None = None,
    second_dim: int = DEFAULT_SECOND_DIM,
) -> StageResult:
    """A run of `session` (the `runtime` stage's) on synthetic inputs, or on
    `inputs` when given, stopped once it has used `cpu_seconds` of CPU time;
    each output checked against its declaration. Dimensions are bound by the
    request's `dims`, the model's metadata, then `soft_dims`
    (`dim_bindings.binding_plan`); when some are left unbound and the first
    run (at 1) passes, a second run gives them `second_dim` (1: no second
    run). The first run's outputs are appended to `outputs_sink` when given,
    in the graph's order."""
    started = time.monotonic()
    result = _smoke_stage(session, model, dims, soft_dims or {}, inputs, outputs_sink, cpu_seconds, second_dim)
    result.seconds = time.monotonic() - started
    return result


def _smoke_stage(
    session: object | None,
    model: importer.OnnxModel,
    dims: Mapping[str, int],
    soft_dims: Mapping[str, int],
    inputs: Mapping[str, np.ndarray[Any, Any]] | None,
    outputs_sink: list[object] | None,
    cpu_seconds: float,
    second_dim: int,
) -> StageResult:
    if session is None:
        return StageResult.ended("smoke", "skipped", NO_SESSION)
    try:
        ort = load_onnxruntime()
        bindings = binding_plan(model, dims, soft_dims)
        runs = [_Binding("first", 1)]
        result = _one_run(ort, session, model, bindings, runs[0], inputs, outputs_sink, cpu_seconds)
        left_unbound = bool(runs[0].names or runs[0].axes)
        if result.status == "pass" and left_unbound and second_dim != 1:
            runs.append(_Binding("second", second_dim))
            result = _one_run(ort, session, model, bindings, runs[1], None, None, cpu_seconds)
        if any(run.values for run in runs):
            result.bindings = [dict(run.values) for run in runs]
            result.binding_sources = _sources(runs[0], bindings)
        return result
    except DimensionBindingError:
        raise  # a usage error, which the check worker reports before any stage runs (run.send_checks)
    except MemoryError:
        return incomplete("smoke", "out of memory")
    except Exception as error:
        return incomplete("smoke", f"the smoke run failed unexpectedly: {type(error).__name__}: {error}")


def _sources(run: _Binding, bindings: Bindings) -> dict[str, BindingSource]:
    """Where each of the run's dimensions took its value: a binding's source, else the default."""
    return {key: bindings.sources.get(key, "default") for key in run.values}


def _one_run(
    ort: Any,
    session: object,
    model: importer.OnnxModel,
    bindings: Bindings,
    binding: _Binding,
    inputs: Mapping[str, np.ndarray[Any, Any]] | None,
    outputs_sink: list[object] | None,
    cpu_seconds: float,
) -> StageResult:
    """One run at `binding` (which notes each free dimension's value), its outputs compared with their declarations."""
    run: Any = session
    bound = dict(bindings.names)
    try:
        feeds, types = _feeds(model, bound, bindings, binding, inputs)
    except _Skip as skip:
        return StageResult.ended("smoke", "skipped", str(skip))
    except _TooLarge as limit:
        return incomplete("smoke", f"{limit}{binding.at()}")
    for name, value in bindings.names.items():  # a request's binding of a dimension only the outputs declare
        binding.values.setdefault(name, value)
    at = binding.at()
    try:
        actual = _budgeted_run(ort, run, feeds, types, outputs_sink, _declares_a_map(model), cpu_seconds)
    except _Skip as skip:
        return StageResult.ended("smoke", "skipped", str(skip))
    except _OverBudget as limit:
        return incomplete("smoke", f"{limit}{at}")
    except MemoryError:
        return incomplete("smoke", f"out of memory during the run{at}")
    except Exception as error:
        message = str(error)
        if not type(error).__module__.startswith("onnxruntime"):
            return incomplete("smoke", f"the run{at} failed unexpectedly: {type(error).__name__}: {message}")
        if _OUT_OF_MEMORY.search(message):
            return incomplete("smoke", f"out of memory during the run{at}: {message}")
        result = StageResult("smoke")
        hint = f" ({_hint(binding)})" if _hint(binding) else ""  # first: onnxruntime's message may be long, and is bounded
        result.add(finding_at_message(model, "smoke", SMOKE_RUN_FAILED, f"the run on {_what(inputs)}{at} failed{hint}: {message}"))
        return result.finish()
    result = StageResult("smoke")
    notes = "; ".join(note for note in (at.strip(), _hint(binding)) if note)
    _compare(model, actual, bound, result, f"; {notes}" if notes else "")
    return result.finish()


def _hint(binding: _Binding) -> str:
    """What the dimensions that took the run's default were, and how to bind
    them: the full hint at the first run; at the second, whose binding the
    message names already, only the setting their value came from."""
    if binding.ordinal == "first":
        return binding.hint()
    if not (binding.names or binding.axes):
        return ""
    return f"unbound, these took {binding.default}: --smoke-second-dim"


def _what(inputs: Mapping[str, object] | None) -> str:
    return "the given inputs" if inputs is not None else "synthetic inputs"


# --- inputs


def _feeds(
    model: importer.OnnxModel,
    bound: dict[str, int],
    bindings: Bindings,
    binding: _Binding,
    given: Mapping[str, np.ndarray[Any, Any]] | None,
) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, int]]:
    """The inputs of the run by name, and each one's element type (DataType
    value); each free dimension's value, and those that took the run's
    default, are noted in `binding`."""
    feeds: dict[str, np.ndarray[Any, Any]] = {}
    types: dict[str, int] = {}
    total = 0
    for value in model.graph.inputs:
        tensor = _tensor_type(value.type)
        if given is not None:
            if value.name not in given:
                continue
            array = np.asarray(given[value.name])
            if tensor is not None and tensor.elem_type:
                types[value.name] = tensor.elem_type
            feeds[value.name] = array
        else:
            if value.initializer is not None:  # an initializer's default: onnxruntime uses it
                continue
            if tensor is None:
                raise _Skip(f"input {value.name!r} is {_kind(value.type)}: the smoke run makes tensor inputs only")
            if tensor.shape is None:
                raise _Skip(f"input {value.name!r} declares no shape: the smoke run cannot make it")
            shape = tuple(_dim(dim, bound, bindings, binding, value.name, axis) for axis, dim in enumerate(tensor.shape))
            data_type = _data_type(tensor.elem_type, value.name)
            dtype = _synthetic_dtype(data_type)
            total += int(np.prod(shape, dtype=np.float64) * dtype.itemsize)
            if total > MAX_SYNTHETIC_INPUT_BYTES:
                limit = MAX_SYNTHETIC_INPUT_BYTES
                raise _TooLarge(f"the synthetic inputs would take more than {limit} bytes (input {value.name!r}: {list(shape)})")
            feeds[value.name] = _synthetic(data_type, shape, dtype)
            types[value.name] = int(data_type)
        if tensor is not None and tensor.shape is not None and len(tensor.shape) == feeds[value.name].ndim:
            for dim, size in zip(tensor.shape, feeds[value.name].shape, strict=True):
                if isinstance(dim, str):
                    bound.setdefault(dim, size)
    return feeds, types


def _tensor_type(declared: TypeProto | None) -> TensorType | None:
    """The dense tensor type of a tensor or optional-tensor declaration."""
    if isinstance(declared, OptionalType):
        declared = declared.elem_type
    if isinstance(declared, TensorType) and not declared.sparse:
        return declared
    return None


def _kind(declared: TypeProto | None) -> str:
    if declared is None:
        return "of no declared type"
    if isinstance(declared, TensorType):
        return "a sparse tensor"
    return {"SequenceType": "a sequence", "OptionalType": "an optional", "MapType": "a map"}.get(type(declared).__name__, "opaque")


def _dim(dim: int | str | None, bound: dict[str, int], bindings: Bindings, binding: _Binding, name: str, axis: int) -> int:
    if isinstance(dim, int) and dim >= 0:
        return dim
    if (name, axis) in bindings.axes:
        value = bindings.axes[(name, axis)]
    elif isinstance(dim, str):
        if dim not in bound:
            binding.names.setdefault(dim)
        value = bound.setdefault(dim, binding.default)
    else:
        binding.axes.append((name, axis))
        value = binding.default
    binding.values.setdefault(dimension_key(dim, name, axis), value)
    return value


def _data_type(code: int, name: str) -> DataType:
    try:
        data_type = DataType(code)
    except ValueError:
        raise _Skip(f"input {name!r} has element type {code}, which this service does not know") from None
    if data_type == DataType.UNDEFINED:
        raise _Skip(f"input {name!r} declares no element type")
    return data_type


def _synthetic_dtype(data_type: DataType) -> np.dtype[Any]:
    """The dtype of a synthetic input: the raw layout's, object for strings,
    one uint8 per element for the packed types (packed when given)."""
    if data_type == DataType.STRING:
        return np.dtype(object)
    return raw_layout_dtype(data_type) or np.dtype(np.uint8)


def _synthetic(data_type: DataType, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    if data_type == DataType.STRING:
        return np.full(shape, "", dtype=object)
    if data_type in _FLOAT_TYPES:
        return np.ones(shape, dtype=dtype)
    if data_type == DataType.BFLOAT16:
        return np.full(shape, _BFLOAT16_ONE, dtype=dtype)
    return np.zeros(shape, dtype=dtype)  # integers, bool, float8 (bit pattern 0: zero)


# --- the run


def _budgeted_run(
    ort: Any,
    session: Any,
    feeds: dict[str, np.ndarray[Any, Any]],
    types: dict[str, int],
    sink: list[object] | None,
    maps: bool,
    cpu_seconds: float,
) -> list[_Actual]:
    """`_run` under its CPU budget: _OverBudget when the watchdog stopped it."""
    run_options = ort.RunOptions()
    with cpu_budget(run_options, cpu_seconds) as budget:
        try:
            return _run(ort, session, feeds, types, sink, maps, run_options)
        except Exception:
            if budget.spent:
                raise _OverBudget(f"the smoke run used its {cpu_seconds:g} CPU-seconds (--smoke-cpu-seconds) without finishing") from None
            raise


def _run(
    ort: Any,
    session: Any,
    feeds: dict[str, np.ndarray[Any, Any]],
    types: dict[str, int],
    sink: list[object] | None,
    maps: bool,
    run_options: Any,
) -> list[_Actual]:
    """Run once; each output as it came. The numpy API runs the model when an
    input is a string (onnxruntime makes no OrtValue of strings), and when an
    output declares a map (`maps`: only that API gives its contents) and numpy
    has every input's type; else `run_with_ort_values`. Both take
    `run_options` (onnxruntime's `RunOptions`: its CPU budget)."""
    strings = [name for name, code in types.items() if code == DataType.STRING]
    odd = [name for name, code in types.items() if not has_native_numpy_dtype(DataType(code)) and code != DataType.STRING]
    if strings or (maps and not odd):
        if odd:
            raise _Skip(f"inputs {strings[0]!r} (strings) and {odd[0]!r} ({DataType(types[odd[0]]).name}) cannot be given in one run")
        outputs = session.run(None, feeds, run_options)
        if sink is not None:
            sink.extend(outputs)
        return [_actual_of_python(output) for output in outputs]
    values = {}
    for name, array in feeds.items():
        try:
            values[name] = _ortvalue(ort, array, types.get(name))
        except _Skip:
            raise
        except Exception as error:
            raise _Skip(f"onnxruntime takes no input {name!r} of {array.dtype} {list(array.shape)[:8]}: {error}") from None
    results = session.run_with_ort_values(None, values, run_options)
    actual = [_actual_of_ortvalue(value) for value in results]
    if sink is not None:
        for value, seen in zip(results, actual, strict=True):
            element = seen.element
            native = element is not None and (has_native_numpy_dtype(DataType(element)) or element == DataType.STRING)
            sink.append(value.numpy() if seen.kind == "tensor" and native else value)  # else numpy has no dtype: the OrtValue
    return actual


def _ortvalue(ort: Any, array: np.ndarray[Any, Any], code: int | None) -> Any:
    data_type = DataType(code) if code is not None and code in DataType.__members__.values() else None
    if data_type is None or has_native_numpy_dtype(data_type):
        return ort.OrtValue.ortvalue_from_numpy(_contiguous(array))
    bits = raw_layout_dtype(data_type)
    if bits is None:
        return _packed_ortvalue(ort, array, data_type)
    if array.dtype != bits:
        array = _contiguous(array).view(bits)  # bfloat16 or float8 of ml_dtypes: the same bits
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(_contiguous(array), int(data_type))


def _packed_ortvalue(ort: Any, array: np.ndarray[Any, Any], data_type: DataType) -> Any:
    """An OrtValue of a packed type (4-, 2- or 6-bit): each element's low bits
    (an integer, or an ml_dtypes value's byte), packed little-endian into
    memory onnxruntime allocates."""
    if data_type not in BITS_PER_ELEMENT or data_type == DataType.STRING:
        raise _Skip(f"an input is {data_type.name}: onnxruntime takes no such tensor")
    bits = BITS_PER_ELEMENT[data_type]
    flat = _contiguous(array).reshape(-1)
    codes = flat.view(np.uint8) if flat.dtype.itemsize == 1 else flat.astype(np.int64).astype(np.uint8)
    stream = ((codes[:, None] >> np.arange(bits, dtype=np.uint8)) & 1).astype(np.uint8).reshape(-1)
    packed = np.packbits(stream, bitorder="little")
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), int(data_type))
    size = min(packed.nbytes, int(value.tensor_size_in_bytes()))
    if size:
        ctypes.memmove(value.data_ptr(), packed.ctypes.data, size)
    return value


def _contiguous(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The array in C order, of its own rank (np.ascontiguousarray makes a scalar 1-d)."""
    return array if array.flags.c_contiguous else array.copy(order="C")


def _element_of_ort(type_name: str) -> int | None:
    matched = _ORT_TYPE.fullmatch(type_name)
    if matched is None:
        return None
    member = DataType.__members__.get(matched.group(1).upper())
    return int(member) if member is not None else None


def _actual_of_ortvalue(value: Any) -> _Actual:
    if not value.has_value():
        return _Actual("none")
    if value.is_tensor():
        return _Actual("tensor", _element_of_ort(str(value.data_type())), tuple(int(size) for size in value.shape()))
    text = str(value.data_type())
    if value.is_tensor_sequence() or text.startswith("seq("):
        return _Actual("sequence", type_text=text)
    if text.startswith("map("):
        return _Actual("map", type_text=text)
    return _Actual("other", type_text=text)


_NUMPY_ELEMENT: Final = {
    np.dtype(np.float32): DataType.FLOAT, np.dtype(np.float64): DataType.DOUBLE, np.dtype(np.float16): DataType.FLOAT16,
    np.dtype(np.int8): DataType.INT8, np.dtype(np.int16): DataType.INT16, np.dtype(np.int32): DataType.INT32,
    np.dtype(np.int64): DataType.INT64, np.dtype(np.uint8): DataType.UINT8, np.dtype(np.uint16): DataType.UINT16,
    np.dtype(np.uint32): DataType.UINT32, np.dtype(np.uint64): DataType.UINT64, np.dtype(np.bool_): DataType.BOOL,
    np.dtype(np.complex64): DataType.COMPLEX64, np.dtype(np.complex128): DataType.COMPLEX128,
}  # fmt: skip


def _element_of_array(array: npt.NDArray[Any]) -> int | None:
    element = DataType.STRING if array.dtype.kind in "OUS" else _NUMPY_ELEMENT.get(array.dtype)
    return int(element) if element is not None else None


def _actual_of_python(output: object) -> _Actual:
    """An output of the numpy API: an array, a list (a sequence: of arrays, or of dicts for maps), a dict (a map), None."""
    if output is None:
        return _Actual("none")
    if isinstance(output, np.ndarray):
        return _Actual("tensor", _element_of_array(output), tuple(output.shape))
    if isinstance(output, list):
        return _Actual("sequence", value=output)
    if isinstance(output, dict):
        return _Actual("map", value=output)
    return _Actual("other")


def _declares_a_map(model: importer.OnnxModel) -> bool:
    return any(_holds_a_map(value.type) for value in model.graph.outputs)


def _holds_a_map(declared: TypeProto | None) -> bool:
    if isinstance(declared, MapType):
        return True
    if isinstance(declared, (SequenceType, OptionalType)):
        return _holds_a_map(declared.elem_type)
    return False


# --- the comparison


def _compare(model: importer.OnnxModel, actual: list[_Actual], bound: dict[str, int], result: StageResult, hint: str = "") -> None:
    """Each output against its declaration; `hint` (the dimensions that took 1 unbound) ends a shape finding."""
    graph = model.graph
    for index, (value, seen) in enumerate(zip(graph.outputs, actual, strict=False)):
        declared = value.type
        info = graph.proto.output[index]
        place = f"{graph.path}.output[{index}]"
        kind, element, shape = seen.kind, seen.element, seen.shape

        def error(code: str, message: str, name: str = value.name, at: str = place, offset: int = info.offset) -> None:
            result.add(Finding("smoke", "error", code, f"output {name!r}: {message}", field_path=at, offset=offset))

        if isinstance(declared, (SequenceType, MapType)):
            wanted = "sequence" if isinstance(declared, SequenceType) else "map"
            if kind != wanted:
                error(SMOKE_OUTPUT_TYPE, f"declared {_article(wanted)}, the run gave {_article(kind)}")
            elif seen.type_text:
                named = _ort_type_text(declared)
                if named is not None and seen.type_text.replace(" ", "") != named:
                    error(SMOKE_OUTPUT_TYPE, f"declared {named}, the run gave {seen.type_text}")
            else:
                problem = _judge(declared, seen.value, "", [0])
                if problem is not None:
                    error(SMOKE_OUTPUT_TYPE, problem)
            continue
        if not isinstance(declared, TensorType) or declared.sparse:
            continue
        if kind != "tensor":
            error(SMOKE_OUTPUT_TYPE, f"declared a tensor, the run gave {_article(kind)}")
            continue
        if declared.elem_type and element is not None and element != declared.elem_type:
            error(SMOKE_OUTPUT_TYPE, f"declared {_type_name(declared.elem_type)}, the run gave {_type_name(element)}")
        if declared.shape is None or shape is None:
            continue
        if len(declared.shape) != len(shape):
            declared_text = f"rank {len(declared.shape)} {_shape_text(declared.shape)}"
            error(SMOKE_OUTPUT_SHAPE, f"declared {declared_text}, the run gave rank {len(shape)} {list(shape)}{hint}")
            continue
        for axis, (dim, size) in enumerate(zip(declared.shape, shape, strict=True)):
            if isinstance(dim, int) and dim >= 0 and dim != size:
                error(SMOKE_OUTPUT_SHAPE, f"dimension {axis} is declared {dim}, the run gave {size} (shape {list(shape)}){hint}")
            elif isinstance(dim, str):
                expected = bound.setdefault(dim, size)
                if expected != size:
                    message = f"dimension {axis} is {dim!r}, which is {expected} elsewhere; the run gave {size} (shape {list(shape)}){hint}"
                    error(SMOKE_OUTPUT_SHAPE, message)


def _ort_type_text(declared: TypeProto | None) -> str | None:
    """onnxruntime's name of a declared type (`seq(map(int64,tensor(float)))`), None where the declaration leaves it open."""
    if isinstance(declared, TensorType):
        return None if declared.sparse or not declared.elem_type else f"tensor({_type_name(declared.elem_type).lower()})"
    if isinstance(declared, SequenceType):
        inner = _ort_type_text(declared.elem_type)
        return None if inner is None else f"seq({inner})"
    if isinstance(declared, MapType):
        inner = _ort_type_text(declared.value_type)
        return None if inner is None or not declared.key_type else f"map({_type_name(declared.key_type).lower()},{inner})"
    return None


_INTEGERS: Final = frozenset(
    {DataType.INT8, DataType.INT16, DataType.INT32, DataType.INT64, DataType.UINT8, DataType.UINT16, DataType.UINT32, DataType.UINT64}
)
_REALS: Final = frozenset({DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.BFLOAT16})


def _judge(declared: TypeProto | None, value: object, where: str, judged: list[int]) -> str | None:
    """The first element, key or value of `value` (the numpy API's list, dict
    or scalar) that is not of the `declared` type, as a message; None when
    all are (or the declaration leaves them open). `judged` counts the items
    seen: past _MAX_JUDGED the rest are not judged."""
    judged[0] += 1
    if judged[0] > _MAX_JUDGED or declared is None or isinstance(declared, OpaqueType):
        return None
    at = f"element {where}" if where else "the value"
    if isinstance(declared, OptionalType):
        return None if value is None else _judge(declared.elem_type, value, where, judged)
    if isinstance(declared, SequenceType):
        if not isinstance(value, list):
            return f"{at} is {_python_kind(value)}, declared a sequence"
        for position, item in enumerate(value):
            problem = _judge(declared.elem_type, item, f"{where}[{position}]", judged)
            if problem is not None:
                return problem
        return None
    if isinstance(declared, MapType):
        if not isinstance(value, dict):
            return f"{at} is {_python_kind(value)}, declared a map of {_type_name(declared.key_type)} keys"
        for key, item in value.items():
            if not _scalar_of(declared.key_type, key):
                return f"{at} has the key {key!r:.60} ({_python_kind(key)}), declared {_type_name(declared.key_type)} keys"
            problem = _judge(declared.value_type, item, f"{where}[{key!r:.60}]", judged)
            if problem is not None:
                return problem
        return None
    if declared.sparse or not declared.elem_type:
        return None
    if isinstance(value, np.ndarray):
        element = _element_of_array(value)
        if element is not None and element != declared.elem_type:
            return f"{at} is a tensor of {_type_name(element)}, declared {_type_name(declared.elem_type)}"
        return None
    if not _scalar_of(declared.elem_type, value):
        return f"{at} is {_python_kind(value)} {value!r:.60}, declared {_type_name(declared.elem_type)}"
    return None


def _scalar_of(code: int, value: object) -> bool:
    """Whether the numpy API's scalar `value` (a key, or a map's value) can be of element type `code`."""
    if code == DataType.STRING:
        return isinstance(value, (str, bytes))
    if code == DataType.BOOL:
        return isinstance(value, (bool, np.bool_))
    if code in _INTEGERS:
        return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
    if code in _REALS:
        return isinstance(value, (float, np.floating))
    return True  # a type the numpy API gives no scalar of: not judged


def _python_kind(value: object) -> str:
    if isinstance(value, np.ndarray):
        return "a tensor"
    name = type(value).__name__
    return {list: "a sequence", dict: "a map", type(None): "no value"}.get(type(value), f"{'an' if name[:1] in 'aeiou' else 'a'} {name}")


def _article(kind: str) -> str:
    return {"tensor": "a tensor", "sequence": "a sequence", "map": "a map", "none": "no value"}.get(kind, "another non-tensor value")


def _type_name(code: int) -> str:
    try:
        return DataType(code).name
    except ValueError:
        return str(code)


def _shape_text(shape: tuple[int | str | None, ...]) -> str:
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in shape) + "]"
