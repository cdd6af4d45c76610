"""The `runtime` stage: will onnxruntime load the model?

Owns `runtime_stage`. Where the check worker has bound the model file and
its external data files for onnxruntime (`service.sandbox.worker.bound_files`:
the inodes checked, read-only, at their paths, and Landlock granting those
files alone), onnxruntime maps the weights itself, with no copy of them (the
result's `weights` is "mapped"):

- a model with external data, every tensor's location among the bound files:
  the session is made from the model's path, as a user would;
- a model whose large weights are inline: from the model's bytes with those
  initializers marked as external data in the model file itself, at their
  raw data's offset (`weights_aside` with `in_file`; onnxruntime's folder
  for external data set to the model's): onnxruntime maps those bytes of the
  bound file and uses them in place, where from the path it would copy the
  file into a string and parse the weights out of it (BERT-base's 418 MiB:
  0.27 s against 0.61 s, and 0.44 s handed over as below). A model that
  fails to load so is tried again handed over, which tells its failure.

Otherwise (a host without mount namespaces, a file the worker may not open
by name) it creates an onnxruntime `InferenceSession` from the model's bytes
with every external tensor given from the importer's own memory, so that
onnxruntime opens no file of its own (`weights` "handed over" where any is):

- initializers of the main graph with external data are handed over as
  `OrtValue`s over numpy arrays that view the importer's mapped bytes
  (`SessionOptions.add_external_initializers`, no copy);
- so are the main graph's large inline initializers (64 KiB of raw data or
  more): the bytes onnxruntime is given are a copy of the model's without
  their values, marked as external data (`weights_aside`), so that 400 MiB
  of weights are neither copied for onnxruntime nor parsed by it;
- any other tensor with external data (an initializer of a subgraph, a tensor
  attribute such as a `Constant`'s value, a sparse tensor's parts, a packed
  4-, 2- or 6-bit initializer) cannot be handed over that way: onnxruntime's
  own model checker opens its file. Those are written into a copy of the
  model's bytes (made with onnx, in this worker only) as raw data.

One intra-op and one inter-op thread, spinning off, sequential execution,
the CPU execution provider only, onnxruntime's default graph optimizations
(the level onnxruntime uses when a caller sets none: the verdict is the one a
user gets from `onnxruntime.InferenceSession(path)`).

The session holds views into the model's buffers: keep the model open while
the session is used.

Also owns `place_of_message`, shared with the `smoke` stage: the node an
onnxruntime message names (by name, or by operator type when only one node
has it), placed at its field path and byte offset.

Codes (stable, kebab-case; each finding is an error):

- `runtime-op-not-implemented`: no kernel or function for an operator
  (NOT_IMPLEMENTED, or an op onnxruntime does not register);
- `runtime-invalid-graph`: onnxruntime's checker or type inference refuses
  the graph (INVALID_GRAPH);
- `runtime-invalid-model`: onnxruntime cannot parse the model (INVALID_PROTOBUF);
- `runtime-load-failed`: any other failure of session creation (FAIL,
  INVALID_ARGUMENT, a kernel's constructor refusing its attributes, ...).

The stage is `incomplete` (fail closed) when onnxruntime (or, for the copy
above, onnx) is not installed, when memory runs out, when onnxruntime tries
to open a file, or on any exception it does not expect.
"""

from __future__ import annotations

import importlib
import os
import posixpath
import re
import time
from collections.abc import Iterator
from typing import Any, Final

import numpy as np
import numpy.typing as npt

import importer
from importer.element_types import DataType, has_native_numpy_dtype, raw_layout_dtype
from importer.external_data import location_refusal
from importer.messages import Node
from importer.tensor import FROM_EXTERNAL, Tensor
from importer.tensor_places import INITIALIZER, tensor_places
from service.checks.outcome import HANDED_OVER, MAPPED, Finding, Stage, StageResult, incomplete
from service.checks.stages.weights_aside import weights_set_aside

RUNTIME_OP_NOT_IMPLEMENTED: Final = "runtime-op-not-implemented"
RUNTIME_INVALID_GRAPH: Final = "runtime-invalid-graph"
RUNTIME_INVALID_MODEL: Final = "runtime-invalid-model"
RUNTIME_LOAD_FAILED: Final = "runtime-load-failed"

MISSING_ONNXRUNTIME: Final = "onnxruntime is not installed (install the `runtime` extra)"
MISSING_ONNX: Final = "onnx is not installed (install the `runtime` extra)"
PROVIDERS: Final = ("CPUExecutionProvider",)
LOG_FATAL_ONLY: Final = 4  # onnxruntime logs nothing below fatal: its exceptions carry the message
EXTERNAL_DATA_FOLDER: Final = "session.model_external_initializers_file_folder_path"  # a session from bytes: where its files are

# onnxruntime's exception class name -> our code. The classes live in
# onnxruntime.capi.onnxruntime_pybind11_state, one per status code.
_CODE_OF_STATUS: Final = {
    "NotImplemented": RUNTIME_OP_NOT_IMPLEMENTED,
    "InvalidGraph": RUNTIME_INVALID_GRAPH,
    "InvalidProtobuf": RUNTIME_INVALID_MODEL,
}
_NOT_REGISTERED: Final = re.compile(r"is not a registered function/op")
# Messages of a limit, not of the model: the stage did not finish.
_OUT_OF_MEMORY: Final = re.compile(r"bad_alloc|Failed to allocate memory|out of memory", re.IGNORECASE)
# onnxruntime tried to open a file (it was given every external tensor: it should not).
_FILE_ACCESS: Final = re.compile(r"should be stored in|not regular file|NO_SUCHFILE|No such file|Permission denied|open file")

# How onnxruntime names a node, most specific first. Each pattern has the
# groups `name` and/or `op` (and maybe `domain`).
_NODE_PATTERNS: Final = tuple(
    re.compile(pattern)
    for pattern in (
        r"implementation for (?P<op>[\w.]+)\(\d+\) node with name '(?P<name>[^']*)'",
        r"kernel for (?P<op>[\w.]+)\(\d+\) \(node:'(?P<name>[^']*)'",
        r"running (?P<op>[\w.]+) node\. Name:'(?P<name>[^']*)'",
        r"In Node, \(\"(?P<name>[^\"]*)\", (?P<op>[\w.]+), \"(?P<domain>[^\"]*)\"",
        r"Node \((?P<name>[^)]*)\) Op \((?P<op>[^)]*)\)",
        r"of operator \((?P<op>[\w.]+)\) in node \((?P<name>[^)]*)\)",
        r"[Nn]ode \((?P<name>[^)]*)\)",
        r"Node:(?P<name>\S+)",
        r"Name:'(?P<name>[^']*)'",
        r"(?P<domain>[\w.]*):(?P<op>\w+)\(-?\d+\) is not a registered function/op",
    )
)


class _OnnxruntimeMissing(Exception):
    pass


def load_onnxruntime() -> Any:
    """onnxruntime, typed Any (it ships no type information); raises
    _OnnxruntimeMissing when it is not installed."""
    try:
        return importlib.import_module("onnxruntime")
    except ImportError:
        raise _OnnxruntimeMissing from None


def session_options(ort: Any) -> Any:
    """The options every session of these stages is made with."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = LOG_FATAL_ONLY
    return options


def runtime_stage(model: importer.OnnxModel, mapped: frozenset[str] | None = None) -> tuple[StageResult, object | None]:
    """The `runtime` stage's result and the session it made (None if none).
    `mapped`: where the model file is bound for onnxruntime to open by name,
    the external locations bound beside it (`service.sandbox.worker.bound_files`);
    None where nothing is."""
    started = time.monotonic()
    result, session = _runtime_stage(model, mapped)
    result.seconds = time.monotonic() - started
    return result, session


def _runtime_stage(model: importer.OnnxModel, mapped: frozenset[str] | None) -> tuple[StageResult, object | None]:
    try:
        ort = load_onnxruntime()
    except _OnnxruntimeMissing:
        return incomplete("runtime", MISSING_ONNXRUNTIME), None
    if any(owner.closed for owner in model.owners):
        return incomplete("runtime", "the model was closed before the runtime stage"), None
    locations = external_locations(model)
    if mapped is not None and not locations:
        return _weights_in_place(model, ort)
    from_path = mapped is not None and locations <= mapped
    result, session = _session_from_path(model, ort) if from_path else _handed_over(model, ort)
    if locations and result.status != "incomplete":
        result.weights = MAPPED if from_path else HANDED_OVER  # how onnxruntime got the weights it loaded (or refused)
    return result, session


def _weights_in_place(model: importer.OnnxModel, ort: Any) -> tuple[StageResult, object | None]:
    """The session over the bound model file, its large inline weights mapped
    by onnxruntime where they lie in the file (see the module comment); from
    the path when none is large. A file name onnxruntime would not take as a
    location (a backslash, say), and a load that fails (the failure is then
    told by the weights handed over, the way every model was checked before:
    the copy named in the file is this stage's, not the model's), hand the
    weights over instead."""
    path = model.owners[0].name
    name = os.path.basename(path)
    if "\\" in name or location_refusal(name) is not None:
        return _handed_over(model, ort)
    aside = weights_set_aside(model, lambda tensor: True, in_file=name)
    if aside is None:
        return _session_from_path(model, ort)
    options = session_options(ort)
    options.add_session_config_entry(EXTERNAL_DATA_FOLDER, os.path.dirname(path))
    try:
        session = ort.InferenceSession(aside[0], options, providers=list(PROVIDERS))
    except MemoryError:
        return incomplete("runtime", "out of memory while onnxruntime loaded the model"), None
    except Exception:
        return _handed_over(model, ort)
    result = StageResult("runtime").finish()
    result.weights = MAPPED
    return result, session


def _session_from_path(model: importer.OnnxModel, ort: Any) -> tuple[StageResult, object | None]:
    """The session onnxruntime makes from the model's path, its external files opened and mapped by itself."""
    try:
        session = ort.InferenceSession(model.owners[0].name, session_options(ort), providers=list(PROVIDERS))
    except MemoryError:
        return incomplete("runtime", "out of memory while onnxruntime loaded the model"), None
    except Exception as error:
        return _load_failure(model, error), None
    return StageResult("runtime").finish(), session


def _handed_over(model: importer.OnnxModel, ort: Any) -> tuple[StageResult, object | None]:
    try:
        options = session_options(ort)
        given, embed = _external_tensors(model)
        aside = None if embed else weights_set_aside(model, _viewable)
        if embed:
            try:
                data = _with_embedded(model, embed)
            except _OnnxMissing:
                return incomplete("runtime", MISSING_ONNX), None
        elif aside is not None:
            data, moved = aside  # large inline weights handed over as external ones: neither copied nor parsed
            given += moved
        else:
            buffer = model.owners[0].parse_buffer()
            data = buffer if isinstance(buffer, bytes) else bytes(buffer)  # onnxruntime takes bytes only (and copies them)
        keep: list[object] = []
        if given:
            names = [tensor.name for tensor in given]
            values = [_ortvalue_of(ort, tensor) for tensor in given]
            options.add_external_initializers(names, values)
            keep.extend(values)
    except MemoryError:
        return incomplete("runtime", "out of memory while giving onnxruntime the model's bytes"), None
    except Exception as error:  # the importer's model closed, a tensor numpy cannot view, ...
        return incomplete("runtime", f"the model could not be given to onnxruntime: {_describe(error)}"), None
    try:
        session = ort.InferenceSession(data, options, providers=list(PROVIDERS))
    except MemoryError:
        return incomplete("runtime", "out of memory while onnxruntime loaded the model"), None
    except Exception as error:
        return _load_failure(model, error), None
    # The OrtValues view the importer's memory; the session uses them in place.
    session._onnx_import_keep = (options, keep)
    return StageResult("runtime").finish(), session


def _load_failure(model: importer.OnnxModel, error: Exception) -> StageResult:
    kind = type(error).__name__
    message = str(error)
    if not type(error).__module__.startswith("onnxruntime"):
        return incomplete("runtime", f"onnxruntime failed unexpectedly: {_describe(error)}")
    if _OUT_OF_MEMORY.search(message):
        return incomplete("runtime", f"out of memory while onnxruntime loaded the model: {message}")
    if kind == "NoSuchFile" or _FILE_ACCESS.search(message):
        return incomplete("runtime", f"onnxruntime tried to open a file of its own: {message}")
    code = _CODE_OF_STATUS.get(kind, RUNTIME_LOAD_FAILED)
    if _NOT_REGISTERED.search(message):
        code = RUNTIME_OP_NOT_IMPLEMENTED
    result = StageResult("runtime")
    result.add(finding_at_message(model, "runtime", code, f"onnxruntime cannot load the model: {message}"))
    return result.finish()


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


# --- external data, from the importer's memory


def _external_tensors(model: importer.OnnxModel) -> tuple[list[Tensor], list[tuple[str, Tensor]]]:
    """The tensors with external data: those handed over as external
    initializers, and those (with their field paths) written into a copy of
    the model."""
    given: list[Tensor] = []
    embed: list[tuple[str, Tensor]] = []
    for place in tensor_places(model.proto):
        tensor = place.tensor
        if tensor.source != FROM_EXTERNAL:
            continue
        if place.role == INITIALIZER and place.field_path.startswith("ModelProto.graph.initializer[") and _viewable(tensor):
            given.append(tensor)
        else:
            embed.append((place.field_path, tensor))
    return given, embed


def external_locations(model: importer.OnnxModel) -> frozenset[str]:
    """The locations (normalised) of every tensor with external data, wherever it is."""
    found = set()
    for place in tensor_places(model.proto):
        tensor = place.tensor
        if tensor.source == FROM_EXTERNAL:
            found.add(posixpath.normpath(str((tensor.external_data or {}).get("location", ""))))
    return frozenset(found)


def _viewable(tensor: Tensor) -> bool:
    """Whether onnxruntime can take the tensor's bytes as they are, one numpy item per element."""
    return raw_layout_dtype(DataType(tensor.data_type)) is not None


def _ortvalue_of(ort: Any, tensor: Tensor) -> Any:
    """An OrtValue over the tensor's bytes where the importer holds them (no copy)."""
    data_type = DataType(tensor.data_type)
    array: npt.NDArray[Any] = np.frombuffer(tensor.data, dtype=raw_layout_dtype(data_type)).reshape(tensor.dims)
    if has_native_numpy_dtype(data_type):
        return ort.OrtValue.ortvalue_from_numpy(array)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, int(data_type))  # bfloat16, float8: bit patterns


class _OnnxMissing(Exception):
    pass


def _with_embedded(model: importer.OnnxModel, embed: list[tuple[str, Tensor]]) -> bytes:
    """A copy of the model's bytes with these tensors' values as raw data
    instead of external data (onnx parses and writes it, in this worker)."""
    try:
        onnx: Any = importlib.import_module("onnx")
    except ImportError:
        raise _OnnxMissing from None
    proto = onnx.ModelProto()
    proto.ParseFromString(model.owners[0].parse_buffer())
    for field_path, tensor in embed:
        target = _at_path(proto, field_path)
        target.raw_data = bytes(tensor.data)
        del target.external_data[:]
        target.data_location = onnx.TensorProto.DEFAULT
    data: bytes = proto.SerializeToString()
    return data


_SEGMENT: Final = re.compile(r"(\w+)(?:\[(\d+)\])?")


def _at_path(message: Any, field_path: str) -> Any:
    """The protobuf message at an importer field path (`ModelProto.graph.node[2].attribute[0].t`)."""
    for segment in field_path.split(".")[1:]:
        matched = _SEGMENT.fullmatch(segment)
        if matched is None:
            raise ValueError(f"cannot follow {field_path!r}")
        message = getattr(message, matched.group(1))
        if matched.group(2) is not None:
            message = message[int(matched.group(2))]
    return message


# --- placing what onnxruntime says


def _graph_nodes(model: importer.OnnxModel) -> Iterator[tuple[str, Node]]:
    """Every node of the main graph and its subgraphs, with its field path."""
    for graph in (model.graph, *model.graph.subgraphs()):
        for node in graph.nodes:
            yield f"{graph.path}.node[{node.index}]", node.proto


def node_named(model: importer.OnnxModel, message: str) -> tuple[str, Node] | None:
    """The node an onnxruntime message names, with its field path: by name
    (and operator type, when the message gives one), or, where the name is
    empty or not given, by operator type when exactly one node has it. A
    message about a subgraph names the outer node first and the inner one
    after it: the last mention that fits exactly one node wins. None when no
    mention does."""
    mentions: list[tuple[int, str, str]] = []
    for pattern in _NODE_PATTERNS:
        for matched in pattern.finditer(message):
            groups = matched.groupdict()
            name, op = groups.get("name") or "", groups.get("op") or ""
            if name or op:
                mentions.append((matched.start(), name, op))
    nodes = list(_graph_nodes(model)) if mentions else []
    for _, name, op in sorted(mentions, key=lambda mention: -mention[0]):
        if name:
            fits = [(path, node) for path, node in nodes if node.name == name and (not op or node.op_type == op)]
        else:  # an unnamed node: only its operator type tells
            fits = [(path, node) for path, node in nodes if node.op_type == op]
        if len(fits) == 1:
            return fits[0]
    return None


def finding_at_message(model: importer.OnnxModel, stage: Stage, code: str, message: str) -> Finding:
    """An error finding at the node `message` names, else at the model."""
    try:
        found = node_named(model, message)
    except ReferenceError:
        found = None
    if found is None:
        return Finding(stage, "error", code, message)
    field_path, node = found
    return Finding(stage, "error", code, message, node.name, node.op_type, node.domain, field_path, node.offset)
