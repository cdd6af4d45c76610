// The explorer's graph worker: fetches a model's resolved graph document
// (GET /models/{id}/graph), keeps it, lays out what the page draws, and
// answers questions about it, so that neither parsing a large document nor
// laying out thousands of nodes ever blocks the page.
//
// Messages in: {id, op, ...}; out: {id, ok, result | error}, and
// {progress: text} while loading. Operations:
//   load   {url, token, model, shapes}  fetch and index every graph (the main
//                         graph, the subgraphs of If, Loop, Scan..., found in
//                         GRAPH and GRAPHS attributes, and the bodies of the
//                         model's functions, function-graphs.js); model: its
//                         id; shapes: the URL of the types the shape stage
//                         inferred (GET /models/{id}/shapes), fetched alongside
//                         and given to the main graph's undeclared values
//                         (value.inferred: true)
//   view   {path, page, folded, expanded}  the layout of one graph, or of one
//                         page of it (graph-layout.js); expanded: the keys of
//                         the nodes drawn open. Kept in the browser's storage
//                         (layout-store.js): a view asked again, in this
//                         session or a later one, is not laid out again
//                         (result.stored: true)
//   node   {path, position}  a node's attributes, inputs, outputs, consumers
//   search {query}        nodes and values whose name contains the query
//   locate {fieldPaths}   for each field path (of a diagnostic), the node it
//                         names, {path, position, page, op_type, name}, or null
//
// A module worker (graph-worker-client.js starts it with type "module"), so
// that it imports what the page imports too (problem.js, type-text.js,
// visible.js).

import { responseProblem } from "./problem.js";
import { typeText } from "./type-text.js";
import { LAYOUT_VERSION, PAGE_SIZE, layoutPage, pageCount, subgraphsOf } from "./graph-layout.js";
import { calleeFinder, functionGraph } from "./function-graphs.js";
import { storeLayout, storedLayout } from "./layout-store.js";

const MAX_RESULTS = 100;
let graphs = new Map(); // path -> {graph, parent, via, values: Map(name -> value), title, folded (once asked)}
let layouts = new Map(); // view key -> layout, this session's
let byIndex = new Map(); // path -> Map(file index -> position)
let context = { graphs, calleeOf: () => null }; // what graph-layout.js reads
let modelId = "";

function progress(text) {
  postMessage({ progress: text });
}

// -- loading

let loads = 0; // the latest load wins: an older one still arriving is dropped

// name -> type the shape stage inferred; an empty map when there are none or they cannot be had
async function inferredTypes(url, headers) {
  if (!url) return new Map();
  try {
    const response = await fetch(url, { headers });
    if (!response.ok) return new Map();
    const doc = await response.json();
    return new Map((doc.values || []).map((entry) => [entry.name, entry.type]));
  } catch {
    return new Map(); // the drawing stands without them
  }
}

async function load({ url, token, model, shapes }) {
  const ticket = ++loads;
  const headers = token ? { Authorization: "Bearer " + token } : {};
  const inferred = inferredTypes(shapes, headers);
  const response = await fetch(url, { headers });
  if (!response.ok) throw await responseProblem(response);
  const chunks = [];
  let received = 0;
  const reader = response.body.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    chunks.push(value);
    received += value.length;
    if (chunks.length % 64 === 0) progress(`graph: ${(received / 1e6).toFixed(1)} MB received`);
  }
  progress(`graph: parsing ${(received / 1e6).toFixed(1)} MB`);
  const text = await new Blob(chunks).text();
  const doc = JSON.parse(text);
  const types = await inferred;
  for (const value of doc.graph.values) {
    if (!value.type && types.has(value.name)) Object.assign(value, { type: types.get(value.name), inferred: true });
  }
  const found = new Map();
  index(found, doc.graph, null, "");
  const functions = Array.isArray(doc.functions) ? doc.functions : [];
  functions.forEach((f, i) => index(found, functionGraph(f, i), null, "", true));
  if (ticket !== loads) throw Object.assign(new Error("superseded by another model's graph"), { superseded: true });
  graphs = found;
  layouts = new Map();
  modelId = String(model || "");
  context = { graphs, calleeOf: calleeFinder(functions) };
  byIndex = new Map([...graphs].map(([path, g]) => [path, new Map(g.graph.nodes.map((n) => [n.index, n.position]))]));
  const list = [...graphs.values()].map((g) => ({
    path: g.graph.path,
    name: g.graph.name,
    title: g.title,
    parent: g.parent,
    function: g.isFunction,
    nodes: g.graph.nodes.length,
    pages: pageCount(g.graph),
  }));
  return { format: doc.format, root: doc.graph.path, graphs: list, functions: functions.length, bytes: received, inferred: types.size };
}

function index(found, graph, parent, via, isFunction = false) {
  const values = new Map();
  for (const value of graph.values) values.set(value.name, value);
  const title = isFunction ? `${graph.name} (function)` : via ? `${via} (${graph.name || "subgraph"})` : graph.name || "main graph";
  found.set(graph.path, { graph, parent, via, values, title, isFunction });
  for (const node of graph.nodes) {
    for (const attribute of node.attributes) {
      for (const sub of subgraphsOf(attribute)) index(found, sub, graph.path, `${node.name || node.op_type + "#" + node.position}.${attribute.name}`);
    }
  }
}

function entry(path) {
  const found = graphs.get(path);
  if (!found) throw new Error("no graph " + path);
  return found;
}

// -- layout

async function view({ path, page, folded = false, expanded = [] }) {
  const found = entry(path);
  const pages = pageCount(found.graph);
  page = Math.min(Math.max(0, page | 0), pages - 1);
  const open = new Set(expanded.map(String));
  const key = [LAYOUT_VERSION, modelId, path, page, folded, [...open].sort().join(",")].join("|");
  if (layouts.has(key)) return layouts.get(key);
  const ticket = loads;
  const kept = modelId ? await storedLayout(key) : null;
  if (kept && ticket === loads) {
    kept.stored = true;
    layouts.set(key, kept);
    return kept;
  }
  const count = found.graph.nodes.length;
  progress(`laying out ${Math.min(count, PAGE_SIZE)} nodes${pages > 1 ? ` (page ${page + 1} of ${pages})` : ""}…`);
  const result = layoutPage(context, found, page, folded, open);
  result.stored = false;
  if (ticket !== loads) return result; // another model's document arrived meanwhile: not kept under this one
  layouts.set(key, result);
  if (modelId) storeLayout(key, result); // not awaited: the drawing does not wait for the disk
  return result;
}

// -- questions

function nodeRef(path, position) {
  const { graph } = entry(path);
  const node = graph.nodes[position];
  return { path, position, name: node.name, op_type: node.op_type, page: Math.floor(position / PAGE_SIZE) };
}

function valueInfo(path, name) {
  const found = graphs.get(path);
  let scopePath = path;
  let value = found && found.values.get(name);
  // a captured name lives in an enclosing graph
  for (let g = found; !value && g && g.parent; ) {
    scopePath = g.parent;
    g = graphs.get(g.parent);
    value = g && g.values.get(name);
  }
  if (!value) return { name, missing: true };
  return {
    name,
    kind: value.kind,
    type: typeText(value.type, ","),
    inferred: value.inferred || false,
    scope: scopePath === path ? null : scopePath,
    initializer: value.initializer || null,
    producer: value.producer === null || value.producer === undefined ? null : nodeRef(scopePath, value.producer),
    consumers: value.consumers.slice(0, 200).map((c) => nodeRef(scopePath, c)),
    consumerCount: value.consumers.length,
  };
}

// omitted: the items a TENSORS or SPARSE_TENSORS attribute holds past those its document lists (onnx-service-graph/4)
function attributeValue(attribute) {
  const subs = subgraphsOf(attribute);
  if (subs.length) return { subgraphs: subs.map((g) => ({ path: g.path, name: g.name, nodes: g.nodes.length })) };
  return { json: attribute.value === undefined ? null : attribute.value, ref: attribute.ref_attr_name || null, omitted: attribute.omitted || 0 };
}

function node({ path, position }) {
  const { graph } = entry(path);
  const n = graph.nodes[position];
  return {
    path,
    position,
    index: n.index,
    name: n.name,
    op_type: n.op_type,
    domain: n.domain,
    opset_version: n.opset_version,
    page: Math.floor(position / PAGE_SIZE),
    attributes: n.attributes.map((a) => Object.assign({ name: a.name, type: a.type }, attributeValue(a))),
    inputs: n.inputs.map((name) => (name ? valueInfo(path, name) : { name: "", absent: true })),
    outputs: n.outputs.map((name) => (name ? valueInfo(path, name) : { name: "", absent: true })),
  };
}

function search({ query }) {
  const needle = String(query || "").toLowerCase();
  const results = [];
  let total = 0;
  if (!needle) return { results, total };
  for (const { graph } of graphs.values()) {
    for (const n of graph.nodes) {
      if (n.name.toLowerCase().includes(needle)) {
        total++;
        if (results.length < MAX_RESULTS) results.push({ kind: "node", text: n.name, detail: n.op_type, ...nodeRef(graph.path, n.position) });
      }
    }
    for (const v of graph.values) {
      if (v.name.toLowerCase().includes(needle)) {
        total++;
        if (results.length >= MAX_RESULTS) continue;
        const at = v.producer !== null && v.producer !== undefined ? v.producer : v.consumers[0];
        const ref = at === undefined ? { path: graph.path, position: null, page: 0 } : nodeRef(graph.path, at);
        results.push({ kind: v.initializer ? "initializer" : v.kind === "input" ? "input" : "value", text: v.name, detail: typeText(v.type, ","), initializer: v.initializer || null, ...ref });
      }
    }
  }
  return { results, total };
}

// A field path names a node when `<graph path>.node[<file index>]` is its
// prefix; inside a subgraph several prefixes match: the deepest graph wins.
// A function body is a graph here too (function-graphs.js), at its own field path.
function locateOne(fieldPath) {
  let found = null;
  for (const match of String(fieldPath || "").matchAll(/\.node\[(\d+)\]/g)) {
    const positions = byIndex.get(fieldPath.slice(0, match.index));
    const position = positions && positions.get(Number(match[1]));
    if (position !== undefined) found = nodeRef(fieldPath.slice(0, match.index), position);
  }
  return found;
}

function locate({ fieldPaths }) {
  return fieldPaths.map(locateOne);
}

const operations = { load, view, node, search, locate };

self.onmessage = async (event) => {
  const { id, op } = event.data;
  try {
    const result = await operations[op](event.data);
    postMessage({ id, ok: true, result });
  } catch (error) {
    postMessage({ id, ok: false, error: { message: String(error && error.message ? error.message : error), problem: error && error.problem ? error.problem : null } });
  }
};
