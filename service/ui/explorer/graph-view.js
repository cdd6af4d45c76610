// The graph tab: the open model's graph loaded by the worker, the layout of
// one graph (or one page of a large one) drawn as SVG in chunks, pan and
// zoom, paging, and going to a node (drawing its page, selecting it, its
// details in node-details.js). Weights folded into their consumer
// (folded-weights.js; unless "weights as nodes" is ticked) are rows of its
// box, each opening its tensor's preview (tensors.js). A node holding
// subgraphs or calling a function of the model has a toggle (+ / −) that
// draws it open, its bodies inside its box (graph-layout.js), or closed
// again; the nodes inside answer clicks as any other. Each node is filled by
// its op family (op-families.js), with a legend of the families drawn; an
// edge is labelled with its values' types, declared, or inferred by the shape
// stage (in italics; "shapes" hides the labels). Nodes a comparison added or
// changed are marked (diff-view.js). A drawing too large to read when fitted opens at its inputs.

import { $, el, fill, svg, number, status, visible } from "./dom.js";
import { currentToken, fail } from "./api.js";
import { state } from "./state.js";
import { ask } from "./graph-worker-client.js";
import { locateDiagnostics, markNode } from "./diagnostics.js";
import { markDiff } from "./diff-view.js";
import { labelAt, labelBox, labelText } from "./edge-labels.js";
import { renderDetails } from "./node-details.js";
import { openTensorRef } from "./tensors.js";
import { Culling, edgeBox, itemBox } from "./culling.js";
import { FAMILIES } from "./op-families.js";
import { headHeight, lineY } from "./box-head.js";

// Resolves once the open model's graph is loaded and its first view drawn.
export function openGraph() {
  if (state.graphLoading && state.graphLoading.id === state.model.id) return state.graphLoading.done; // asked already: the answer is on its way
  if (state.graph && state.graph.id === state.model.id) return Promise.resolve();
  const marker = { id: state.model.id };
  state.graphLoading = marker;
  marker.done = loadGraph().finally(() => {
    if (state.graphLoading === marker) state.graphLoading = null;
  });
  return marker.done;
}

async function loadGraph() {
  const generation = state.generation;
  status("loading the graph…");
  let loaded;
  try {
    const shapes = state.model.links.shapes || null; // summaries stored before the shapes have no link
    loaded = await ask("load", { url: state.model.links.graph, token: currentToken(), model: state.model.id, shapes });
  } catch (error) {
    if (generation !== state.generation) return; // another model is open by now
    throw error;
  }
  if (generation !== state.generation) return;
  state.graph = Object.assign(loaded, { id: state.model.id });
  const select = $("#graph-select");
  fill(select, ...loaded.graphs.map((g) =>
    el("option", { value: g.path }, `${g.parent ? "↳ " : g.function ? "ƒ " : ""}${visible(g.title)} — ${number(g.nodes)} nodes${g.pages > 1 ? `, ${g.pages} pages` : ""}`)));
  await locateDiagnostics();
  await drawGraph(loaded.root, 0);
}

// keep: the view stays where it is (a node opened or closed), else the drawing is fitted
export async function drawGraph(path, page, focus = null, keep = false) {
  const generation = state.generation;
  const layout = await ask("view", { path, page, folded: !state.weightsAsNodes, expanded: [...state.expanded] });
  if (generation !== state.generation) return;
  if (path !== state.graphPath) $("#details").hidden = true;
  state.graphPath = path;
  state.graphPage = layout.page;
  state.layout = layout;
  $("#graph-select").value = path;
  $("#pager").hidden = layout.pages < 2;
  $("#page-label").textContent = `page ${layout.page + 1} of ${layout.pages}: nodes ${number(layout.first)}–${number(layout.last - 1)} of ${number(layout.nodeCount)}`;
  await render(layout, keep);
  if (state.layout !== layout) return;
  const note = layout.pages > 1 ? `; this graph has ${number(layout.nodeCount)} nodes: it is drawn ${number(layout.pageSize)} at a time, in topological order (▲▼ stubs name the values that cross pages)` : "";
  const folded = layout.weightsFolded ? ` (${number(layout.weightsFolded)} weights drawn in the nodes that read them)` : "";
  const how = layout.stored ? "drawn (its layout kept from an earlier opening)" : `laid out in ${(layout.ms / 1000).toFixed(2)} s`;
  status(`${number(layout.nodesDrawn)} nodes ${how}${folded}${note}`, "ok");
  if (focus !== null) selectNode(path, focus, true).catch(fail);
}

const RENDER_CHUNK = 400; // items (and as many edges) handed to the drawing per task: the page never stalls on a large one
const selectedGroups = new Set(); // the boxes marked selected, in the page or out of it (far from the view)
let culling = null; // the drawing's parts, only those near the view in the page (culling.js)

// the part of the drawing the canvas shows, in the drawing's units
function viewInDrawing() {
  const box = $("#canvas").getBoundingClientRect();
  const { x, y, k } = state.transform;
  return { x0: -x / k, y0: -y / k, x1: (box.width - x) / k, y1: (box.height - y) / k };
}

// after a move: what came near the view is displayed (a pass over the boxes, about a millisecond for 10,000)
function cull() {
  if (culling) culling.setView(viewInDrawing());
}

async function render(layout, keep) {
  const generation = state.generation;
  const scene = $("#scene");
  const canvas = $("#canvas");
  canvas.dataset.layoutMs = String(layout.ms);
  canvas.dataset.stored = String(layout.stored);
  canvas.dataset.nodes = String(layout.nodesDrawn);
  canvas.dataset.folded = String(layout.folded);
  canvas.dataset.width = String(Math.round(layout.width));
  canvas.dataset.height = String(Math.round(layout.height));
  delete canvas.dataset.drawn;
  const edges = svg("g", { class: "edges" });
  const labels = svg("g", { class: "edge-labels" });
  const nodes = svg("g", { class: "nodes" });
  fill(scene, edges, labels, nodes);
  selectedGroups.clear(); // the old drawing's boxes are gone; this one's are marked as they are made
  culling = null;
  if (!keep) placeView(layout);
  const drawing = new Culling(viewInDrawing());
  culling = drawing;
  const steps = Math.max(layout.edges.length, layout.items.length);
  for (let start = 0; start < steps; start += RENDER_CHUNK) {
    if (start > 0) await new Promise((resolve) => setTimeout(resolve, 0));
    if (generation !== state.generation || state.layout !== layout) return;
    for (const edge of layout.edges.slice(start, start + RENDER_CHUNK)) {
      if (edge.points.length) drawing.add(() => edgePath(edge), edgeBox(edge), edges);
      if (edge.points.length && edge.label && !edge.crowded) drawing.add(() => edgeLabel(edge), labelBox(edge), labels);
    }
    for (const item of layout.items.slice(start, start + RENDER_CHUNK)) drawing.add(() => itemGroup(item, layout.path), itemBox(item), nodes);
  }
  showLegend(layout);
  canvas.dataset.drawn = "true";
  document.dispatchEvent(new CustomEvent("graph-drawn", { detail: layout })); // the minimap (minimap.js) redraws
}

// the op families of the nodes drawn, each with its colour, in FAMILIES' order
function showLegend(layout) {
  const used = new Set();
  const collect = (items) => {
    for (const item of items) {
      if (item.family) used.add(item.family);
      for (const body of item.inner || []) if (body.layout) collect(body.layout.items);
    }
  };
  collect(layout.items);
  const shown = FAMILIES.filter(([family]) => used.has(family));
  const inferred = layout.edges.some((e) => e.inferred && e.label); // then the legend says what italics mean
  fill($("#legend"), ...shown.map(([family, label]) => el("li", { dataset: { family } }, el("span", { class: `swatch family-${family}` }), label)),
    inferred ? el("li", { class: "inferred-note", title: "the model declares no type for these edges: the shape stage inferred them at import" }, "shape in italics: inferred") : null);
  $("#legend").hidden = shown.length === 0 && !inferred;
}

// the whole drawing, each box and edge (those out of the page too) made anew: what the SVG export saves
export function wholeDrawing(layout) {
  const edges = svg("g", { class: "edges" });
  edges.append(...layout.edges.filter((e) => e.points.length).map(edgePath));
  const labels = svg("g", { class: "edge-labels" });
  labels.append(...layout.edges.filter((e) => e.points.length && e.label && !e.crowded).map(edgeLabel));
  const nodes = svg("g", { class: "nodes" });
  nodes.append(...layout.items.map((item) => itemGroup(item, layout.path)));
  return [edges, labels, nodes];
}

// an edge's value types, beside its line (hidden with the "shapes" toggle)
function edgeLabel(edge) {
  const { x, y } = labelAt(edge);
  const text = svg("text", { x: x.toFixed(1), y: y.toFixed(1), class: edge.inferred ? "edge-label inferred" : "edge-label" });
  text.textContent = visible(labelText(edge.label));
  return text;
}

function edgePath(edge) {
  const d = "M" + edge.points.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join("L");
  const path = svg("path", { d, class: edge.implicit ? "edge implicit" : "edge", "marker-end": "url(#arrow)" });
  const title = svg("title");
  title.textContent = visible(edge.values.join(", ") + (edge.label ? `: ${edge.label}` : ""));
  path.append(title);
  return path;
}

function itemGroup(item, path) {
  const family = item.family ? ` family-${item.family}` : "";
  const group = svg("g", { class: `item ${item.kind}${family}${item.subgraph ? " has-subgraph" : ""}${item.open ? " open" : ""}`, transform: `translate(${item.x},${item.y})` });
  if (item.kind === "node") {
    group.dataset.position = String(item.position);
    group.dataset.path = path;
    const title = svg("title"); // the op type and the whole name, on hover
    title.textContent = visible(item.name ? `${item.op} ${item.name}` : item.op);
    group.append(title);
    if (state.selected && state.selected.path === path && state.selected.position === item.position) {
      group.classList.add("selected");
      selectedGroups.add(group);
    }
  } else group.dataset.value = item.value;
  if (item.page !== undefined && item.page !== null) group.dataset.page = String(item.page);
  group.append(svg("rect", { width: item.width, height: item.height, rx: item.kind === "node" ? 3 : 10 }));
  item.lines.forEach((line, i) => {
    const text = svg("text", { x: item.width / 2, y: lineY(i), class: i === 0 ? "head" : "sub" });
    text.textContent = visible(line);
    group.append(text);
  });
  if (item.weights && item.weights.length) group.append(...item.weights.map((row) => weightRow(row, item)));
  if (item.subgraph) group.append(toggle(item, path));
  if (item.inner) group.append(...item.inner.map(bodyGroup));
  if (item.kind === "node") {
    markNode(group, path, item.position);
    markDiff(group, path, item.position);
  }
  return group;
}

// the + / − of a node that can be drawn open: its subgraphs, or the function it calls
function toggle(item, path) {
  const group = svg("g", { class: "toggle", transform: `translate(${item.width - 15},3)` });
  group.dataset.key = `${path}#${item.position}`;
  group.append(svg("rect", { width: 12, height: 12, rx: 2 }));
  const text = svg("text", { x: 6, y: 10, class: "toggle-text" });
  text.textContent = item.open ? "−" : "+";
  const title = svg("title");
  title.textContent = item.open ? "close: draw this node as one box" : "open: draw its subgraphs, or the function it calls, inside it";
  group.append(text, title);
  return group;
}

// one body drawn inside an open node: its title, a frame, its own drawing
function bodyGroup(body) {
  const group = svg("g", { class: "body", transform: `translate(${body.x},${body.y})` });
  const title = svg("text", { x: 0, y: -5, class: "body-title" });
  title.textContent = body.title;
  group.append(title);
  if (!body.layout) return group;
  group.append(svg("rect", { class: "body-frame", x: -4, y: -2, width: body.layout.width + 8, height: body.layout.height + 4, rx: 4 }));
  group.append(...wholeDrawing(body.layout));
  return group;
}

// the drawn item of node `position` of graph `path`, in the layout or in a body drawn inside it
function findItem(layout, path, position) {
  for (const item of layout.items) {
    if (item.kind === "node" && item.position === position && layout.path === path) return item;
    for (const body of item.inner || []) {
      const found = body.layout && findItem(body.layout, path, position);
      if (found) return found;
    }
  }
  return null;
}

// the drawing's coordinates of a drawn item (inside open nodes: offset by each box it is in)
function placeOf(layout, target, dx = 0, dy = 0) {
  for (const item of layout.items) {
    if (item === target) return { x: dx + item.x, y: dy + item.y, width: item.width, height: item.height };
    for (const body of item.inner || []) {
      const found = body.layout && placeOf(body.layout, target, dx + item.x + body.x, dy + item.y + body.y);
      if (found) return found;
    }
  }
  return null;
}

async function toggleNode(key) {
  if (state.expanded.has(key)) state.expanded.delete(key);
  else state.expanded.add(key);
  const [path, position] = [key.slice(0, key.lastIndexOf("#")), Number(key.slice(key.lastIndexOf("#") + 1))];
  await drawGraph(state.graphPath, state.graphPage, null, true);
  const item = state.layout && findItem(state.layout, path, position);
  if (item) centerOn(item);
}

const ROW_TOP = (item) => headHeight(item.lines.length);
const ROW_HEIGHT = 14; // as the worker sized the box

// a weight folded into its consumer: name and type, a click opens its tensor
function weightRow(row, item) {
  const group = svg("g", { class: row.more ? "weight more" : "weight", transform: `translate(4,${ROW_TOP(item) + row.index * ROW_HEIGHT})` });
  group.dataset.weight = String(row.index);
  if (!row.more) group.dataset.name = row.name;
  group.append(svg("rect", { class: "row", width: item.width - 8, height: ROW_HEIGHT - 2, rx: 2 }));
  const text = svg("text", { x: 4, y: 9.5, class: "weight-text" });
  text.textContent = row.text;
  const title = svg("title");
  const values = row.values ? ` = ${row.values}` : "";
  title.textContent = row.more ? "the node's details list every input" : `${row.name} ${row.type}${values}${row.constant !== null ? " (a Constant node)" : " (an initializer)"}`;
  group.append(text, title);
  return group;
}

function openWeight(group, row) {
  const item = findItem(state.layout, group.dataset.path, Number(group.dataset.position));
  const weight = item && item.weights[Number(row.dataset.weight)];
  if (!weight) return;
  if (weight.ref) openTensorRef(weight.ref).catch(fail);
  else selectNode(group.dataset.path, weight.more ? item.position : weight.constant, false).catch(fail);
}

const LEGIBLE = 0.6; // the smallest scale at which a box's op type and name can be read
const READABLE = 0.9; // the scale a drawing too large to fit legibly opens at

// A drawing that fits the canvas at a legible scale is shown whole. A larger
// one opens at its inputs (a later page: at its top), readable, centred on
// them when they fit the width, else on the first; Fit shows all of it.
function placeView(layout) {
  fit();
  if (state.transform.k >= LEGIBLE || !layout.items.length) return;
  const inputs = layout.items.filter((i) => i.kind === "input");
  const start = inputs.length ? inputs : [layout.items.reduce((top, i) => (i.y < top.y ? i : top))];
  const box = $("#canvas").getBoundingClientRect();
  const left = Math.min(...start.map((i) => i.x));
  const right = Math.max(...start.map((i) => i.x + i.width));
  const centre = (right - left) * READABLE <= box.width - 40 ? (left + right) / 2 : start[0].x + start[0].width / 2;
  const top = Math.min(...start.map((i) => i.y));
  state.transform = { k: READABLE, x: box.width / 2 - centre * READABLE, y: 20 - top * READABLE };
  applyTransform();
}

function applyTransform() {
  const { x, y, k } = state.transform;
  $("#scene").setAttribute("transform", `translate(${x},${y}) scale(${k})`);
  $("#canvas").classList.toggle("far", k < 0.35);
  cull();
  document.dispatchEvent(new CustomEvent("graph-moved", { detail: state.transform })); // the minimap's view box follows
}

// Moves the view: {x, y, k}, the drawing's translation (pixels of the canvas) and scale.
export function setTransform(transform) {
  state.transform = { x: transform.x, y: transform.y, k: transform.k };
  applyTransform();
}

export function fit() {
  const layout = state.layout;
  if (!layout) return;
  const box = $("#canvas").getBoundingClientRect();
  const k = Math.min(1.5, Math.max(0.02, Math.min(box.width / (layout.width + 40), box.height / (layout.height + 40))));
  state.transform = { k, x: (box.width - layout.width * k) / 2, y: Math.max(10, (box.height - layout.height * k) / 2) };
  applyTransform();
}

export function zoom(factor, cx, cy) {
  const t = state.transform;
  const box = $("#canvas").getBoundingClientRect();
  const px = cx === undefined ? box.width / 2 : cx;
  const py = cy === undefined ? box.height / 2 : cy;
  const k = Math.min(4, Math.max(0.01, t.k * factor));
  state.transform = { k, x: px - ((px - t.x) * k) / t.k, y: py - ((py - t.y) * k) / t.k };
  applyTransform();
}

function centerOn(target) {
  const item = placeOf(state.layout, target) || target;
  // in the part of the canvas the details panel leaves visible
  const box = $("#canvas").getBoundingClientRect();
  const details = $("#details");
  const width = box.width - (details.hidden ? 0 : details.getBoundingClientRect().width);
  const k = Math.max(state.transform.k, 0.8);
  state.transform = { k, x: width / 2 - (item.x + item.width / 2) * k, y: box.height / 2 - (item.y + item.height / 2) * k };
  applyTransform();
}

export function installPanZoom() {
  const canvas = $("#canvas");
  let drag = null;
  canvas.addEventListener("wheel", (event) => {
    event.preventDefault();
    const box = canvas.getBoundingClientRect();
    zoom(Math.exp(-event.deltaY * 0.0015), event.clientX - box.left, event.clientY - box.top);
  }, { passive: false });
  canvas.addEventListener("pointerdown", (event) => {
    drag = { x: event.clientX, y: event.clientY, tx: state.transform.x, ty: state.transform.y, moved: false };
  });
  canvas.addEventListener("pointermove", (event) => {
    if (!drag) return;
    const dx = event.clientX - drag.x;
    const dy = event.clientY - drag.y;
    if (!drag.moved && Math.abs(dx) + Math.abs(dy) < 4) return;
    if (!drag.moved) canvas.setPointerCapture(event.pointerId);
    drag.moved = true;
    state.transform.x = drag.tx + dx;
    state.transform.y = drag.ty + dy;
    applyTransform();
  });
  canvas.addEventListener("pointerup", (event) => {
    const wasDrag = drag && drag.moved;
    drag = null;
    if (wasDrag) return;
    const group = event.target.closest(".item");
    if (!group) return;
    const row = event.target.closest(".weight");
    const opener = event.target.closest(".toggle");
    if (opener) toggleNode(opener.dataset.key).catch(fail);
    else if (row) openWeight(group, row);
    else if (group.dataset.position !== undefined) selectNode(group.dataset.path, Number(group.dataset.position), false).catch(fail);
    else if (group.dataset.page !== undefined) {
      const node = state.layout.items.find((i) => i.value === group.dataset.value && i.kind === "stub");
      drawGraph(state.graphPath, Number(group.dataset.page)).then(() => node && showValueOnPage(node.value)).catch(fail);
    }
  });
}

function showValueOnPage(name) {
  const item = state.layout.items.find((i) => i.value === name);
  if (item) centerOn(item);
}

export async function goToNode(path, position, page) {
  if (path !== state.graphPath || page !== state.graphPage) await drawGraph(path, page, position);
  else await selectNode(path, position, true);
}

async function selectNode(path, position, center) {
  const details = await ask("node", { path, position });
  for (const old of selectedGroups) old.classList.remove("selected");
  selectedGroups.clear();
  state.selected = details; // a node's box made from now on is marked if it is this one
  renderDetails(details);
  if (center && state.layout) {
    // a folded Constant: its consumer's box, which lists it
    const item = findItem(state.layout, path, position) ||
      state.layout.items.find((i) => i.kind === "node" && i.weights.some((w) => w.constant === position));
    if (item) centerOn(item);
  }
  const group = document.querySelector(`#scene .item[data-path="${CSS.escape(path)}"][data-position="${position}"]`);
  if (group) {
    group.classList.add("selected");
    selectedGroups.add(group);
  }
}
