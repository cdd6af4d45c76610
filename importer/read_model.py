"""Readers for ModelProto, GraphProto, NodeProto, OperatorSetIdProto and FunctionProto.

Owns the message structure of a model file (seed section 2) and the model
checks: ir_version present and at least 3, a graph present. Each nested
message is one nesting level; a failure inside a field is given that field's
path segment on its way up (`node[3]`, `attribute[1]`, `g`, ...).
"""

from __future__ import annotations

from collections.abc import Sequence

from importer.errors import ReadFailure, invalid
from importer.messages import Attribute, Function, Graph, Model, Node, OperatorSetId, StringStringEntry, ValueInfo
from importer.read_attribute import read_attribute
from importer.read_context import ReadContext, check_nesting
from importer.read_tensor import read_sparse_tensor, read_string_pair, read_tensor
from importer.read_types import read_value_info
from importer.tensor import SparseTensor, Tensor
from importer.wire import as_int64, iter_fields, read_string

MIN_IR_VERSION = 3


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
    for key, at, a, b, value in iter_fields(buf, 0, len(buf)):
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
    )


def read_opset_id(ctx: ReadContext, start: int, stop: int, depth: int, offset: int) -> OperatorSetId:
    check_nesting(ctx, depth)
    domain = ""
    version = 0
    for key, at, a, b, value in iter_fields(ctx.buf, start, stop):
        if key == 0x0A:
            domain = read_string(ctx.buf, a, b, at, "domain")
        elif key == 0x10:
            version = as_int64(value)
    return OperatorSetId(domain, version, offset)


def read_graph(ctx: ReadContext, start: int, stop: int, depth: int, offset: int) -> Graph:
    """Read a GraphProto at buf[start:stop] (`offset`: the key holding it)."""
    check_nesting(ctx, depth)
    buf = ctx.buf
    inner = depth + 1
    name = doc_string = ""
    nodes: list[Node] = []
    initializers: list[Tensor] = []
    sparse: list[SparseTensor] = []
    inputs: list[ValueInfo] = []
    outputs: list[ValueInfo] = []
    value_info: list[ValueInfo] = []
    for key, at, a, b, _ in iter_fields(buf, start, stop):
        if key == 0x12:
            name = read_string(buf, a, b, at, "name")
        elif key == 0x52:
            doc_string = read_string(buf, a, b, at, "doc_string")
        else:
            try:
                if key == 0x0A:
                    nodes.append(read_node(ctx, a, b, inner, at))
                elif key == 0x2A:
                    tensor = read_tensor(ctx, a, b, inner)
                    tensor.offset = at
                    initializers.append(tensor)
                elif key == 0x5A:
                    inputs.append(read_value_info(ctx, a, b, inner, at))
                elif key == 0x62:
                    outputs.append(read_value_info(ctx, a, b, inner, at))
                elif key == 0x6A:
                    value_info.append(read_value_info(ctx, a, b, inner, at))
                elif key == 0x7A:
                    sparse_tensor = read_sparse_tensor(ctx, a, b, inner)
                    sparse_tensor.offset = at
                    sparse.append(sparse_tensor)
            except ReadFailure as failure:
                segment = _graph_segment(key, nodes, initializers, sparse, inputs, outputs, value_info)
                raise failure.within(segment, at) from None
    return Graph(name, doc_string, nodes, initializers, sparse, inputs, outputs, value_info, offset)


def _graph_segment(key: int, *lists: Sequence[object]) -> str:
    nodes, initializers, sparse, inputs, outputs, value_info = lists
    named = {0x0A: ("node", nodes), 0x2A: ("initializer", initializers), 0x7A: ("sparse_initializer", sparse),
             0x5A: ("input", inputs), 0x62: ("output", outputs), 0x6A: ("value_info", value_info)}  # fmt: skip
    label, items = named[key]
    return f"{label}[{len(items)}]"


def read_node(ctx: ReadContext, start: int, stop: int, depth: int, offset: int) -> Node:
    """Read a NodeProto at buf[start:stop] (`offset`: the key holding it)."""
    check_nesting(ctx, depth)
    buf = ctx.buf
    inputs: list[str] = []
    outputs: list[str] = []
    name = op_type = domain = overload = doc_string = ""
    attributes: list[Attribute] = []
    for key, at, a, b, _ in iter_fields(buf, start, stop):
        if key == 0x0A:
            inputs.append(read_string(buf, a, b, at, "input", len(inputs)))
        elif key == 0x12:
            outputs.append(read_string(buf, a, b, at, "output", len(outputs)))
        elif key == 0x22:
            op_type = read_string(buf, a, b, at, "op_type")
        elif key == 0x1A:
            name = read_string(buf, a, b, at, "name")
        elif key == 0x2A:
            try:
                attributes.append(read_attribute(ctx, a, b, depth + 1, at, read_graph))
            except ReadFailure as failure:
                raise failure.within(f"attribute[{len(attributes)}]", at) from None
        elif key == 0x3A:
            domain = read_string(buf, a, b, at, "domain")
        elif key == 0x42:
            overload = read_string(buf, a, b, at, "overload")
        elif key == 0x32:
            doc_string = read_string(buf, a, b, at, "doc_string")
    return Node(inputs, outputs, name, op_type, domain, overload, attributes, doc_string, offset)


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
    for key, at, a, b, _ in iter_fields(buf, start, stop):
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
                attributes.append(read_attribute(ctx, a, b, depth + 1, at, read_graph))
            except ReadFailure as failure:
                raise failure.within(f"attribute_proto[{len(attributes)}]", at) from None
        elif key == 0x6A:
            overload = read_string(buf, a, b, at, "overload")
    return Function(name, domain, overload, doc_string, inputs, outputs, attribute_names, attributes, nodes, opsets, offset)
