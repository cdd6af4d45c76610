// The explorer's page script: opening models (upload, data-root path, the
// store's list), the summary, the graph view (drawn from the layouts the
// graph worker computes), node details, search, tensors (header, preview,
// downloads), the operator check's diagnostics (listed in the summary,
// marked on their nodes) and refused models (the problem and a hex view of
// the local file around the offset). Plain DOM, no framework, no build step; every
// request goes to this service's own API, with the API key of the token
// field (kept in sessionStorage: this tab's session only).
"use strict";

const TOKEN_KEY = "onnx-explorer-token";
const PREVIEW_BYTES = 4 << 20; // a preview reads at most this much of a tensor (a Range request)
const PREVIEW_ITEMS = 64; // elements listed
const HISTOGRAM_BINS = 32;
const HEX_ROWS_AROUND = 8; // rows of 16 bytes shown before and after the offset's row
const HEX_NAME_CHARS = 120; // of the local file's name in the hex view's heading (all of it in the heading's tooltip)
const DIAGNOSTICS_PAGE = 250;
const MAX_DIAGNOSTICS = 1000; // listed and marked: the first ones, in file order
const ELEMENT_SIZES = {
  FLOAT: 4, UINT8: 1, INT8: 1, UINT16: 2, INT16: 2, INT32: 4, INT64: 8, BOOL: 1, FLOAT16: 2, DOUBLE: 8,
  UINT32: 4, UINT64: 8, BFLOAT16: 2, FLOAT8E4M3FN: 1, FLOAT8E4M3FNUZ: 1, FLOAT8E5M2: 1, FLOAT8E5M2FNUZ: 1, FLOAT8E8M0: 1,
};

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  model: null, // the summary of the open model
  generation: 0, // bumped when another model opens: late answers for the old one are dropped
  upload: { files: [], model: null }, // picked files: {file, path}
  modelsCursor: null,
  tensorsCursor: null,
  graph: null, // {graphs, root} once the worker has loaded the document
  graphLoading: null, // {id, done} while it loads and draws its first view
  diagnostics: null, // {errors, warnings, items, complete, byNode: Map(`${path}|${position}` -> [diagnostic])}
  graphPath: null,
  graphPage: 0,
  layout: null,
  selected: null,
  transform: { x: 0, y: 0, k: 1 },
};

// -- small helpers

const $ = (selector) => document.querySelector(selector);

function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// replaceChildren, skipping null, undefined and false, flattening arrays
function fill(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attributes = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  return node;
}

const number = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : String(n));

function bytes(n) {
  if (typeof n !== "number") return "?";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = -1;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]} (${number(n)} B)`;
}

const dimsText = (dims) => "[" + dims.join(", ") + "]";
const elementCount = (dims) => dims.reduce((a, b) => a * b, 1);

function status(text, kind = "info") {
  const box = $("#status");
  box.textContent = text;
  box.className = kind;
}

// An error answer of the service (an RFC 9457 problem), or a failure to reach it.
class Problem extends Error {
  constructor(problem) {
    super(problem.detail || problem.title || `HTTP ${problem.status}`);
    this.problem = problem;
  }
}

function describeError(error) {
  if (error instanceof Problem || (error && error.problem)) {
    const p = error.problem;
    const hint = p.status === 401 ? " — enter an API key above" : p.status === 403 ? " — this key lacks the scope" : "";
    return `${p.status || ""} ${p.kind || p.title || "error"}: ${p.detail || ""}${hint}`;
  }
  return String(error && error.message ? error.message : error);
}

function fail(error) {
  status(describeError(error), "error");
}

function headers(extra = {}) {
  return Object.assign(state.token ? { Authorization: "Bearer " + state.token } : {}, extra);
}

async function api(url, options = {}) {
  const response = await fetch(url, Object.assign({}, options, { headers: headers(options.headers || {}) }));
  if (!response.ok) {
    let problem;
    try {
      problem = await response.json();
    } catch (_) {
      problem = { status: response.status, detail: response.statusText };
    }
    problem.status = problem.status || response.status;
    throw new Problem(problem);
  }
  return response;
}

const apiJson = async (url, options) => (await api(url, options)).json();

// -- tabs

function showTab(name) {
  for (const button of document.querySelectorAll("#tabs button")) button.setAttribute("aria-selected", String(button.dataset.tab === name));
  for (const panel of document.querySelectorAll(".tab")) panel.hidden = panel.id !== "tab-" + name;
  if (name === "graph" && state.model) openGraph().catch(fail);
  if (name === "tensors" && state.model && !$("#tensor-list tbody").children.length) listTensors("").catch(fail);
}

// -- opening models

function setToken(value) {
  state.token = value;
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function relativeLocation(path, folder) {
  return folder && path.startsWith(folder + "/") ? path.slice(folder.length + 1) : path.split("/").pop();
}

function pickFiles(entries) {
  // entries: [{file, path}] with the path relative to what was picked or dropped
  // a pick with a model file starts over; one without adds external data files to the model picked before
  const hasModel = entries.some((e) => /\.onnx$/i.test(e.path));
  state.upload.files = hasModel ? entries : state.upload.files.concat(entries);
  const models = state.upload.files.filter((e) => /\.onnx$/i.test(e.path));
  if (!state.upload.model || !state.upload.files.includes(state.upload.model)) state.upload.model = models[0] || state.upload.files[0] || null;
  renderPicked();
}

function renderPicked() {
  const { files, model } = state.upload;
  $("#picked").hidden = files.length === 0;
  const select = $("#model-file");
  fill(select, ...files.map((e, i) => el("option", { value: String(i), selected: e === model }, e.path)));
  const folder = model && model.path.includes("/") ? model.path.slice(0, model.path.lastIndexOf("/")) : "";
  const rows = files
    .filter((e) => e !== model)
    .map((e) => {
      const input = el("input", { value: e.location || relativeLocation(e.path, folder), spellcheck: "false", "aria-label": "location of " + e.path });
      input.addEventListener("input", () => (e.location = input.value));
      e.location = input.value;
      return el("tr", {}, el("td", {}, e.path), el("td", {}, "→"), el("td", {}, input), el("td", {}, bytes(e.file.size).split(" (")[0]));
    });
  fill($("#externals tbody"), ...rows);
}

async function entriesOfDrop(items) {
  const found = [];
  async function walk(entry, prefix) {
    if (entry.isFile) {
      const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
      found.push({ file, path: prefix + entry.name });
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
        if (!batch.length) break;
        for (const child of batch) await walk(child, prefix + entry.name + "/");
      }
    }
  }
  const roots = [...items].map((item) => (item.webkitGetAsEntry ? item.webkitGetAsEntry() : null));
  if (roots.every(Boolean)) {
    for (const root of roots) await walk(root, "");
    return found;
  }
  return null;
}

async function upload() {
  const { files, model } = state.upload;
  if (!model) return;
  const form = new FormData();
  form.append("model", model.file, model.file.name);
  for (const entry of files) if (entry !== model) form.append("external_data", entry.file, entry.location);
  status(`importing ${model.file.name} (${bytes(files.reduce((n, e) => n + e.file.size, 0)).split(" (")[0]})…`);
  // a refusal's offset is in the model file: the hex view reads the File sent, whatever its
  // name (the problem's `input` is the name bounded and escaped by the service, not a key to it)
  await importWith({ method: "POST", body: form }, model.file);
}

async function importPath(path) {
  status(`importing ${path} from the data root…`);
  await importWith({ method: "POST", body: JSON.stringify({ path }), headers: { "Content-Type": "application/json" } }, null);
}

// `sent`: the model File uploaded (for a refusal's hex view), or null for a data-root path
async function importWith(request, sent) {
  let response;
  try {
    response = await api("/models", request);
  } catch (error) {
    if (error instanceof Problem && error.problem.kind) {
      showProblem(error.problem, sent);
      status(describeError(error), "error");
      return;
    }
    throw error;
  }
  const summary = await response.json();
  status(`${response.status === 201 ? "imported" : "already imported"}: ${summary.input}`, "ok");
  openSummary(summary);
  listModels(true).catch(() => {});
}

async function openModel(id) {
  status("opening " + id.slice(0, 12) + "…");
  openSummary(await apiJson(`/models/${encodeURIComponent(id)}`));
  status("", "info");
}

function openSummary(summary) {
  state.model = summary;
  state.generation++;
  state.graph = null;
  state.layout = null;
  state.selected = null;
  $("#scene").replaceChildren();
  $("#details").hidden = true;
  $("#tensor-list tbody").replaceChildren();
  $("#tensor").replaceChildren();
  $("#tabs [data-tab=problem]").hidden = true;
  if (location.hash !== "#model=" + summary.id) history.replaceState(null, "", "#model=" + summary.id);
  const check = summary.diagnostics || { errors: 0, warnings: 0, items: [] };
  state.diagnostics = { errors: check.errors, warnings: check.warnings, items: check.items, complete: false, byNode: new Map() };
  renderSummary(summary);
  showTab("summary");
  countParameters(summary, state.generation).catch(fail);
  loadDiagnostics(summary, state.generation).catch(fail);
}

let modelsListing = 0; // the latest listing wins: an older answer still arriving is dropped

async function listModels(reset) {
  const listing = reset ? ++modelsListing : modelsListing;
  const cursor = reset ? null : state.modelsCursor;
  const page = await apiJson("/models?limit=50" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
  if (listing !== modelsListing) return;
  if (reset) $("#models").replaceChildren();
  for (const item of page.items) {
    $("#models").append(
      el("li", {}, el("a", { href: "#model=" + item.id, title: item.id, onclick: (e) => (e.preventDefault(), openModel(item.id).catch(fail)) }, item.input),
        el("small", {}, ` ${bytes(item.model_file.size).split(" (")[0]} · ${item.created.slice(0, 19).replace("T", " ")}`)),
    );
  }
  state.modelsCursor = page.next_cursor;
  $("#more-models").hidden = !page.next_cursor;
}

// -- the summary

function table(head, rows, className = "grid") {
  return el("table", { class: className }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

function renderSummary(s) {
  const g = s.graph;
  const opTypes = Object.entries(g.op_types).sort((a, b) => b[1] - a[1]);
  const cut = (list, shown) => (s.truncated.includes(list) ? ` (the first ${number(shown)} of ${number(s.counts[list])})` : "");
  const panel = $("#tab-summary");
  fill(panel, 
    el("h2", {}, s.input),
    el("dl", { class: "facts" },
      el("dt", {}, "id"), el("dd", {}, el("code", {}, s.id)),
      el("dt", {}, "file"), el("dd", {}, `${bytes(s.model_file.size)}, sha256 `, el("code", {}, s.model_file.sha256.slice(0, 16) + "…")),
      el("dt", {}, "producer"), el("dd", {}, `${s.producer.name || "(none)"} ${s.producer.version || ""}`),
      el("dt", {}, "IR version"), el("dd", {}, String(s.ir_version)),
      el("dt", {}, "opsets"), el("dd", {}, s.opsets.map((o) => `${o.domain || "ai.onnx"} ${o.version}`).join(", ") || "(none)"),
      el("dt", {}, "graph"), el("dd", {}, `${g.name || "(unnamed)"}: ${number(g.node_count)} nodes, ${number(g.subgraph_count)} subgraphs, ${number(s.counts.tensors)} tensors`),
      s.domain ? [el("dt", {}, "domain"), el("dd", {}, s.domain)] : null,
    ),
    el("h3", {}, "Operator check"),
    el("p", { id: "diagnostic-counts" },
      el("strong", { id: "diagnostic-errors", class: s.diagnostics && s.diagnostics.errors ? "bad" : null }, number(s.diagnostics ? s.diagnostics.errors : 0)), " errors, ",
      el("strong", { id: "diagnostic-warnings" }, number(s.diagnostics ? s.diagnostics.warnings : 0)), " warnings"),
    el("div", { id: "diagnostics" }, el("p", { class: "hint" }, "reading…")),
    el("h3", {}, "Inputs" + cut("inputs", g.inputs.length)),
    table(["name", "type"], g.inputs.map((v) => [v.name, typeText(v.type)])),
    el("h3", {}, "Outputs" + cut("outputs", g.outputs.length)),
    table(["name", "type"], g.outputs.map((v) => [v.name, typeText(v.type)])),
    el("h3", {}, "Op types" + cut("op_types", opTypes.length)),
    table(["op type", "nodes"], opTypes.map(([op, n]) => [op, number(n)]), "grid compact"),
    el("h3", {}, "Parameters"),
    el("div", { id: "parameters" }, el("p", { class: "hint" }, "counting…")),
    s.functions.length ? [el("h3", {}, "Functions"), table(["domain", "name", "nodes"], s.functions.map((f) => [f.domain, f.name, number(f.node_count)]))] : null,
    Object.keys(s.metadata_props).length ? [el("h3", {}, "Metadata"), table(["key", "value"], Object.entries(s.metadata_props))] : null,
  );
}

// Parameter count and bytes by element type: every initializer (and sparse
// initializer values) of the catalogue, read a page of 1000 at a time.
async function countParameters(summary, generation) {
  const byType = new Map();
  const constants = { tensors: 0, elements: 0, bytes: 0 };
  let seen = 0;
  let cursor = null;
  do {
    const url = `${summary.links.tensors}?limit=1000` + (cursor ? "&cursor=" + encodeURIComponent(cursor) : "");
    const page = await apiJson(url);
    if (generation !== state.generation) return;
    for (const t of page.items) {
      const n = elementCount(t.dims);
      if (t.role === "initializer" || t.role === "sparse_values") {
        const row = byType.get(t.elem_type) || { tensors: 0, elements: 0, bytes: 0 };
        row.tensors++;
        row.elements += n;
        row.bytes += t.byte_length;
        byType.set(t.elem_type, row);
      } else if (t.role === "attribute") {
        constants.tensors++;
        constants.elements += n;
        constants.bytes += t.byte_length;
      }
    }
    seen += page.items.length;
    cursor = page.next_cursor;
    if (cursor) fill($("#parameters"), el("p", { class: "hint" }, `counting… ${number(seen)} of ${number(summary.counts.tensors)} tensors`));
  } while (cursor);
  const rows = [...byType.entries()].sort((a, b) => b[1].bytes - a[1].bytes);
  const total = rows.reduce((t, [, r]) => ({ tensors: t.tensors + r.tensors, elements: t.elements + r.elements, bytes: t.bytes + r.bytes }), { tensors: 0, elements: 0, bytes: 0 });
  fill($("#parameters"), 
    el("p", {}, el("strong", { id: "parameter-count" }, number(total.elements)), ` parameters in ${number(total.tensors)} initializers, ${bytes(total.bytes)}`),
    table(["element type", "initializers", "parameters", "bytes"],
      rows.map(([type, r]) => [type, number(r.tensors), number(r.elements), bytes(r.bytes)]), "grid compact"),
    constants.tensors ? el("p", { class: "hint" }, `Besides: ${number(constants.tensors)} attribute tensors (Constant values and the like), ${number(constants.elements)} elements, ${bytes(constants.bytes)}.`) : null,
  );
}

// -- the operator check's diagnostics

// Every diagnostic, up to MAX_DIAGNOSTICS, a page at a time; then listed here
// and, once the graph is loaded, placed on their nodes.
async function loadDiagnostics(summary, generation) {
  const check = state.diagnostics;
  if (check.errors + check.warnings > check.items.length) {
    const items = [];
    let url = `${summary.links.self}/diagnostics?limit=${DIAGNOSTICS_PAGE}`;
    while (url && items.length < MAX_DIAGNOSTICS) {
      const page = await apiJson(url);
      if (generation !== state.generation) return;
      items.push(...page.items);
      url = page.links.next;
    }
    check.items = items.slice(0, MAX_DIAGNOSTICS);
  }
  check.complete = true;
  renderDiagnostics();
  await locateDiagnostics();
}

function renderDiagnostics() {
  const check = state.diagnostics;
  const total = check.errors + check.warnings;
  if (!total) return fill($("#diagnostics"), el("p", { class: "hint" }, "no finding: every node matches its operator's schema"));
  const rows = check.items.map((d, i) => el("tr", { class: "diagnostic " + d.severity },
    el("td", {}, el("span", { class: "severity " + d.severity }, d.severity)),
    el("td", {}, el("code", {}, d.code)),
    el("td", {}, d.op_type || d.node_name ? diagnosticLink(d, i) : el("span", { class: "hint" }, "(the model)")),
    el("td", {}, d.message),
    el("td", {}, el("code", {}, d.field_path)),
    el("td", { class: "number" }, d.offset === null || d.offset === undefined ? "–" : number(d.offset)),
  ));
  fill($("#diagnostics"),
    total > check.items.length ? el("p", { class: "hint" }, `The first ${number(check.items.length)} of ${number(total)}, in file order:`) : null,
    el("table", { class: "grid diagnostics" },
      el("thead", {}, el("tr", {}, ["severity", "code", "node", "message", "field path", "offset"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)),
  );
}

function diagnosticLink(d, i) {
  const label = `${d.op_type || "?"} ${d.node_name || ""}`.trim();
  // nodes of function bodies are not drawn: only a node of the model's graphs is a link
  if (!/^ModelProto\.graph\.node\[/.test(d.field_path || "")) return el("span", {}, label, el("span", { class: "hint" }, " (in a function)"));
  return el("a", { href: "#", class: "diagnostic-link", dataset: { diagnostic: String(i) }, onclick: (e) => (e.preventDefault(), jumpToDiagnostic(d).catch(fail)) }, label);
}

// Find each diagnostic's node (the worker matches field paths to graph paths
// and file indexes) and mark the nodes drawn.
async function locateDiagnostics() {
  const check = state.diagnostics;
  const generation = state.generation;
  if (!state.graph || !check || !check.items.length) return;
  const places = await ask("locate", { fieldPaths: check.items.map((d) => d.field_path) });
  if (generation !== state.generation || check !== state.diagnostics) return;
  check.byNode = new Map();
  check.items.forEach((d, i) => {
    d.at = places[i];
    if (!d.at) return;
    const key = `${d.at.path}|${d.at.position}`;
    if (!check.byNode.has(key)) check.byNode.set(key, []);
    check.byNode.get(key).push(d);
  });
  for (const group of document.querySelectorAll("#scene .item.node")) markNode(group, state.graphPath, Number(group.dataset.position));
}

function diagnosticsOf(path, position) {
  return (state.diagnostics && state.diagnostics.byNode.get(`${path}|${position}`)) || [];
}

function markNode(group, path, position) {
  const found = diagnosticsOf(path, position);
  const hasError = found.some((d) => d.severity === "error");
  group.classList.toggle("has-error", hasError);
  group.classList.toggle("has-warning", !hasError && found.length > 0);
}

async function jumpToDiagnostic(d) {
  showTab("graph");
  await openGraph();
  if (!d.at) await locateDiagnostics();
  if (!d.at) return status(`no node of the graphs is at ${d.field_path}`, "error");
  await goToNode(d.at.path, d.at.position, d.at.page);
}

// -- the graph: the worker and the drawing

let worker = null;
let nextCall = 0;
const pending = new Map();

function graphWorker() {
  if (worker) return worker;
  worker = new Worker("/ui/graph-worker.js");
  worker.onmessage = (event) => {
    const data = event.data;
    if (data.progress) return status(data.progress);
    const call = pending.get(data.id);
    if (!call) return;
    pending.delete(data.id);
    if (data.ok) call.resolve(data.result);
    else call.reject(data.error.problem ? new Problem(data.error.problem) : new Error(data.error.message));
  };
  worker.onerror = (event) => {
    event.preventDefault();
    for (const call of pending.values()) call.reject(new Error("graph worker: " + event.message));
    pending.clear();
    worker = null;
  };
  return worker;
}

function ask(op, message = {}) {
  const id = ++nextCall;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    graphWorker().postMessage(Object.assign({ id, op }, message));
  });
}

// Resolves once the open model's graph is loaded and its first view drawn.
function openGraph() {
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
    loaded = await ask("load", { url: state.model.links.graph, token: state.token });
  } catch (error) {
    if (generation !== state.generation) return; // another model is open by now
    throw error;
  }
  if (generation !== state.generation) return;
  state.graph = Object.assign(loaded, { id: state.model.id });
  const select = $("#graph-select");
  fill(select, ...loaded.graphs.map((g) =>
    el("option", { value: g.path }, `${g.parent ? "↳ " : ""}${g.title} — ${number(g.nodes)} nodes${g.pages > 1 ? `, ${g.pages} pages` : ""}`)));
  await locateDiagnostics();
  await drawGraph(loaded.root, 0);
}

async function drawGraph(path, page, focus = null) {
  const generation = state.generation;
  const layout = await ask("view", { path, page });
  if (generation !== state.generation) return;
  if (path !== state.graphPath) $("#details").hidden = true;
  state.graphPath = path;
  state.graphPage = layout.page;
  state.layout = layout;
  $("#graph-select").value = path;
  $("#pager").hidden = layout.pages < 2;
  $("#page-label").textContent = `page ${layout.page + 1} of ${layout.pages}: nodes ${number(layout.first)}–${number(layout.last - 1)} of ${number(layout.nodeCount)}`;
  await render(layout);
  if (state.layout !== layout) return;
  const note = layout.pages > 1 ? `; this graph has ${number(layout.nodeCount)} nodes: it is drawn ${number(layout.pageSize)} at a time, in topological order (▲▼ stubs name the values that cross pages)` : "";
  status(`${number(layout.last - layout.first)} nodes laid out in ${(layout.ms / 1000).toFixed(2)} s${note}`, "ok");
  if (focus !== null) selectNode(path, focus, true).catch(fail);
}

const RENDER_CHUNK = 400; // items (and as many edges) put into the drawing per task: the page never stalls on a large one

async function render(layout) {
  const generation = state.generation;
  const scene = $("#scene");
  const canvas = $("#canvas");
  canvas.dataset.layoutMs = String(layout.ms);
  canvas.dataset.nodes = String(layout.last - layout.first);
  delete canvas.dataset.drawn;
  const edges = svg("g", { class: "edges" });
  const nodes = svg("g", { class: "nodes" });
  fill(scene, edges, nodes);
  placeView(layout);
  const steps = Math.max(layout.edges.length, layout.items.length);
  for (let start = 0; start < steps; start += RENDER_CHUNK) {
    if (start > 0) await new Promise((resolve) => setTimeout(resolve, 0));
    if (generation !== state.generation || state.layout !== layout) return;
    edges.append(...layout.edges.slice(start, start + RENDER_CHUNK).filter((e) => e.points.length).map(edgePath));
    nodes.append(...layout.items.slice(start, start + RENDER_CHUNK).map((item) => itemGroup(item, layout.path)));
  }
  canvas.dataset.drawn = "true";
}

function edgePath(edge) {
  const d = "M" + edge.points.map((p) => `${p.x.toFixed(1)},${p.y.toFixed(1)}`).join("L");
  const path = svg("path", { d, class: edge.implicit ? "edge implicit" : "edge", "marker-end": "url(#arrow)" });
  const title = svg("title");
  title.textContent = edge.values.join(", ");
  path.append(title);
  return path;
}

function itemGroup(item, path) {
  const group = svg("g", { class: `item ${item.kind}${item.subgraph ? " has-subgraph" : ""}`, transform: `translate(${item.x},${item.y})` });
  if (item.kind === "node") {
    group.dataset.position = String(item.position);
    markNode(group, path, item.position);
  } else group.dataset.value = item.value;
  if (item.page !== undefined && item.page !== null) group.dataset.page = String(item.page);
  group.append(svg("rect", { width: item.width, height: item.height, rx: item.kind === "node" ? 3 : 10 }));
  item.lines.forEach((line, i) => {
    const text = svg("text", { x: item.width / 2, y: i === 0 ? 15 : 28, class: i === 0 ? "head" : "sub" });
    text.textContent = line;
    group.append(text);
  });
  return group;
}

function placeView(layout) {
  fit();
  // a drawing too large to read when fitted starts at its top, readable; Fit shows all of it
  const first = layout.items.find((i) => i.kind === "node");
  if (state.transform.k < 0.25 && first) {
    const box = $("#canvas").getBoundingClientRect();
    state.transform = { k: 0.8, x: box.width / 2 - (first.x + first.width / 2) * 0.8, y: 20 - first.y * 0.8 };
    applyTransform();
  }
}

function applyTransform() {
  const { x, y, k } = state.transform;
  $("#scene").setAttribute("transform", `translate(${x},${y}) scale(${k})`);
  $("#canvas").classList.toggle("far", k < 0.35);
}

function fit() {
  const layout = state.layout;
  if (!layout) return;
  const box = $("#canvas").getBoundingClientRect();
  const k = Math.min(1.5, Math.max(0.02, Math.min(box.width / (layout.width + 40), box.height / (layout.height + 40))));
  state.transform = { k, x: (box.width - layout.width * k) / 2, y: Math.max(10, (box.height - layout.height * k) / 2) };
  applyTransform();
}

function zoom(factor, cx, cy) {
  const t = state.transform;
  const box = $("#canvas").getBoundingClientRect();
  const px = cx === undefined ? box.width / 2 : cx;
  const py = cy === undefined ? box.height / 2 : cy;
  const k = Math.min(4, Math.max(0.01, t.k * factor));
  state.transform = { k, x: px - ((px - t.x) * k) / t.k, y: py - ((py - t.y) * k) / t.k };
  applyTransform();
}

function centerOn(item) {
  // in the part of the canvas the details panel leaves visible
  const box = $("#canvas").getBoundingClientRect();
  const details = $("#details");
  const width = box.width - (details.hidden ? 0 : details.getBoundingClientRect().width);
  const k = Math.max(state.transform.k, 0.8);
  state.transform = { k, x: width / 2 - (item.x + item.width / 2) * k, y: box.height / 2 - (item.y + item.height / 2) * k };
  applyTransform();
}

function installPanZoom() {
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
    if (group.dataset.position !== undefined) selectNode(state.graphPath, Number(group.dataset.position), false).catch(fail);
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

async function goToNode(path, position, page) {
  if (path !== state.graphPath || page !== state.graphPage) await drawGraph(path, page, position);
  else await selectNode(path, position, true);
}

async function selectNode(path, position, center) {
  const details = await ask("node", { path, position });
  for (const old of document.querySelectorAll("#scene .item.selected")) old.classList.remove("selected");
  const group = document.querySelector(`#scene .item[data-position="${position}"]`);
  if (group) group.classList.add("selected");
  state.selected = details;
  renderDetails(details);
  if (center && state.layout) {
    const item = state.layout.items.find((i) => i.kind === "node" && i.position === position);
    if (item) centerOn(item);
  }
}

function nodeLink(ref) {
  const label = `${ref.op_type} ${ref.name || "#" + ref.position}`;
  return el("a", { href: "#", class: "node-link", onclick: (e) => (e.preventDefault(), goToNode(ref.path, ref.position, ref.page).catch(fail)) }, label);
}

function tensorLink(ref, label) {
  return el("a", { href: "#", class: "tensor-link", onclick: (e) => (e.preventDefault(), openTensorRef(ref).catch(fail)) }, label || ref.name || "(unnamed)");
}

function valueRow(v, asOutput) {
  if (v.absent) return el("li", { class: "hint" }, asOutput ? "(absent: an optional output not asked for)" : "(absent: an optional input left out)");
  if (v.missing) return el("li", {}, el("code", {}, v.name));
  return el("li", {},
    el("code", {}, v.name), " ", v.type !== "?" ? el("span", { class: "type" }, v.type) : null,
    v.kind === "input" ? el("span", { class: "badge" }, "graph input") : null,
    v.scope ? el("span", { class: "badge" }, "captured") : null,
    v.initializer ? [" ", tensorLink(v.initializer, "initializer " + dimsText(v.initializer.dims))] : null,
    v.producer && !asOutput ? [el("span", { class: "hint" }, " from "), nodeLink(v.producer)] : null,
  );
}

function attributeRow(a) {
  let value;
  if (a.subgraphs) {
    value = a.subgraphs.map((g) => el("a", { href: "#", class: "subgraph-link", onclick: (e) => (e.preventDefault(), drawGraph(g.path, 0).catch(fail)) },
      `open subgraph ${g.name || ""} (${number(g.nodes)} nodes)`));
  } else if (a.ref) {
    value = `refers to the function's attribute ${a.ref}`;
  } else if (a.type === "TENSOR" && a.json) {
    value = tensorLink(a.json, `${a.json.name || "(unnamed)"} ${a.json.elem_type}${dimsText(a.json.dims)}`);
  } else if (a.type === "TENSORS" && Array.isArray(a.json)) {
    value = a.json.map((t) => tensorLink(t, `${t.name || "(unnamed)"} ${t.elem_type}${dimsText(t.dims)}`));
  } else {
    const text = JSON.stringify(a.json);
    value = el("code", {}, text.length > 400 ? text.slice(0, 400) + "…" : text);
  }
  return el("tr", {}, el("th", {}, a.name), el("td", { class: "hint" }, a.type), el("td", {}, value));
}

function renderDetails(d) {
  const consumers = [];
  for (const out of d.outputs) {
    if (!out.consumers) continue;
    for (const c of out.consumers) consumers.push(el("li", {}, nodeLink(c), el("span", { class: "hint" }, " reads "), el("code", {}, out.name)));
    if (out.consumerCount > out.consumers.length) consumers.push(el("li", { class: "hint" }, `… ${number(out.consumerCount - out.consumers.length)} more`));
  }
  const panel = $("#details");
  panel.hidden = false;
  fill(panel, 
    el("button", { type: "button", class: "quiet close", title: "close", onclick: () => (panel.hidden = true) }, "×"),
    el("h3", {}, d.op_type, " ", el("span", { class: "hint" }, d.domain ? `${d.domain} v${d.opset_version}` : `opset ${d.opset_version}`)),
    el("p", {}, el("strong", {}, d.name || "(unnamed)"), el("span", { class: "hint" }, ` node ${d.position} (file index ${d.index})`)),
    diagnosticsPart(diagnosticsOf(d.path, d.position)),
    el("h4", {}, "Attributes"),
    d.attributes.length ? el("table", { class: "attributes" }, el("tbody", {}, d.attributes.map(attributeRow))) : el("p", { class: "hint" }, "none"),
    el("h4", {}, "Inputs"), el("ol", { class: "values" }, d.inputs.map((v) => valueRow(v, false))),
    el("h4", {}, "Outputs"), el("ol", { class: "values" }, d.outputs.map((v) => valueRow(v, true))),
    el("h4", {}, "Consumers"), consumers.length ? el("ul", { class: "values" }, consumers) : el("p", { class: "hint" }, "none in this graph"),
  );
}

function diagnosticsPart(found) {
  if (!found.length) return null;
  return [
    el("h4", {}, "Diagnostics"),
    el("ul", { class: "values diagnostics" }, found.map((x) => el("li", { class: "diagnostic " + x.severity },
      el("span", { class: "severity " + x.severity }, x.severity), " ", el("code", {}, x.code), " ", x.message,
      el("div", { class: "hint" }, el("code", {}, x.field_path), x.offset === null || x.offset === undefined ? "" : `, offset ${number(x.offset)}`)))),
  ];
}

let searchTimer = null;
function installSearch() {
  const input = $("#search");
  const list = $("#search-results");
  input.addEventListener("input", () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => runSearch(input.value).catch(fail), 200);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Escape") list.hidden = true;
    if (event.key === "Enter") {
      const first = list.querySelector("a");
      if (first) first.click();
    }
  });
}

async function runSearch(query) {
  const list = $("#search-results");
  if (!state.graph || !query) {
    list.hidden = true;
    return;
  }
  const { results, total } = await ask("search", { query });
  fill(list, 
    ...results.map((r) => el("li", {}, el("a", { href: "#", onclick: (e) => {
      e.preventDefault();
      list.hidden = true;
      if (r.position !== null) goToNode(r.path, r.position, r.page).catch(fail);
      if (r.initializer) openTensorRef(r.initializer).catch(fail);
    } }, el("span", { class: "badge" }, r.kind), " ", r.text, " ", el("span", { class: "hint" }, r.detail)))),
    total > results.length ? el("li", { class: "hint" }, `${number(total - results.length)} more: refine the search`) : null,
    total === 0 ? el("li", { class: "hint" }, "no node or tensor name contains this") : null,
  );
  list.hidden = false;
}

// -- tensors

async function listTensors(prefix, more = false) {
  const generation = state.generation;
  if (!more) {
    state.tensorsCursor = null;
    $("#tensor-list tbody").replaceChildren();
  }
  let url = `${state.model.links.tensors}?limit=100`;
  if (prefix) url += "&prefix=" + encodeURIComponent(prefix);
  if (more && state.tensorsCursor) url += "&cursor=" + encodeURIComponent(state.tensorsCursor);
  const page = await apiJson(url);
  if (generation !== state.generation) return;
  for (const t of page.items) {
    $("#tensor-list tbody").append(el("tr", {},
      el("td", {}, el("a", { href: "#", onclick: (e) => (e.preventDefault(), openTensor(t).catch(fail)) }, t.name || "(unnamed)")),
      el("td", {}, t.elem_type), el("td", {}, dimsText(t.dims)), el("td", {}, number(t.byte_length)), el("td", {}, t.role)));
  }
  state.tensorsCursor = page.next_cursor;
  $("#more-tensors").hidden = !page.next_cursor;
}

async function openTensorRef(ref) {
  // a reference from the graph (name, field_path, elem_type, dims, href): its catalogue entry has the rest
  showTab("tensors");
  const page = await apiJson(`${state.model.links.tensors}?limit=1000&prefix=${encodeURIComponent(ref.name)}`);
  const entry = page.items.find((t) => t.field_path === ref.field_path) || Object.assign({ byte_length: null, source: "?", role: "?", alias: ref.name }, ref);
  await openTensor(entry);
}

function whereItLives(t) {
  const initializer = (state.model.graph.initializers || []).find((i) => i.field_path === t.field_path);
  if (initializer && initializer.location) {
    const l = initializer.location;
    if (l.file) return `${l.source}: ${l.file}, offset ${number(l.offset)}, ${number(l.length)} bytes`;
    if (l.offset !== undefined && l.offset !== null) return `${l.source} in the model file at offset ${number(l.offset)}`;
    return l.source;
  }
  return t.source === "external" ? "external data file" : t.source === "raw_data" ? "raw_data in the model file" : t.source;
}

async function openTensor(t) {
  const generation = state.generation;
  const box = $("#tensor");
  const npyOk = !/^(STRING|U?INT4|FLOAT4E2M1|U?INT2|FLOAT6.*)$/.test(t.elem_type);
  const stem = (t.alias || "tensor").replace(/[^A-Za-z0-9._-]/g, "_");
  fill(box, 
    el("h3", {}, t.name || "(unnamed)"),
    el("dl", { class: "facts" },
      el("dt", {}, "type"), el("dd", {}, t.elem_type),
      el("dt", {}, "dims"), el("dd", {}, `${dimsText(t.dims)} = ${number(elementCount(t.dims))} elements`),
      el("dt", {}, "bytes"), el("dd", { id: "tensor-bytes" }, t.byte_length === null ? "?" : bytes(t.byte_length)),
      el("dt", {}, "lives in"), el("dd", {}, whereItLives(t)),
      el("dt", {}, "field path"), el("dd", {}, el("code", {}, t.field_path)),
      el("dt", {}, "role"), el("dd", {}, t.role),
    ),
    el("p", { class: "downloads" },
      el("button", { type: "button", id: "download-raw", onclick: () => download(t.href, stem + ".bin").catch(fail) }, "Download raw"),
      " ",
      npyOk ? el("button", { type: "button", id: "download-npy", onclick: () => download(withQuery(t.href, "format=npy"), stem + ".npy").catch(fail) }, "Download .npy") : el("span", { class: "hint" }, "no .npy form for this type"),
    ),
    el("div", { id: "preview" }, el("p", { class: "hint" }, "reading…")),
  );
  // the catalogue's byte_length is the packed size; STRING tensors are served as (length, bytes) pairs
  const known = t.byte_length !== null && t.elem_type !== "STRING";
  const wanted = known ? Math.min(PREVIEW_BYTES, t.byte_length) : PREVIEW_BYTES;
  if (wanted === 0 || elementCount(t.dims) === 0) {
    fill($("#preview"), el("p", { class: "hint" }, "no bytes: an empty tensor"));
    return;
  }
  const response = await api(t.href, { headers: { Range: `bytes=0-${wanted - 1}` } });
  const data = new Uint8Array(await response.arrayBuffer());
  if (generation !== state.generation) return;
  const range = /\/(\d+)$/.exec(response.headers.get("Content-Range") || "");
  const served = range ? Number(range[1]) : data.byteLength;
  if (!known) fill($("#tensor-bytes"), bytes(served), el("span", { class: "hint" }, " as served"));
  fill($("#preview"), ...preview(t, data));
}

function withQuery(href, query) {
  return href + (href.includes("?") ? "&" : "?") + query;
}

async function download(href, filename) {
  // with an API key the browser cannot be told to send the header: fetch it here, then save the blob
  let url = href;
  if (state.token) url = URL.createObjectURL(await (await api(href)).blob());
  const link = el("a", { href: url, download: filename, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  if (url !== href) setTimeout(() => URL.revokeObjectURL(url), 60000);
}

// decoding the raw little-endian layout

function half(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

function decode(type, data) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const size = ELEMENT_SIZES[type];
  const count = Math.floor(data.byteLength / size);
  const values = new Array(count);
  const f32 = new DataView(new ArrayBuffer(4));
  for (let i = 0; i < count; i++) {
    const at = i * size;
    switch (type) {
      case "FLOAT": values[i] = view.getFloat32(at, true); break;
      case "DOUBLE": values[i] = view.getFloat64(at, true); break;
      case "FLOAT16": values[i] = half(view.getUint16(at, true)); break;
      case "BFLOAT16": f32.setUint32(0, view.getUint16(at, true) << 16); values[i] = f32.getFloat32(0); break;
      case "INT8": values[i] = view.getInt8(at); break;
      case "UINT8": case "BOOL": values[i] = view.getUint8(at); break;
      case "INT16": values[i] = view.getInt16(at, true); break;
      case "UINT16": values[i] = view.getUint16(at, true); break;
      case "INT32": values[i] = view.getInt32(at, true); break;
      case "UINT32": values[i] = view.getUint32(at, true); break;
      case "INT64": values[i] = Number(view.getBigInt64(at, true)); break;
      case "UINT64": values[i] = Number(view.getBigUint64(at, true)); break;
      default: values[i] = view.getUint8(at); // float8 types: their bit patterns
    }
  }
  return values;
}

function decodeStrings(data) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const out = [];
  let at = 0;
  while (at + 8 <= data.byteLength && out.length < PREVIEW_ITEMS) {
    const length = Number(view.getBigUint64(at, true));
    if (at + 8 + length > data.byteLength) break;
    out.push(new TextDecoder().decode(data.subarray(at + 8, at + 8 + length)));
    at += 8 + length;
  }
  return out;
}

function formatValue(v) {
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  return Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(4) : v.toPrecision(6).replace(/\.?0+$/, "");
}

function preview(t, data) {
  const total = elementCount(t.dims);
  if (t.elem_type === "STRING") {
    const strings = decodeStrings(data);
    return [el("h4", {}, `Values: the first ${strings.length}`), el("ol", { class: "strings", start: "0" }, strings.map((s) => el("li", {}, el("code", {}, JSON.stringify(s)))))];
  }
  if (!ELEMENT_SIZES[t.elem_type]) {
    const hex = [...data.subarray(0, 64)].map((b) => b.toString(16).padStart(2, "0")).join(" ");
    return [el("p", { class: "hint" }, `${t.elem_type}: elements packed below a byte; the first bytes:`), el("pre", { class: "hex" }, hex)];
  }
  const values = decode(t.elem_type, data);
  const bits = /^FLOAT8/.test(t.elem_type) ? " (bit patterns)" : "";
  const finite = values.filter(Number.isFinite);
  let min = Infinity;
  let max = -Infinity;
  let sum = 0;
  for (const v of finite) {
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v;
  }
  const over = values.length < total ? `over the first ${number(values.length)} of ${number(total)} elements` : `over all ${number(values.length)} elements`;
  const nonFinite = values.length - finite.length;
  return [
    el("h4", {}, "Statistics ", el("span", { class: "hint" }, over + bits)),
    el("dl", { class: "facts stats" },
      el("dt", {}, "min"), el("dd", { id: "stat-min" }, finite.length ? formatValue(min) : "–"),
      el("dt", {}, "max"), el("dd", { id: "stat-max" }, finite.length ? formatValue(max) : "–"),
      el("dt", {}, "mean"), el("dd", { id: "stat-mean" }, finite.length ? formatValue(sum / finite.length) : "–"),
      nonFinite ? [el("dt", {}, "NaN or ±Inf"), el("dd", {}, number(nonFinite))] : null,
    ),
    histogram(finite, min, max),
    el("h4", {}, `Values: the first ${Math.min(PREVIEW_ITEMS, values.length)}`),
    el("pre", { class: "values", id: "values" }, values.slice(0, PREVIEW_ITEMS).map(formatValue).join("  ")),
  ];
}

function histogram(values, min, max) {
  if (!values.length) return null;
  const counts = new Array(HISTOGRAM_BINS).fill(0);
  const span = max - min || 1;
  for (const v of values) counts[Math.min(HISTOGRAM_BINS - 1, Math.floor(((v - min) / span) * HISTOGRAM_BINS))]++;
  const top = Math.max(...counts);
  const width = 320;
  const height = 80;
  const bar = width / HISTOGRAM_BINS;
  const chart = svg("svg", { class: "histogram", viewBox: `0 0 ${width} ${height + 14}`, width, height: height + 14, role: "img", "aria-label": "histogram" });
  counts.forEach((n, i) => {
    const h = top ? (n / top) * height : 0;
    const rect = svg("rect", { x: (i * bar + 0.5).toFixed(1), y: (height - h).toFixed(1), width: (bar - 1).toFixed(1), height: h.toFixed(1) });
    const title = svg("title");
    title.textContent = `${formatValue(min + (i * span) / HISTOGRAM_BINS)} … ${formatValue(min + ((i + 1) * span) / HISTOGRAM_BINS)}: ${n}`;
    rect.append(title);
    chart.append(rect);
  });
  for (const [x, anchor, label] of [[0, "start", min], [width, "end", max]]) {
    const text = svg("text", { x, y: height + 12, "text-anchor": anchor });
    text.textContent = formatValue(label);
    chart.append(text);
  }
  return chart;
}

// -- a refused model

// `file`: the model File this browser sent (the offset is in it), or null (a data-root path)
function showProblem(p, file) {
  const button = $("#tabs [data-tab=problem]");
  button.hidden = false;
  fill($("#tab-problem"), 
    el("h2", {}, p.title || "Refused"),
    el("dl", { class: "facts problem" },
      el("dt", {}, "kind"), el("dd", { id: "problem-kind" }, p.kind || "–"),
      el("dt", {}, "status"), el("dd", {}, String(p.status)),
      el("dt", {}, "message"), el("dd", { id: "problem-detail" }, p.detail || ""),
      el("dt", {}, "offset"), el("dd", { id: "problem-offset" }, p.offset === null || p.offset === undefined ? "–" : String(p.offset)),
      el("dt", {}, "field path"), el("dd", { id: "problem-field-path" }, el("code", {}, p.field_path || "–")),
      el("dt", {}, "file"), el("dd", {}, p.input || "–"),
      p.limit ? [el("dt", {}, "limit"), el("dd", {}, p.limit)] : null,
    ),
    el("div", { id: "hex" }),
  );
  for (const panel of document.querySelectorAll(".tab")) panel.hidden = panel.id !== "tab-problem";
  for (const b of document.querySelectorAll("#tabs button")) b.setAttribute("aria-selected", String(b === button));
  if (typeof p.offset === "number") {
    if (file) hexView(file, p.offset).catch(fail);
    else fill($("#hex"), el("p", { class: "hint" }, "The hex view reads the file in this browser: it is shown for uploads, not for files under the data root."));
  }
}

// a local file's name as shown: control characters escaped (a tab as \x09), so none is invisible
const printableName = (name) => name.replace(/[\u0000-\u001f\u007f-\u009f]/g, (c) => "\\x" + c.charCodeAt(0).toString(16).padStart(2, "0"));

async function hexView(file, offset) {
  const row = Math.floor(offset / 16);
  const start = Math.max(0, (row - HEX_ROWS_AROUND) * 16);
  const end = Math.min(file.size, (row + HEX_ROWS_AROUND + 1) * 16);
  const data = new Uint8Array(await file.slice(start, end).arrayBuffer());
  const lines = [];
  for (let at = start; at < end; at += 16) {
    const cells = [];
    const text = [];
    for (let i = 0; i < 16; i++) {
      const position = at + i;
      if (position >= end) {
        cells.push(el("span", { class: "byte pad" }, "  "));
        continue;
      }
      const b = data[position - start];
      const hit = position === offset;
      cells.push(el("span", { class: hit ? "byte hit" : "byte", title: `offset ${position}`, dataset: hit ? { offset: String(position) } : {} }, b.toString(16).padStart(2, "0")));
      text.push(el("span", { class: hit ? "hit" : null }, b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : "."));
    }
    lines.push(el("div", { class: "hexline" }, el("span", { class: "address" }, String(at).padStart(10, " ")), " ", cells, "  ", el("span", { class: "ascii" }, text)));
  }
  const note = offset >= file.size ? `The offset is the end of the file (${number(file.size)} bytes): the data stops there.` : `Byte ${number(offset)} is highlighted; addresses are decimal.`;
  const name = printableName(file.name);
  const shown = name.length > HEX_NAME_CHARS ? name.slice(0, HEX_NAME_CHARS - 1) + "…" : name;
  const heading = el("h3", { id: "hex-file", title: name }, `${shown}, bytes ${number(start)}–${number(Math.max(start, end - 1))}`);
  fill($("#hex"), heading, el("p", { class: "hint" }, note), el("pre", { class: "hexdump" }, lines));
}

// -- wiring

function install() {
  const token = $("#token");
  token.value = state.token;
  token.addEventListener("change", () => {
    setToken(token.value.trim());
    listModels(true).catch(fail);
  });
  for (const button of document.querySelectorAll("#tabs button")) button.addEventListener("click", () => showTab(button.dataset.tab));

  const takeInput = (input) => {
    pickFiles([...input.files].map((file) => ({ file, path: file.webkitRelativePath || file.name })));
    input.value = "";
  };
  $("#files").addEventListener("change", (e) => takeInput(e.target));
  $("#folder").addEventListener("change", (e) => takeInput(e.target));
  const drop = $("#drop");
  drop.addEventListener("dragover", (e) => (e.preventDefault(), drop.classList.add("over")));
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", async (event) => {
    event.preventDefault();
    drop.classList.remove("over");
    const entries = (await entriesOfDrop(event.dataTransfer.items)) || [...event.dataTransfer.files].map((file) => ({ file, path: file.name }));
    pickFiles(entries);
  });
  $("#model-file").addEventListener("change", (e) => {
    state.upload.model = state.upload.files[Number(e.target.value)];
    for (const entry of state.upload.files) delete entry.location;
    renderPicked();
  });
  $("#upload").addEventListener("click", () => upload().catch(fail));
  $("#clear").addEventListener("click", () => ((state.upload = { files: [], model: null }), renderPicked()));
  $("#path-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const path = $("#path").value.trim();
    if (path) importPath(path).catch(fail);
  });
  $("#refresh").addEventListener("click", () => listModels(true).catch(fail));
  $("#more-models").addEventListener("click", () => listModels(false).catch(fail));
  $("#prefix-form").addEventListener("submit", (e) => (e.preventDefault(), listTensors($("#prefix").value).catch(fail)));
  $("#more-tensors").addEventListener("click", () => listTensors($("#prefix").value, true).catch(fail));

  $("#graph-select").addEventListener("change", (e) => drawGraph(e.target.value, 0).catch(fail));
  $("#page-prev").addEventListener("click", () => drawGraph(state.graphPath, state.graphPage - 1).catch(fail));
  $("#page-next").addEventListener("click", () => drawGraph(state.graphPath, state.graphPage + 1).catch(fail));
  $("#zoom-fit").addEventListener("click", fit);
  $("#zoom-in").addEventListener("click", () => zoom(1.25));
  $("#zoom-out").addEventListener("click", () => zoom(0.8));
  installPanZoom();
  installSearch();
  showTab("summary");

  listModels(true).catch(fail);
  const match = /^#model=([0-9a-f]{64})$/.exec(location.hash);
  if (match) openModel(match[1]).catch(fail);
}

install();
