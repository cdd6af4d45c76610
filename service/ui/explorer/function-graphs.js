// The bodies of a model's functions (ModelProto.functions, as the graph
// document lists them: nodes as written, not resolved) as graphs the worker
// can draw and answer about like the main graph: each value with its
// producer and consumers (positions in the body's order, the order a
// function is written in), the function's inputs as graph inputs, at the
// path `ModelProto.functions[i]`, as field paths name it (so a diagnostic's
// field path finds a node of a body too). And which function a node calls:
// the function of the model with the node's domain and op type.

function functionNode(node, position) {
  return {
    position,
    index: position,
    name: node.name || "",
    op_type: node.op_type,
    domain: node.domain || "",
    opset_version: null,
    inputs: node.inputs.map((name) => name || null),
    outputs: node.outputs.map((name) => name || null),
    attributes: node.attributes || [],
  };
}

export function functionTitle(f) {
  return `${f.domain ? f.domain + "." : ""}${f.name}${f.overload ? ":" + f.overload : ""}`;
}

// the graph of function `f`, the i-th of the document's functions
export function functionGraph(f, i) {
  const nodes = f.nodes.map(functionNode);
  const values = new Map();
  const valueOf = (name, kind) => {
    if (!values.has(name)) values.set(name, { name, kind, type: null, producer: null, consumers: [] });
    return values.get(name);
  };
  for (const name of f.inputs) if (name) valueOf(name, "input");
  for (const node of nodes) {
    for (const name of node.inputs) {
      if (!name) continue;
      const value = valueOf(name, "input"); // a name nothing produces: an input as far as drawing goes
      if (!value.consumers.includes(node.position)) value.consumers.push(node.position);
    }
    for (const name of node.outputs) {
      if (name && valueOf(name, "value").producer === null) values.get(name).producer = node.position;
    }
  }
  return {
    name: functionTitle(f),
    path: `ModelProto.functions[${i}]`,
    inputs: f.inputs.filter(Boolean),
    outputs: f.outputs.filter(Boolean),
    captures: [],
    values: [...values.values()],
    nodes,
  };
}

// node -> {path, title} of the function it calls, or null
export function calleeFinder(functions) {
  const byName = new Map();
  functions.forEach((f, i) => {
    const key = `${f.domain || ""}\u0000${f.name}`;
    if (!byName.has(key)) byName.set(key, { path: `ModelProto.functions[${i}]`, title: functionTitle(f) });
  });
  return (node) => byName.get(`${node.domain || ""}\u0000${node.op_type}`) || null;
}
