"""The `smoke` stage: does the model run, and are its outputs what it declares?

Owns `smoke_stage`: one run of the `runtime` stage's session on inputs made
from the declared types of the graph's inputs (those without an initializer),
then each output's actual type and shape compared with its declaration.

Synthetic inputs: every dimension of a declared shape is its value; a
symbolic one (`dim_param`) takes its value from `dims` (the request's
`dim=NAME:VALUE`), else 1; an unknown one 1. Values: 1 for the float types
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
declared sequence must be a sequence. Optional, map and undeclared outputs
are not compared.

Codes (stable, kebab-case; each finding is an error):

- `smoke-run-failed`: the run failed (placed at the node onnxruntime names);
- `smoke-output-type`: an output's kind or element type is not the declared one;
- `smoke-output-shape`: an output's rank or a dimension is not the declared one.

`incomplete` (fail closed) when memory runs out or on an exception the stage
does not expect.
"""

from __future__ import annotations

import ctypes
import re
import time
from collections.abc import Mapping
from typing import Any, Final

import numpy as np
import numpy.typing as npt

import importer
from importer.element_types import BITS_PER_ELEMENT, DataType, has_native_numpy_dtype, raw_layout_dtype
from importer.messages import OptionalType, SequenceType, TensorType, TypeProto
from service.checks.outcome import Finding, StageResult, incomplete
from service.sandbox.worker.checks.runtime import finding_at_message, load_onnxruntime

SMOKE_RUN_FAILED: Final = "smoke-run-failed"
SMOKE_OUTPUT_TYPE: Final = "smoke-output-type"
SMOKE_OUTPUT_SHAPE: Final = "smoke-output-shape"

NO_SESSION: Final = "the runtime stage made no session"
MAX_SYNTHETIC_INPUT_BYTES: Final = 1 << 30  # the synthetic inputs, all together

_OUT_OF_MEMORY: Final = re.compile(r"bad_alloc|Failed to allocate memory|out of memory", re.IGNORECASE)
_ORT_TYPE: Final = re.compile(r"tensor\((\w+)\)")
_FLOAT_TYPES: Final = frozenset({DataType.FLOAT, DataType.DOUBLE, DataType.FLOAT16, DataType.COMPLEX64, DataType.COMPLEX128})
_BFLOAT16_ONE: Final = 0x3F80
# What an output is, as the run gave it: kind ("tensor", "sequence", "none", "other"), element type, shape.
_Actual = tuple[str, int | None, tuple[int, ...] | None]


class _Skip(Exception):
    """An input the stage cannot make: the stage is skipped, with this reason."""


class _TooLarge(Exception):
    """Inputs past MAX_SYNTHETIC_INPUT_BYTES: a limit, so the stage is incomplete."""


def smoke_stage(
    session: object | None,
    model: importer.OnnxModel,
    dims: Mapping[str, int],
    inputs: Mapping[str, np.ndarray[Any, Any]] | None = None,
    outputs_sink: list[object] | None = None,
) -> StageResult:
    """One run of `session` (the `runtime` stage's) on synthetic inputs, or on
    `inputs` when given; each output checked against its declaration. The
    outputs are appended to `outputs_sink` when given, in the graph's order."""
    started = time.monotonic()
    result = _smoke_stage(session, model, dims, inputs, outputs_sink)
    result.seconds = time.monotonic() - started
    return result


def _smoke_stage(
    session: object | None,
    model: importer.OnnxModel,
    dims: Mapping[str, int],
    inputs: Mapping[str, np.ndarray[Any, Any]] | None,
    outputs_sink: list[object] | None,
) -> StageResult:
    if session is None:
        return StageResult.ended("smoke", "skipped", NO_SESSION)
    run: Any = session
    try:
        ort = load_onnxruntime()
        bound = dict(dims)
        try:
            feeds, types = _feeds(model, bound, inputs)
        except _Skip as skip:
            return StageResult.ended("smoke", "skipped", str(skip))
        except _TooLarge as limit:
            return incomplete("smoke", str(limit))
        try:
            actual = _run(ort, run, feeds, types, outputs_sink)
        except _Skip as skip:
            return StageResult.ended("smoke", "skipped", str(skip))
        except MemoryError:
            return incomplete("smoke", "out of memory during the run")
        except Exception as error:
            message = str(error)
            if not type(error).__module__.startswith("onnxruntime"):
                return incomplete("smoke", f"the run failed unexpectedly: {type(error).__name__}: {message}")
            if _OUT_OF_MEMORY.search(message):
                return incomplete("smoke", f"out of memory during the run: {message}")
            result = StageResult("smoke")
            result.add(finding_at_message(model, "smoke", SMOKE_RUN_FAILED, f"the run on {_what(inputs)} failed: {message}"))
            return result.finish()
        result = StageResult("smoke")
        _compare(model, actual, bound, result)
        return result.finish()
    except MemoryError:
        return incomplete("smoke", "out of memory")
    except Exception as error:
        return incomplete("smoke", f"the smoke run failed unexpectedly: {type(error).__name__}: {error}")


def _what(inputs: Mapping[str, object] | None) -> str:
    return "the given inputs" if inputs is not None else "synthetic inputs"


# --- inputs


def _feeds(
    model: importer.OnnxModel, bound: dict[str, int], given: Mapping[str, np.ndarray[Any, Any]] | None
) -> tuple[dict[str, np.ndarray[Any, Any]], dict[str, int]]:
    """The inputs of the run by name, and each one's element type (DataType value)."""
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
            shape = tuple(_dim(dim, bound) for dim in tensor.shape)
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


def _dim(dim: int | str | None, bound: dict[str, int]) -> int:
    if isinstance(dim, int):
        return dim if dim >= 0 else 1
    if isinstance(dim, str):
        return bound.setdefault(dim, 1)
    return 1


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


def _run(ort: Any, session: Any, feeds: dict[str, np.ndarray[Any, Any]], types: dict[str, int], sink: list[object] | None) -> list[_Actual]:
    """Run once; each output as (kind, element type, shape)."""
    strings = [name for name, code in types.items() if code == DataType.STRING]
    if strings:  # onnxruntime makes no OrtValue of strings: the numpy API takes them
        odd = [name for name, code in types.items() if not has_native_numpy_dtype(DataType(code)) and code != DataType.STRING]
        if odd:
            raise _Skip(f"inputs {strings[0]!r} (strings) and {odd[0]!r} ({DataType(types[odd[0]]).name}) cannot be given in one run")
        outputs = session.run(None, feeds)
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
    results = session.run_with_ort_values(None, values)
    actual = [_actual_of_ortvalue(value) for value in results]
    if sink is not None:
        for value, (kind, element, _) in zip(results, actual, strict=True):
            native = element is not None and (has_native_numpy_dtype(DataType(element)) or element == DataType.STRING)
            sink.append(value.numpy() if kind == "tensor" and native else value)  # else numpy has no dtype: the OrtValue
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
        return ("none", None, None)
    if value.is_tensor():
        return ("tensor", _element_of_ort(str(value.data_type())), tuple(int(size) for size in value.shape()))
    if value.is_tensor_sequence():
        return ("sequence", None, None)
    return ("other", None, None)


_NUMPY_ELEMENT: Final = {
    np.dtype(np.float32): DataType.FLOAT, np.dtype(np.float64): DataType.DOUBLE, np.dtype(np.float16): DataType.FLOAT16,
    np.dtype(np.int8): DataType.INT8, np.dtype(np.int16): DataType.INT16, np.dtype(np.int32): DataType.INT32,
    np.dtype(np.int64): DataType.INT64, np.dtype(np.uint8): DataType.UINT8, np.dtype(np.uint16): DataType.UINT16,
    np.dtype(np.uint32): DataType.UINT32, np.dtype(np.uint64): DataType.UINT64, np.dtype(np.bool_): DataType.BOOL,
    np.dtype(np.complex64): DataType.COMPLEX64, np.dtype(np.complex128): DataType.COMPLEX128,
}  # fmt: skip


def _actual_of_python(output: object) -> _Actual:
    """An output of the numpy API: an array, a list (a sequence), a dict or list of dicts (maps), None."""
    if output is None:
        return ("none", None, None)
    if isinstance(output, np.ndarray):
        array: npt.NDArray[Any] = output
        element = DataType.STRING if array.dtype.kind in "OUS" else _NUMPY_ELEMENT.get(array.dtype)
        return ("tensor", int(element) if element is not None else None, tuple(array.shape))
    if isinstance(output, list) and not any(isinstance(item, dict) for item in output):
        return ("sequence", None, None)
    return ("other", None, None)


# --- the comparison


def _compare(model: importer.OnnxModel, actual: list[_Actual], bound: dict[str, int], result: StageResult) -> None:
    graph = model.graph
    for index, (value, (kind, element, shape)) in enumerate(zip(graph.outputs, actual, strict=False)):
        declared = value.type
        info = graph.proto.output[index]
        place = f"{graph.path}.output[{index}]"

        def error(code: str, message: str, name: str = value.name, at: str = place, offset: int = info.offset) -> None:
            result.add(Finding("smoke", "error", code, f"output {name!r}: {message}", field_path=at, offset=offset))

        if isinstance(declared, SequenceType):
            if kind != "sequence":
                error(SMOKE_OUTPUT_TYPE, f"declared a sequence, the run gave {_article(kind)}")
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
            error(SMOKE_OUTPUT_SHAPE, f"declared {declared_text}, the run gave rank {len(shape)} {list(shape)}")
            continue
        for axis, (dim, size) in enumerate(zip(declared.shape, shape, strict=True)):
            if isinstance(dim, int) and dim >= 0 and dim != size:
                error(SMOKE_OUTPUT_SHAPE, f"dimension {axis} is declared {dim}, the run gave {size} (shape {list(shape)})")
            elif isinstance(dim, str):
                expected = bound.setdefault(dim, size)
                if expected != size:
                    message = f"dimension {axis} is {dim!r}, which is {expected} elsewhere; the run gave {size} (shape {list(shape)})"
                    error(SMOKE_OUTPUT_SHAPE, message)


def _article(kind: str) -> str:
    return {"tensor": "a tensor", "sequence": "a sequence", "none": "no value"}.get(kind, "a map or another non-tensor value")


def _type_name(code: int) -> str:
    try:
        return DataType(code).name
    except ValueError:
        return str(code)


def _shape_text(shape: tuple[int | str | None, ...]) -> str:
    return "[" + ", ".join("?" if dim is None else str(dim) for dim in shape) + "]"
