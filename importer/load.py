"""The public entry points: import a model or a tensor file.

Owns the sequence open -> read -> bind external data -> resolve (`open_model`
and `load_opened_model` apart, for a caller that confines itself between
opening its input and reading a byte of it), and the one place
where an internal `ReadFailure` becomes the public `ModelImportError` (with
the input's name and the root message of its field path). On any refusal
every mapping opened so far is released.
"""

from __future__ import annotations

import os
from typing import BinaryIO, Final

from importer.data_owner import DataOwner
from importer.errors import ErrorKind, ModelImportError, ReadFailure
from importer.external_data import ExternalDataBinder, path_of_tensor
from importer.external_scan import scan_external_locations
from importer.gc_pause import pause_gc, resume_gc
from importer.graph import OnnxModel, ResolvedGraph
from importer.limits import MAX_PROTOBUF_BYTES, Limits
from importer.messages import Model
from importer.read_context import ReadContext
from importer.read_model import read_model
from importer.read_tensor import read_tensor
from importer.resolve import GraphResolver, collect_opsets
from importer.source import ConfinedOpener, confined_descriptor, open_file
from importer.tensor import Tensor
from importer.wire import Buffer

BytesLike = bytes | bytearray | memoryview
_DEFAULT_LIMITS: Final = Limits()  # immutable: shared by every call that gives none


def load_model(
    path: str | os.PathLike[str],
    *,
    external_data_dir: str | os.PathLike[str] | None = None,
    limits: Limits | None = None,
) -> OnnxModel:
    """Import the model file at `path`; external data is looked up in
    `external_data_dir`, by default the model's own directory."""
    return load_opened_model(open_model(path, limits=limits), external_data_dir=external_data_dir, limits=limits)


def open_model(path: str | os.PathLike[str], *, limits: Limits | None = None) -> DataOwner:
    """Open (read or map) the model file at `path` without reading a byte of
    its contents as protobuf: for `load_opened_model` or `opened_external_locations`.
    Refuses what `load_model` refuses in opening (not found, not a regular
    file, hard-linked unless allowed, too large)."""
    limits = limits or _DEFAULT_LIMITS
    return open_file(path, os.fspath(path), allow_hard_links=limits.allow_hard_links)


def load_opened_model(
    owner: DataOwner,
    *,
    external_data_dir: str | os.PathLike[str] | None = None,
    limits: Limits | None = None,
    external_opener: ConfinedOpener = confined_descriptor,
    resolve: bool = True,
) -> OnnxModel:
    """Import the model `open_model` opened (its name: the path it was opened
    by); external data is looked up in `external_data_dir`, by default the
    model's own directory, each file opened by `external_opener` (by default
    here, with `importer.source.confined_descriptor`'s rules). The owner is
    closed on a refusal. With `resolve=False` the graph is resolved only when
    `model.graph` is first asked for (a refusal of resolution is raised
    there, and closes nothing): for a caller that may need only the model as
    read (half the import of a 200,000-node model)."""
    limits = limits or _DEFAULT_LIMITS
    directory = None if external_data_dir is None else os.fspath(external_data_dir)  # None: the model's folder, if a tensor needs it
    return _import_model(
        owner, owner.name, directory, limits, beside_model=external_data_dir is None, opener=external_opener, resolve=resolve
    )


def load_model_bytes(
    data: BytesLike,
    *,
    name: str = "<bytes>",
    external_data_dir: str | os.PathLike[str] | None = None,
    limits: Limits | None = None,
) -> OnnxModel:
    """Import a model from memory. Tensor data stays a view into `data`.
    External data is only read when `external_data_dir` is given."""
    owner = DataOwner(name, _byte_view(data, name))
    directory = os.fspath(external_data_dir) if external_data_dir is not None else None
    return _import_model(owner, name, directory, limits or _DEFAULT_LIMITS)


def load_model_stream(
    stream: BinaryIO,
    *,
    name: str = "<stream>",
    external_data_dir: str | os.PathLike[str] | None = None,
    limits: Limits | None = None,
) -> OnnxModel:
    """Import a model read from a binary stream (read whole, at most 2^31-1
    bytes). External data is only read when `external_data_dir` is given."""
    data = stream.read(MAX_PROTOBUF_BYTES + 1)
    return load_model_bytes(data, name=name, external_data_dir=external_data_dir, limits=limits)


def external_locations(path: str | os.PathLike[str], *, limits: Limits | None = None) -> list[str]:
    """The external data files the model at `path` names, each once (its
    location as checked, normalized), in the order its tensors first name
    them. Reads the model file only, and of it only the fields that can hold
    a tensor (`importer.external_scan`): a caller that must fetch those files
    first (from object storage, say) learns which, and nothing is bound or
    resolved. Refuses a location the import refuses (absolute, `..`, more
    than `max_external_files`) and a field malformed on the way, at the
    field path and byte offset the import gives; the rest of the model is
    for the import to judge."""
    return opened_external_locations(open_model(path, limits=limits), limits=limits)


def opened_external_locations(owner: DataOwner, *, limits: Limits | None = None) -> list[str]:
    """`external_locations` of the model `open_model` opened; the owner is closed."""
    try:
        return scan_external_locations(owner.parse_buffer(), limits or _DEFAULT_LIMITS)
    except ReadFailure as failure:
        raise failure.to_public("ModelProto", owner.name) from None
    finally:
        owner.close()


def load_tensor(path: str | os.PathLike[str], *, limits: Limits | None = None) -> Tensor:
    """Read a file holding one TensorProto (as in ONNX's test data)."""
    name = os.fspath(path)
    return _import_tensor(open_file(path, name), name, limits or _DEFAULT_LIMITS)


def load_tensor_bytes(data: BytesLike, *, name: str = "<bytes>", limits: Limits | None = None) -> Tensor:
    return _import_tensor(DataOwner(name, _byte_view(data, name)), name, limits or _DEFAULT_LIMITS)


def _byte_view(data: BytesLike, name: str) -> memoryview:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if len(view) > MAX_PROTOBUF_BYTES:
        raise ModelImportError(
            ErrorKind.UNSUPPORTED,
            f"input is {len(view)} bytes, more than the protobuf limit of {MAX_PROTOBUF_BYTES}",
            input_name=name,
        )
    return view.toreadonly()


class _Resolver:
    """A model's graph resolution, put off until it is asked for (`load_opened_model(resolve=False)`)."""

    def __init__(self, buf: Buffer, opsets: dict[str, int], model: Model, name: str) -> None:
        self.buf = buf
        self.opsets = opsets
        self.model = model
        self.name = name

    def resolve(self) -> ResolvedGraph:
        was_collecting = pause_gc()
        try:
            return GraphResolver(self.buf, self.opsets).resolve_model(self.model)
        except ReadFailure as failure:
            raise failure.to_public("ModelProto", self.name) from None
        finally:
            resume_gc(was_collecting)


def _import_model(
    owner: DataOwner,
    name: str,
    directory: str | None,
    limits: Limits,
    *,
    beside_model: bool = False,
    opener: ConfinedOpener = confined_descriptor,
    resolve: bool = True,
) -> OnnxModel:
    was_collecting = pause_gc()
    try:
        return _read_bind_resolve(owner, name, directory, limits, beside_model, opener, resolve)
    finally:
        resume_gc(was_collecting)


def _read_bind_resolve(
    owner: DataOwner, name: str, directory: str | None, limits: Limits, beside_model: bool, opener: ConfinedOpener, resolve: bool
) -> OnnxModel:
    owners = [owner]
    try:
        ctx = ReadContext(owner.parse_buffer(), owner, limits)
        model = read_model(ctx)
        if beside_model and ctx.external_tensors:
            directory = os.path.dirname(os.path.abspath(name))
        binder = ExternalDataBinder(directory, limits, opener)
        try:
            for tensor in ctx.external_tensors:
                try:
                    binder.bind(tensor)
                except ReadFailure as failure:
                    raise failure.within(path_of_tensor(model, tensor), tensor.offset) from None
        finally:
            owners.extend(binder.owners.values())
        opsets = collect_opsets(model.opset_import)
        if not resolve:
            return OnnxModel(model, None, opsets, name, owners, _Resolver(ctx.buf, opsets, model, name).resolve)
        graph = GraphResolver(ctx.buf, opsets).resolve_model(model)
        return OnnxModel(model, graph, opsets, name, owners)
    except ReadFailure as failure:
        _close_all(owners)
        raise failure.to_public("ModelProto", name) from None
    except BaseException:
        _close_all(owners)
        raise


def _import_tensor(owner: DataOwner, name: str, limits: Limits) -> Tensor:
    buf = owner.parse_buffer()
    try:
        return read_tensor(ReadContext(buf, owner, limits), 0, len(buf), 0)
    except ReadFailure as failure:
        owner.close()
        raise failure.to_public("TensorProto", name) from None


def _close_all(owners: list[DataOwner]) -> None:
    for owner in owners:
        owner.close()
