// The explorer's graph worker: fetches a model's resolved graph document
// (GET /models/{id}/graph), keeps it, lays out what the page draws, and
// answers questions about it, so that neither parsing a large document nor
// laying out thousands of nodes ever blocks the page.
//
// Messages in: {id, op, ...}; out: {id, ok, result | error}, and
// {progress: text} while loading. Operations:
//   load   {url, token}   fetch and index every graph (the main graph and the
//                         subgraphs of If, Loop, Scan..., found in GRAPH and
//                         GRAPHS attributes)
//   view   {path, page, folded}  the layout of one graph, or of one page of
//                         it: a graph of more than PAGE_SIZE nodes is drawn
//                         PAGE_SIZE consecutive nodes (resolved, i.e.
//                         topological, order) at a time; values crossing
//                         pages are drawn as stubs naming the other page;
//                         folded: the weights folded-weights.js picks are
//                         rows inside their consumer's box (item.weights),
//                         their Constant nodes not drawn
//   node   {path, position}  a node's attributes, inputs, outputs, consumers
//   search {query}        nodes and values whose name contains the query
//   locate {fieldPaths}   for each field path (of a diagnostic), the node it
//                         names, {path, position, page, op_type, name}, or null
//
// Layout: dagre, as Netron ships it (vendor/dagre.js, an ES module: Netron's
// port of dagre, iterative where the original recursed along paths, so that
// long ONNX chains never overflow a worker's stack). Its network-simplex
// ranking up to LONGEST_PATH_ABOVE nodes; past them, longest-path ranking,
// linear in the graph's size (Netron's own choice, at 3,000 nodes).
//
// A module worker (graph-worker-client.js starts it with type "module"), so
// that it imports what the page imports too (problem.js, type-text.js,
// visible.js).

import { layout as dagreLayout } from "../vendor/dagre.js";
import { responseProblem } from "./problem.js";
import { typeText } from "./type-text.js";
import { visible } from "./visible.js";
import { foldedWeights } from "./folded-weights.js";

const PAGE_SIZE = 5000;
const MAX_RESULTS = 100;
const MAX_ROWS = 10; // weight rows drawn in one node; past them, one row says how many more
const ROW_HEIGHT = 14;
const ROW_CHARS = 40; // a row's text is cut to this many characters (its title has all of it)
const LONGEST_PATH_ABOVE = 3000;
const SPACING = { nodesep: 24, ranksep: 28, edgesep: 12 };

let graphs = new Map(); // path -> {graph, parent, via, values: Map(name -> value), title, folded (once asked)}
let layouts = new Map(); // `${path}|${page}|${folded}` -> layout
let byIndex = new Map(); // path -> Map(file index -> position)

function progress(text) {
  postMessage({ progress: text });
}

// -- loading

let loads = 0; // the latest load wins: an older one still arriving is dropped

async function load({ url, token }) {
  const ticket = ++loads;
  const response = await fetch(url, { headers: token ? { Authorization: "Bearer " + token } : {} });
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
  const found = new Map();
  index(found, doc.graph, null, "");
  if (ticket !== loads) throw Object.assign(new Error("superseded by another model's graph"), { superseded: true });
  graphs = found;
  layouts = new Map();
  byIndex = new Map([...graphs].map(([path, g]) => [path, new Map(g.graph.nodes.map((n) => [n.index, n.position]))]));
  const list = [...graphs.values()].map((g) => ({
    path: g.graph.path,
    name: g.graph.name,
    title: g.title,
    parent: g.parent,
    nodes: g.graph.nodes.length,
    pages: pageCount(g.graph),
  }));
  return { format: doc.format, root: doc.graph.path, graphs: list, functions: (doc.functions || []).length, bytes: received };
}

function index(found, graph, parent, via) {
  const values = new Map();
  for (const value of graph.values) values.set(value.name, value);
  found.set(graph.path, { graph, parent, via, values, title: via ? `${via} (${graph.name || "subgraph"})` : graph.name || "main graph" });
  for (const node of graph.nodes) {
    for (const attribute of node.attributes) {
      for (const sub of subgraphsOf(attribute)) index(found, sub, graph.path, `${node.name || node.op_type + "#" + node.position}.${attribute.name}`);
    }
  }
}

function subgraphsOf(attribute) {
  const items = attribute.type === "GRAPH" ? [attribute.value] : attribute.type === "GRAPHS" ? attribute.value || [] : [];
  return items.filter((g) => g && typeof g.path === "string" && Array.isArray(g.nodes)); // function bodies are not resolved
}

function pageCount(graph) {
  return Math.max(1, Math.ceil(graph.nodes.length / PAGE_SIZE));
}

function entry(path) {
  const found = graphs.get(path);
  if (!found) throw new Error("no graph " + path);
  return found;
}

// -- layout

function nodeBox(lines, rows = []) {
  const chars = Math.max(...lines.map((s) => s.length));
  const rowChars = rows.length ? Math.max(...rows.map((r) => r.text.length)) : 0;
  const width = Math.max(Math.min(240, Math.max(56, 14 + 7 * chars)), Math.min(280, 16 + 6.2 * rowChars));
  return { width: Math.round(width), height: (lines.length > 1 ? 34 : 22) + (rows.length ? rows.length * ROW_HEIGHT + 4 : 0) };
}

// the rows a node's box lists: name and type of each weight folded into it
function weightRows(rows) {
  const shown = rows.length > MAX_ROWS ? rows.slice(0, MAX_ROWS - 1) : rows;
  const drawn = shown.map((row, i) => {
    const name = visible(row.name) || "(unnamed)";
    const type = visible(row.type);
    const room = Math.max(12, ROW_CHARS - type.length - 1);
    return { index: i, text: `${short(name, room)} ${type}`, name, type, ref: row.ref, constant: row.constant };
  });
  if (shown.length < rows.length) drawn.push({ index: shown.length, text: `+ ${rows.length - shown.length} more weights`, more: true });
  return drawn;
}

function foldsOf(found) {
  if (!found.folded) found.folded = foldedWeights(found.graph);
  return found.folded;
}

function short(text, limit = 30) {
  return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
}

// dagre's layout of boxes {id, width, height} and edges {source, target}:
// each box's top-left corner, each edge's points, the drawing's size
function laidOut(children, edges) {
  const nodes = children.map((c) => ({ v: c.id, width: c.width, height: c.height }));
  const links = edges.map((e) => ({ v: e.source, w: e.target }));
  const options = Object.assign({ rankdir: "TB" }, SPACING, nodes.length > LONGEST_PATH_ABOVE ? { ranker: "longest-path" } : {});
  const state = {};
  dagreLayout(nodes, links, options, state);
  const boxes = new Map(nodes.map((n) => [n.v, { x: n.x - n.width / 2, y: n.y - n.height / 2 }]));
  const points = links.map((l) => (l.points || []).map((p) => ({ x: p.x, y: p.y })));
  return { boxes, points, width: state.width || 0, height: state.height || 0 };
}

async function view({ path, page, folded = false }) {
  const found = entry(path);
  const { graph, values } = found;
  const pages = pageCount(graph);
  page = Math.min(Math.max(0, page | 0), pages - 1);
  const key = `${path}|${page}|${folded}`;
  if (layouts.has(key)) return layouts.get(key);
  const folds = folded ? foldsOf(found) : { rows: new Map(), constants: new Set(), values: new Set() };
  const first = page * PAGE_SIZE;
  const last = Math.min(graph.nodes.length, first + PAGE_SIZE);
  const pageOf = (position) => Math.floor(position / PAGE_SIZE);
  const onPage = (position) => position >= first && position < last;

  const items = []; // what is drawn, in model order: inputs and stubs from above, nodes, outputs and stubs below
  const edges = [];
  const itemId = new Map(); // key -> layout id
  const add = (key, item) => {
    if (!itemId.has(key)) {
      itemId.set(key, "v" + items.length);
      items.push(Object.assign(item, { id: "v" + items.length }));
    }
    return itemId.get(key);
  };
  const before = [];
  const after = [];
  const captured = new Set(graph.captures || []);

  for (const value of graph.values) {
    if (folds.values.has(value.name)) continue; // a row in its consumer's box
    const consumers = value.consumers.filter(onPage);
    let source = null;
    if (value.producer !== null && value.producer !== undefined) {
      if (!onPage(value.producer)) {
        if (consumers.length === 0) continue;
        const other = pageOf(value.producer);
        source = { key: "from:" + value.name, item: { kind: "stub", lines: [`▲ ${short(value.name)}`, `from page ${other + 1}`], value: value.name, page: other } };
      } else {
        source = { key: "n" + value.producer };
        const elsewhere = [...new Set(value.consumers.filter((c) => !onPage(c)).map(pageOf))];
        if (elsewhere.length) {
          const target = add("to:" + value.name, { kind: "stub", lines: [`▼ ${short(value.name)}`, `to page ${elsewhere.map((p) => p + 1).join(", ")}`], value: value.name, page: elsewhere[0] });
          after.push(target);
          edges.push({ source: source.key, target, value: value.name, implicit: false });
        }
      }
    } else if (value.kind === "input") {
      if (consumers.length === 0 && !graph.outputs.includes(value.name)) continue;
      source = { key: "in:" + value.name, item: { kind: "input", lines: [short(value.name), typeText(value.type, ",")], value: value.name } };
    } else {
      continue; // initializers: listed with their consumers, not drawn
    }
    if (source.item) before.push([source.key, source.item]);
    for (const consumer of consumers) {
      const explicit = graph.nodes[consumer].inputs.includes(value.name);
      edges.push({ source: source.key, target: "n" + consumer, value: value.name, implicit: !explicit });
    }
    if (graph.outputs.includes(value.name) && (value.producer === null || value.producer === undefined || onPage(value.producer))) {
      const out = add("out:" + value.name, { kind: "output", lines: [short(value.name), typeText(value.type, ",")], value: value.name });
      after.push(out);
      edges.push({ source: source.key, target: out, value: value.name, implicit: false });
    }
  }
  // captured outer values, used by nodes of this subgraph
  for (let position = first; position < last; position++) {
    for (const name of graph.nodes[position].inputs) {
      if (name && !values.has(name) && captured.has(name)) {
        before.push(["cap:" + name, { kind: "capture", lines: [short(name), "from the outer graph"], value: name }]);
        edges.push({ source: "cap:" + name, target: "n" + position, value: name, implicit: false });
      }
    }
  }

  // the boxes laid out, in model order
  const ordered = [];
  const children = [];
  const place = (key, item) => {
    const id = add(key, item);
    ordered.push(id);
  };
  for (const [key, item] of before) place(key, item);
  let nodesDrawn = 0;
  let weightsFolded = 0;
  for (let position = first; position < last; position++) {
    if (folds.constants.has(position)) continue; // drawn as a row of its consumer
    const node = graph.nodes[position];
    const lines = node.name ? [node.op_type, short(node.name)] : [node.op_type];
    const hasGraph = node.attributes.some((a) => subgraphsOf(a).length > 0);
    const rows = folds.rows.get(position) || [];
    weightsFolded += rows.length;
    nodesDrawn++;
    place("n" + position, { kind: "node", lines, position, op: node.op_type, subgraph: hasGraph, weights: weightRows(rows) });
  }
  for (const id of after) ordered.push(id);
  const seen = new Set();
  for (const id of ordered) {
    if (seen.has(id)) continue;
    seen.add(id);
    const item = items[Number(id.slice(1))];
    item.lines = item.lines.map(visible); // sized as shown: hidden characters escaped
    Object.assign(item, nodeBox(item.lines, item.weights));
    children.push({ id, width: item.width, height: item.height });
  }
  const pairs = new Map();
  for (const edge of edges) {
    const source = itemId.get(edge.source);
    const target = itemId.get(edge.target) || edge.target;
    if (!source || !seen.has(target) || source === target) continue;
    const pair = source + ">" + target;
    const known = pairs.get(pair);
    if (known) {
      if (!known.values.includes(edge.value)) known.values.push(edge.value);
      known.implicit = known.implicit && edge.implicit;
    } else {
      pairs.set(pair, { source, target, values: [edge.value], implicit: edge.implicit });
    }
  }
  const pairList = [...pairs.values()];

  progress(`laying out ${nodesDrawn} nodes${pages > 1 ? ` (page ${page + 1} of ${pages})` : ""}…`);
  const started = performance.now();
  const laid = laidOut(children, pairList);
  const ms = Math.round(performance.now() - started);

  const drawn = children.map((c) => {
    const item = items[Number(c.id.slice(1))];
    const box = laid.boxes.get(c.id);
    return {
      id: c.id, kind: item.kind, lines: item.lines, position: item.position, op: item.op, value: item.value, page: item.page,
      subgraph: item.subgraph || false, weights: item.weights || [], x: box.x, y: box.y, width: c.width, height: c.height,
    };
  });
  const drawnEdges = pairList.map((e, i) => ({ source: e.source, target: e.target, values: e.values, implicit: e.implicit, points: laid.points[i] }));
  const result = {
    path, page, pages, pageSize: PAGE_SIZE, first, last, nodeCount: graph.nodes.length, folded, nodesDrawn, weightsFolded,
    width: laid.width, height: laid.height, items: drawn, edges: drawnEdges, ms,
  };
  layouts.set(key, result);
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
    scope: scopePath === path ? null : scopePath,
    initializer: value.initializer || null,
    producer: value.producer === null || value.producer === undefined ? null : nodeRef(scopePath, value.producer),
    consumers: value.consumers.slice(0, 200).map((c) => nodeRef(scopePath, c)),
    consumerCount: value.consumers.length,
  };
}

function attributeValue(attribute) {
  const subs = subgraphsOf(attribute);
  if (subs.length) return { subgraphs: subs.map((g) => ({ path: g.path, name: g.name, nodes: g.nodes.length })) };
  return { json: attribute.value === undefined ? null : attribute.value, ref: attribute.ref_attr_name || null };
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
// Function bodies (ModelProto.functions[...]) are not graphs here: null.
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
