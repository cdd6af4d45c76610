// Weights drawn on their consumers: which initializers and Constant nodes of
// one graph (a graph of the document GET /models/{id}/graph returns) are
// drawn as rows inside the one node that reads them instead of as nodes of
// their own. Pure functions over the document, used by the graph worker.
//
// A value is folded when its only consumer (one node, however many of its
// inputs name it) reads it as one of its inputs, it is not a graph output,
// and it is an initializer (not a graph input, even one with a default) or
// the output of a Constant node. A value read by several nodes, or only
// inside a node's subgraph, stays as it is drawn today.
//
// A row: {name, type ("FLOAT[64,32]"), ref (the tensor reference the preview
// opens, or null), constant (the Constant node's position, or null), values
// (a small scalar's or vector's values as text, "1" or "[0, 2]", drawn instead of its
// type: from the reference's `values`, or a Constant's value_int(s) and
// value_float(s); else null)}.

import { typeText } from "./type-text.js";

const CONSTANT_TYPES = {
  value_float: "FLOAT[]", value_floats: "FLOAT[n]", value_int: "INT64[]", value_ints: "INT64[n]",
  value_string: "STRING[]", value_strings: "STRING[n]",
};

const SMALL = 8; // as the graph document's references carry values (service/sandbox/worker/graph.py)
const VALUES_CHARS = 24; // values longer than this as text are left to the preview: the row shows the type

function tensorText(ref) {
  return `${ref.elem_type}[${ref.dims.join(",")}]`;
}

function numberText(value) {
  return typeof value === "number" && !Number.isInteger(value) ? String(Number(value.toPrecision(4))) : String(value);
}

// "1" for one value of a scalar, "[0, 2]" for a list; null when there are none, too many or too long to read
function valuesText(values, scalar) {
  if (!Array.isArray(values) || values.length > SMALL || (scalar && values.length !== 1)) return null;
  const texts = values.map(numberText);
  const text = scalar ? texts[0] : `[${texts.join(", ")}]`;
  return text.length <= VALUES_CHARS ? text : null;
}

// a scalar's or a vector's values (a small matrix keeps its type: a flat list would misread)
function refValues(ref) {
  return ref && Array.isArray(ref.values) && ref.dims.length <= 1 ? valuesText(ref.values, ref.dims.length === 0) : null;
}

// a Constant's value: its tensor reference when it has one, and its type
function constantRow(node, value) {
  const attribute = node.attributes.find((a) => a.name === "value" || a.name === "sparse_value" || a.name in CONSTANT_TYPES);
  let ref = null;
  if (attribute && attribute.type === "TENSOR" && attribute.value) ref = attribute.value;
  else if (attribute && attribute.type === "SPARSE_TENSOR" && attribute.value && attribute.value.sparse_tensor) ref = attribute.value.sparse_tensor.values;
  let type = value.type ? typeText(value.type, ",") : "?";
  if (ref && attribute.type === "TENSOR") type = tensorText(ref);
  else if (type === "?" && attribute && CONSTANT_TYPES[attribute.name]) {
    type = CONSTANT_TYPES[attribute.name].replace("n", Array.isArray(attribute.value) ? String(attribute.value.length) : "?");
  }
  let values = attribute && attribute.type === "TENSOR" ? refValues(ref) : null;
  if (attribute && /^value_(int|float)s?$/.test(attribute.name)) {
    values = Array.isArray(attribute.value) ? valuesText(attribute.value, false) : valuesText([attribute.value], true);
  }
  return { name: value.name, type, ref, constant: node.position, values };
}

function isConstant(node) {
  return node.op_type === "Constant" && (node.domain === "" || node.domain === "ai.onnx") && node.outputs.length === 1;
}

// {rows: Map(consumer position -> [row] in the order of its inputs),
//  constants: Set(positions of the Constant nodes folded), values: Set(names folded)}
export function foldedWeights(graph) {
  const rows = new Map();
  const constants = new Set();
  const values = new Set();
  const outputs = new Set(graph.outputs);
  for (const value of graph.values) {
    if (value.kind === "input" || outputs.has(value.name)) continue;
    const consumers = new Set(value.consumers);
    if (consumers.size !== 1) continue;
    const position = consumers.values().next().value;
    const consumer = graph.nodes[position];
    if (!consumer || !consumer.inputs.includes(value.name)) continue;
    let row = null;
    if ((value.kind === "initializer" || value.kind === "sparse_initializer") && value.initializer) {
      const dense = value.kind === "initializer";
      row = { name: value.name, type: dense ? tensorText(value.initializer) : typeText(value.type, ","), ref: value.initializer, constant: null, values: dense ? refValues(value.initializer) : null };
    } else if (value.producer !== null && value.producer !== undefined && value.producer !== position && isConstant(graph.nodes[value.producer])) {
      row = constantRow(graph.nodes[value.producer], value);
      constants.add(value.producer);
    }
    if (!row) continue;
    values.add(value.name);
    if (!rows.has(position)) rows.set(position, []);
    rows.get(position).push(row);
  }
  for (const [position, list] of rows) {
    const inputs = graph.nodes[position].inputs;
    list.sort((a, b) => inputs.indexOf(a.name) - inputs.indexOf(b.name));
  }
  return { rows, constants, values };
}
