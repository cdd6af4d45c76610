// The drawing of one graph, or of one page of a large one, laid out by dagre
// (vendor/dagre.js, Netron's port): boxes for inputs, nodes, outputs, the
// stubs of values crossing pages and the values a subgraph captures; edges
// with their points. Run by the graph worker (graph-worker.js); pure over the
// graphs it indexed.
//
// A graph of more than PAGE_SIZE nodes is drawn PAGE_SIZE consecutive nodes
// (resolved, i.e. topological, order) at a time; values crossing pages are
// drawn as stubs naming the other page.
//
// folded: the weights folded-weights.js picks are rows inside their
// consumer's box (item.weights), their Constant nodes not drawn.
//
// expanded: a Set of node keys (`${graph path}#${position}`) drawn open: a
// node holding subgraphs (If, Loop, Scan...) or calling a function of the
// model is then a box holding the drawing of each body (item.inner: [{title,
// path, x, y, layout}], x and y within the box), laid out first, its size the
// box's. Bodies open inside bodies, to MAX_DEPTH; a body of more than
// MAX_INNER_NODES nodes is not drawn inside (it is opened alone instead), nor
// is a function inside its own call.

import { layout as dagreLayout } from "../vendor/dagre.js";
import { typeText } from "./type-text.js";
import { placeLabels } from "./edge-labels.js";
import { visible } from "./visible.js";
import { foldedWeights } from "./folded-weights.js";
import { opFamily } from "./op-families.js";
import { NAME_LINES, headHeight } from "./box-head.js";

export const PAGE_SIZE = 5000;
export const LAYOUT_VERSION = "dagre-9.3.3/5"; // part of the key a layout is kept under (layout-store.js): changed with what lays out or sizes boxes, or what an item or edge holds (2: its op family; 3: an edge's label; 4: names on up to 3 lines; 5: inferred labels, small values, types cut in input and output boxes, crowded labels)
export const MAX_INNER_NODES = 2000;
const MAX_DEPTH = 8;
const LONGEST_PATH_ABOVE = 3000; // dagre's network-simplex ranking up to this many boxes, longest-path past it (Netron's choice)
const SPACING = { nodesep: 24, ranksep: 28, edgesep: 12 };
const MAX_ROWS = 10; // weight rows drawn in one node; past them, one row says how many more
const ROW_HEIGHT = 14;
const ROW_CHARS = 40; // a row's text is cut to this many characters (its title has all of it)
const INNER_PAD = 10; // around each body drawn in an open box
const INNER_TITLE = 16; // a body's title line, above its drawing
const TOGGLE_ROOM = 16; // the + / − of a node that opens (graph-view.js draws it in the box's top right corner)

export function pageCount(graph) {
  return Math.max(1, Math.ceil(graph.nodes.length / PAGE_SIZE));
}

export function subgraphsOf(attribute) {
  const items = attribute.type === "GRAPH" ? [attribute.value] : attribute.type === "GRAPHS" ? attribute.value || [] : [];
  return items.filter((g) => g && typeof g.path === "string" && Array.isArray(g.nodes)); // graphs inside function bodies are not resolved
}

function short(text, limit = 30) {
  return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
}

function nodeBox(lines, rows = []) {
  const chars = Math.max(...lines.map((s) => s.length));
  const rowChars = rows.length ? Math.max(...rows.map((r) => r.text.length)) : 0;
  const width = Math.max(Math.min(240, Math.max(56, 14 + 7 * chars)), Math.min(280, 16 + 6.2 * rowChars));
  return { width: Math.round(width), height: headHeight(lines.length) + (rows.length ? rows.length * ROW_HEIGHT + 4 : 0) };
}

const NAME_CHARS = 30; // characters of a name per line of a box

// A node's name on lines of at most NAME_CHARS, each broken after the last
// "/", ".", "_" or "-" of its second half, else at NAME_CHARS.
function nameLines(name) {
  const lines = [];
  let rest = name;
  while (rest.length > NAME_CHARS && lines.length < NAME_LINES - 1) {
    const part = rest.slice(0, NAME_CHARS);
    const cut = Math.max(...["/", ".", "_", "-"].map((mark) => part.lastIndexOf(mark)));
    const at = cut >= NAME_CHARS / 2 ? cut + 1 : NAME_CHARS;
    lines.push(rest.slice(0, at));
    rest = rest.slice(at);
  }
  lines.push(short(rest, NAME_CHARS));
  return lines;
}

// the rows a node's box lists: name and type of each weight folded into it,
// or "name = values" for a small one ("axes = [1]")
function weightRows(rows) {
  const shown = rows.length > MAX_ROWS ? rows.slice(0, MAX_ROWS - 1) : rows;
  const drawn = shown.map((row, i) => {
    const name = visible(row.name) || "(unnamed)";
    const type = visible(row.type);
    const shownAs = row.values ? `= ${row.values}` : type;
    const room = Math.max(12, ROW_CHARS - shownAs.length - 1);
    return { index: i, text: `${short(name, room)} ${shownAs}`, name, type, values: row.values || null, ref: row.ref, constant: row.constant };
  });
  if (shown.length < rows.length) drawn.push({ index: shown.length, text: `+ ${rows.length - shown.length} more weights`, more: true });
  return drawn;
}

function foldsOf(found) {
  if (!found.folded) found.folded = foldedWeights(found.graph);
  return found.folded;
}

// the bodies a node can show open: [{title, path}] (its subgraphs, or the function it calls)
export function bodiesOf(context, node) {
  const bodies = [];
  for (const attribute of node.attributes) {
    for (const sub of subgraphsOf(attribute)) bodies.push({ title: `${attribute.name}${sub.name ? ": " + sub.name : ""}`, path: sub.path });
  }
  const callee = context.calleeOf(node);
  if (callee) bodies.push({ title: `function ${callee.title}`, path: callee.path });
  return bodies;
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

// the drawings of an open node's bodies, placed side by side under its head: [{title, path, x, y, layout}] and the box's size
function openBox(context, found, position, lines, folded, expanded, ancestors, depth) {
  const node = found.graph.nodes[position];
  const inner = [];
  let x = INNER_PAD;
  let height = 0;
  for (const body of bodiesOf(context, node)) {
    const sub = context.graphs.get(body.path);
    let layout = null;
    let note = null;
    if (!sub) note = "not found";
    else if (ancestors.has(body.path)) note = "calls itself: not drawn again";
    else if (sub.graph.nodes.length > MAX_INNER_NODES) note = `${sub.graph.nodes.length} nodes: open it alone`;
    else if (depth >= MAX_DEPTH) note = "nested too deep: open it alone";
    else layout = layoutPage(context, sub, 0, folded, expanded, new Set([...ancestors, body.path]), depth + 1);
    const width = layout ? layout.width : 7 * (body.title.length + (note || "").length + 4);
    inner.push({ title: visible(body.title) + (note ? ` (${note})` : ""), path: body.path, x, y: headHeight(lines.length) + INNER_TITLE, layout });
    x += width + INNER_PAD;
    height = Math.max(height, layout ? layout.height : 0);
  }
  const head = nodeBox(lines);
  return { inner, width: Math.round(Math.max(head.width + TOGGLE_ROOM, x)), height: Math.round(headHeight(lines.length) + INNER_TITLE + height + INNER_PAD) };
}

// The label of an edge: its values' types, declared or inferred by the shape
// stage ("float[N,3]"; several joined by "; "), or null when none has one.
function edgeLabel(values, names) {
  const types = names.map((name) => values.get(name)).filter((value) => value && value.type).map((value) => typeText(value.type, ","));
  return types.length ? types.join("; ") : null;
}

// whether an edge's label holds a type the model does not declare
function labelInferred(values, names) {
  return names.some((name) => { const value = values.get(name); return Boolean(value && value.inferred); });
}

// The drawing of page `page` of the graph `found` ({graph, values, ...}, as the worker indexed it).
// context: {graphs (path -> found), calleeOf(node) -> {path, title} | null}
export function layoutPage(context, found, page, folded, expanded, ancestors = new Set([found.graph.path]), depth = 0) {
  const { graph, values } = found;
  const path = graph.path;
  const pages = pageCount(graph);
  const folds = folded ? foldsOf(found) : { rows: new Map(), constants: new Set(), values: new Set() };
  const first = page * PAGE_SIZE;
  const last = Math.min(graph.nodes.length, first + PAGE_SIZE);
  const pageOf = (position) => Math.floor(position / PAGE_SIZE);
  const onPage = (position) => position >= first && position < last;
  const outputs = new Set(graph.outputs);

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
      if (consumers.length === 0 && !outputs.has(value.name)) continue;
      source = { key: "in:" + value.name, item: { kind: "input", lines: [short(value.name), short(typeText(value.type, ","), 32)], value: value.name } };
    } else {
      continue; // initializers: listed with their consumers, not drawn
    }
    if (source.item) before.push([source.key, source.item]);
    for (const consumer of consumers) {
      const explicit = graph.nodes[consumer].inputs.includes(value.name);
      edges.push({ source: source.key, target: "n" + consumer, value: value.name, implicit: !explicit });
    }
    if (outputs.has(value.name) && (value.producer === null || value.producer === undefined || onPage(value.producer))) {
      const out = add("out:" + value.name, { kind: "output", lines: [short(value.name), short(typeText(value.type, ","), 32)], value: value.name });
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
  const place = (key, item) => ordered.push(add(key, item));
  for (const [key, item] of before) place(key, item);
  let nodesDrawn = 0;
  let weightsFolded = 0;
  for (let position = first; position < last; position++) {
    if (folds.constants.has(position)) continue; // drawn as a row of its consumer
    const node = graph.nodes[position];
    const lines = node.name ? [node.op_type, ...nameLines(node.name)] : [node.op_type];
    const rows = folds.rows.get(position) || [];
    const openable = bodiesOf(context, node).length > 0;
    weightsFolded += rows.length;
    nodesDrawn++;
    const item = { kind: "node", lines, position, op: node.op_type, name: node.name || "", family: opFamily(node.domain, node.op_type), subgraph: openable, weights: weightRows(rows), open: false };
    if (openable && expanded.has(`${path}#${position}`)) {
      item.open = true;
      item.lines = lines.map(visible);
      item.weights = []; // an open box shows its bodies; its weights stay in its details
      Object.assign(item, openBox(context, found, position, item.lines, folded, expanded, ancestors, depth));
    }
    place("n" + position, item);
  }
  for (const id of after) ordered.push(id);
  const seen = new Set();
  for (const id of ordered) {
    if (seen.has(id)) continue;
    seen.add(id);
    const item = items[Number(id.slice(1))];
    if (!item.open) {
      item.lines = item.lines.map(visible); // sized as shown: hidden characters escaped
      Object.assign(item, nodeBox(item.lines, item.weights));
      if (item.subgraph) item.width += TOGGLE_ROOM;
    }
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

  const started = performance.now();
  const laid = laidOut(children, pairList);
  const ms = Math.round(performance.now() - started);

  const drawn = children.map((c) => {
    const item = items[Number(c.id.slice(1))];
    const box = laid.boxes.get(c.id);
    return {
      id: c.id, kind: item.kind, lines: item.lines, position: item.position, op: item.op, name: item.name, family: item.family, value: item.value, page: item.page,
      subgraph: item.subgraph || false, open: item.open || false, inner: item.inner || null, weights: item.weights || [],
      x: box.x, y: box.y, width: c.width, height: c.height,
    };
  });
  const drawnEdges = placeLabels(pairList.map((e, i) => ({
    source: e.source, target: e.target, values: e.values, implicit: e.implicit, points: laid.points[i], label: edgeLabel(values, e.values),
    inferred: labelInferred(values, e.values),
  })));  // prettier-ignore
  const innerMs = drawn.reduce((sum, item) => sum + (item.inner || []).reduce((s, body) => s + (body.layout ? body.layout.ms : 0), 0), 0);
  return {
    path, page, pages, pageSize: PAGE_SIZE, first, last, nodeCount: graph.nodes.length, folded, nodesDrawn, weightsFolded,
    width: laid.width, height: laid.height, items: drawn, edges: drawnEdges, ms: ms + innerMs,
  };
}
