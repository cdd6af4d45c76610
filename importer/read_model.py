"""Readers for ModelProto, GraphProto, NodeProto, OperatorSetIdProto, FunctionProto and TrainingInfoProto.

Owns the message structure of a model file (docs/import-rules.md §2) and the model
checks: ir_version present and at least 3, a graph present. Each nested
message is one nesting level; a failure inside a field is given that field's
path segment on its way up (`node[3]`, `attribute[1]`, `g`, ...).

`read_graph` and `read_node` (and `read_value_info` in read_types.py) repeat
the key and length steps of `wire.FieldCursor` inline, on purpose: they run
once per field of node-heavy models, where a call per field costs a fifth of
the import time. The rules themselves live in wire.py (`read_key`,
`read_length`, `skip_scalar`); only the one-byte fast paths are repeated.
"""

from __future__ import annotations

from typing import Any, Final

from importer.errors import ReadFailure, invalid
from importer.messages import Attribute, Function, Graph, Model, Node, OperatorSetId, StringStringEntry, TrainingInfo, ValueInfo
from importer.read_attribute import read_attribute
from importer.read_context import ReadContext, check_nesting, too_deep
from importer.read_tensor import read_sparse_tensor, read_string_pair, read_tensor
from importer.read_types import read_value_info
from importer.tensor import SparseTensor, Tensor
from importer.wire import FieldCursor, as_int64, invalid_utf8, overrun, read_key, read_length, read_string, skip_scalar

MIN_IR_VERSION: Final = 3


def read_model(ctx: ReadContext) -> Model:
    """Read the ModelProto that fills the whole buffer, and check it."""
    buf = ctx.buf
    ir_version: int | None = None
    ir_offset: int | None = None
    model_version = 0
    producer_name = producer_version = domain = doc_string = ""
    opsets: list[OperatorSetId] = []
    metadata: list[StringStringEntry] = []
    graph: Graph | None = None
    functions: list[Function] = []
    training: list[TrainingInfo] = []
    fields = FieldCursor(buf, 0, len(buf))
    while fields.next():
        key, at, a, b, value = fields.key, fields.at, fields.start, fields.stop, fields.value
        if key == 0x08:
            ir_version, ir_offset = as_int64(value), at
        elif key == 0x3A:
            try:
                graph = read_graph(ctx, a, b, 1, at)
            except ReadFailure as failure:
                raise failure.within("graph", at) from None
        elif key == 0x42:
            try:
                opsets.append(read_opset_id(ctx, a, b, 1, at))
            except ReadFailure as failure:
                raise failure.within(f"opset_import[{len(opsets)}]", at) from None
        elif key == 0x12:
            producer_name = read_string(buf, a, b, at, "producer_name")
        elif key == 0x1A:
            producer_version = read_string(buf, a, b, at, "producer_version")
        elif key == 0x22:
            domain = read_string(buf, a, b, at, "domain")
        elif key == 0x28:
            model_version = as_int64(value)
        elif key == 0x32:
            doc_string = read_string(buf, a, b, at, "doc_string")
        elif key == 0x72:
            try:
                metadata.append(StringStringEntry(*read_string_pair(ctx, a, b, 1)))
            except ReadFailure as failure:
                raise failure.within(f"metadata_props[{len(metadata)}]", at) from None
        elif key == 0xCA:
            try:
                functions.append(read_function(ctx, a, b, 1, at))
            except ReadFailure as failure:
                raise failure.within(f"functions[{len(functions)}]", at) from None
        elif key == 0xA2:
            try:
                training.append(read_training_info(ctx, a, b, 1, at))
            except ReadFailure as failure:
                raise failure.within(f"training_info[{len(training)}]", at) from None
    if ir_version is None:
        raise invalid("ir_version is absent", None, "ir_version")
    if ir_version < MIN_IR_VERSION:
        raise invalid(f"ir_version {ir_version} is below {MIN_IR_VERSION}", ir_offset, "ir_version")
    if graph is None:
        raise invalid("the model has no graph", None, "graph")
    return Model(
        ir_version=ir_version,
        model_version=model_version,
        producer_name=producer_name,
        producer_version=producer_version,
        domain=domain,
        doc_string=doc_string,
        opset_import=opsets,
        metadata_props=metadata,
        graph=graph,
        functions=functions,
        training_info=training,
    )


def read_opset_id(ctx: ReadContext, start: int, stop: int, depth: int, offset: int) -> OperatorSetId:
    check_nesting(ctx, depth)
    domain = ""
    version = 0
    fields = FieldCursor(ctx.buf, start, stop)
    while fields.next():
        key, at, a, b, value = fields.key, fields.at, fields.start, fields.stop, fields.value
        if key == 0x0A:
            domain = read_string(ctx.buf, a, b, at, "domain")
        elif key == 0x10:
            version = as_int64(value)
    return OperatorSetId(domain, version, offset)


def read_graph(ctx: ReadContext, start: int, stop: int, depth: int, offset: int) -> Graph:
    """Read a GraphProto at buf[start:stop] (`offset`: the key holding it)."""
    if depth > ctx.max_nesting:
        raise too_deep(ctx)
    buf = ctx.buf
    inner = depth + 1
    name = doc_string = ""
    nodes: list[Node] = []
    initializers: list[Tensor] = []
    sparse: list[SparseTensor] = []
    inputs: list[ValueInfo] = []
    outputs: list[ValueInfo] = []
    value_info: list[ValueInfo] = []
    lists: dict[int, list[Any]] = {0x0A: nodes, 0x6A: value_info, 0x2A: initializers, 0x5A: inputs, 0x62: outputs, 0x7A: sparse}
    pos = start
    while pos < stop:
        at = pos
        key = buf[pos]
        pos += 1
        if key >= 0x80:
            key, pos = read_key(buf, at, stop)
        if key & 7 != 2 or key < 8:
            pos = skip_scalar(buf, pos, stop, key, at)
            continue
        size = buf[pos] if pos < stop else 0x80
        if size < 0x80:
            pos += 1
            end = pos + size
            if end > stop:
                raise overrun(size, stop - pos, at)
        else:
            pos, end = read_length(buf, pos, stop, at)
        try:
            if key == 0x0A:
                nodes.append(read_node(ctx, pos, end, inner, at))
            elif key == 0x6A:
                value_info.append(read_value_info(ctx, pos, end, inner, at))
            elif key == 0x2A:
                tensor = read_tensor(ctx, pos, end, inner)
                tensor.offset = at
                initializers.append(tensor)
            elif key == 0x5A:
                inputs.append(read_value_info(ctx, pos, end, inner, at))
            elif key == 0x62:
                outputs.append(read_value_info(ctx, pos, end, inner, at))
            elif key == 0x7A:
                sparse_tensor = read_sparse_tensor(ctx, pos, end, inner)
                sparse_tensor.offset = at
                sparse.append(sparse_tensor)
            elif key == 0x12:
                name = read_string(buf, pos, end, at, "name")
            elif key == 0x52:
                doc_string = read_string(buf, pos, end, at, "doc_string")
        except ReadFailure as failure:
            if key not in lists:
                raise  # a string field of this graph: already named
            raise failure.within(f"{_GRAPH_LISTS[key]}[{len(lists[key])}]", at) from None
        pos = end
    return Graph(name, doc_string, nodes, initializers, sparse, inputs, outputs, value_info, offset)


_GRAPH_LISTS: Final = {0x0A: "node", 0x6A: "value_info", 0x2A: "initializer", 0x5A: "input", 0x62: "output", 0x7A: "sparse_initializer"}
_NODE_STRING_LABELS: Final = {0x1A: "name", 0x22: "op_type", 0x3A: "domain", 0x42: "overload", 0x32: "doc_string"}


def read_node(ctx: ReadContext, start: int, stop: int, depth: int, offset: int) -> Node:
    """Read a NodeProto at buf[start:stop] (`offset`: the key holding it).

    The hot loop of node-heavy models: fields and strings are read inline;
    invalid UTF-8 is placed by the handler at the end.
    """
    if depth > ctx.max_nesting:
        raise too_deep(ctx)
    buf = ctx.buf
    inputs: list[str] = []
    outputs: list[str] = []
    name = op_type = domain = overload = doc_string = ""
    attributes: list[Attribute] | None = None
    pos = start
    key = at = 0
    try:
        while pos < stop:
            at = pos
            key = buf[pos]
            pos += 1
            if key >= 0x80:
                key, pos = read_key(buf, at, stop)
            if key & 7 != 2 or key < 8:
                pos = skip_scalar(buf, pos, stop, key, at)
                continue
            size = buf[pos] if pos < stop else 0x80
            if size < 0x80:
                pos += 1
                end = pos + size
                if end > stop:
                    raise overrun(size, stop - pos, at)
            else:
                pos, end = read_length(buf, pos, stop, at)
            if key == 0x0A:
                inputs.append(buf[pos:end].decode())
            elif key == 0x12:
                outputs.append(buf[pos:end].decode())
            elif key == 0x1A:
                name = buf[pos:end].decode()
            elif key == 0x22:
                op_type = buf[pos:end].decode()
            elif key == 0x2A:
                if attributes is None:
                    attributes = []
                try:
                    attributes.append(read_attribute(ctx, pos, end, depth + 1, read_graph))
                except ReadFailure as failure:
                    raise failure.within(f"attribute[{len(attributes)}]", at) from None
            elif key == 0x3A:
                domain = buf[pos:end].decode()
            elif key == 0x42:
                overload = buf[pos:end].decode()
            elif key == 0x32:
                doc_string = buf[pos:end].decode()
            pos = end
    except UnicodeDecodeError as error:
        if key == 0x0A:
            label = f"input[{len(inputs)}]"
        elif key == 0x12:
            label = f"output[{len(outputs)}]"
        else:
            label = _NODE_STRING_LABELS[key]
        raise invalid_utf8(error, at, label) from None
    return Node(inputs, outputs, name, op_type, domain, overload, attributes if attributes is not None else (), doc_string, offset)


def read_function(ctx: ReadContext, start: int, stop: int, depth: int, offset: int) -> Function:
    """Read a FunctionProto, as written (its body is not resolved)."""
    check_nesting(ctx, depth)
    buf = ctx.buf
    name = domain = overload = doc_string = ""
    inputs: list[str] = []
    outputs: list[str] = []
    attribute_names: list[str] = []
    attributes: list[Attribute] = []
    nodes: list[Node] = []
    opsets: list[OperatorSetId] = []
    fields = FieldCursor(buf, start, stop)
    while fields.next():
        key, at, a, b = fields.key, fields.at, fields.start, fields.stop
        if key == 0x0A:
            name = read_string(buf, a, b, at, "name")
        elif key == 0x22:
            inputs.append(read_string(buf, a, b, at, "input", len(inputs)))
        elif key == 0x2A:
            outputs.append(read_string(buf, a, b, at, "output", len(outputs)))
        elif key == 0x32:
            attribute_names.append(read_string(buf, a, b, at, "attribute", len(attribute_names)))
        elif key == 0x3A:
            try:
                nodes.append(read_node(ctx, a, b, depth + 1, at))
            except ReadFailure as failure:
                raise failure.within(f"node[{len(nodes)}]", at) from None
        elif key == 0x42:
            doc_string = read_string(buf, a, b, at, "doc_string")
        elif key == 0x4A:
            try:
                opsets.append(read_opset_id(ctx, a, b, depth + 1, at))
            except ReadFailure as failure:
                raise failure.within(f"opset_import[{len(opsets)}]", at) from None
        elif key == 0x52:
            domain = read_string(buf, a, b, at, "domain")
        elif key == 0x5A:
            try:
                attributes.append(read_attribute(ctx, a, b, depth + 1, read_graph))
            except ReadFailure as failure:
                raise failure.within(f"attribute_proto[{len(attributes)}]", at) from None
        elif key == 0x6A:
            overload = read_string(buf, a, b, at, "overload")
    return Function(name, domain, overload, doc_string, inputs, outputs, attribute_names, attributes, nodes, opsets, offset)


def read_training_info(ctx: ReadContext, start: int, stop: int, depth: int, offset: int) -> TrainingInfo:
    """Read a TrainingInfoProto, as written: its two graphs are read like the
    main graph (their tensors, and their external data, too) but not resolved."""
    check_nesting(ctx, depth)
    initialization: Graph | None = None
    algorithm: Graph | None = None
    bindings: dict[int, list[StringStringEntry]] = {0x1A: [], 0x22: []}
    fields = FieldCursor(ctx.buf, start, stop)
    while fields.next():
        key, at, a, b = fields.key, fields.at, fields.start, fields.stop
        label = _TRAINING_FIELDS.get(key)
        if label is None:
            continue
        try:
            if key == 0x0A:
                initialization = read_graph(ctx, a, b, depth + 1, at)
            elif key == 0x12:
                algorithm = read_graph(ctx, a, b, depth + 1, at)
            else:
                bindings[key].append(StringStringEntry(*read_string_pair(ctx, a, b, depth + 1)))
        except ReadFailure as failure:
            index = f"[{len(bindings[key])}]" if key in bindings else ""
            raise failure.within(f"{label}{index}", at) from None
    return TrainingInfo(initialization, algorithm, bindings[0x1A], bindings[0x22], offset)


_TRAINING_FIELDS: Final = {0x0A: "initialization", 0x12: "algorithm", 0x1A: "initialization_binding", 0x22: "update_binding"}
