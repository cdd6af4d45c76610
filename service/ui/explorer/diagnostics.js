// The findings of every check stage (schema, security, shape, runtime,
// smoke): read (a page at a time, up to MAX_PER_STAGE of each stage), listed
// in the summary a stage at a time, located on their nodes by the graph
// worker, marked on the nodes drawn and in a node's details; a listed
// finding's link goes to its node. Findings placed at a graph input or
// output, or at the model, are listed without a link. Their text comes from
// the model: shown with `visible`, as text, never as HTML.

import { $, el, fill, svg, number, status, visible } from "./dom.js";
import { apiJson, fail } from "./api.js";
import { state } from "./state.js";
import { ask } from "./graph-worker-client.js";
import { openGraph, goToNode } from "./graph-view.js";
import { showTab } from "./tabs.js";
import { stagesOf } from "./checks.js";

const DIAGNOSTICS_PAGE = 250;
const MAX_PER_STAGE = 1000; // listed and marked: the first ones of each stage, in file order (as many as a stage keeps)

const stageOf = (d) => d.stage || "schema"; // a finding stored before the stages is the operator check's

// Every finding, up to MAX_PER_STAGE of each stage (those the summary lists
// when it lists them all, else read a page at a time, `?stage=` by stage);
// then listed here and, once the graph is loaded, placed on their nodes.
export async function loadDiagnostics(summary, generation) {
  const check = state.diagnostics;
  if (check.errors + check.warnings > check.items.length) {
    const staged = Boolean(summary.checks && Object.keys(summary.checks).length);
    const items = [];
    for (const [stage, counted] of Object.entries(stagesOf(summary))) {
      const listed = staged ? check.items.filter((d) => stageOf(d) === stage) : check.items;
      if (listed.length >= counted.errors + counted.warnings) {
        items.push(...listed);
        continue;
      }
      const query = `limit=${DIAGNOSTICS_PAGE}` + (staged ? "&stage=" + encodeURIComponent(stage) : "");
      const read = await readFindings(`${summary.links.self}/diagnostics?${query}`, generation);
      if (generation !== state.generation) return;
      items.push(...read);
    }
    check.items = items;
  }
  check.complete = true;
  renderDiagnostics();
  await locateDiagnostics();
}

async function readFindings(url, generation) {
  const items = [];
  while (url && items.length < MAX_PER_STAGE) {
    const page = await apiJson(url);
    if (generation !== state.generation) return [];
    items.push(...page.items);
    url = page.links.next;
  }
  return items.slice(0, MAX_PER_STAGE);
}

function renderDiagnostics() {
  const check = state.diagnostics;
  if (!check.errors && !check.warnings) return fill($("#diagnostics"), el("p", { class: "hint" }, "no finding in any stage run"));
  const stages = stagesOf(state.model);
  const byStage = new Map();
  check.items.forEach((d, i) => {
    if (!byStage.has(stageOf(d))) byStage.set(stageOf(d), []);
    byStage.get(stageOf(d)).push(row(d, i));
  });
  fill($("#diagnostics"), [...byStage].map(([stage, rows]) => {
    const counted = stages[stage] || { errors: 0, warnings: 0 };
    const total = counted.errors + counted.warnings;
    return el("section", { class: "stage-findings", dataset: { stage } },
      el("h4", {}, `${visible(stage)}: ${number(counted.errors)} errors, ${number(counted.warnings)} warnings`,
        total > rows.length ? el("span", { class: "hint" }, ` (the first ${number(rows.length)}, in file order)`) : null),
      el("table", { class: "grid diagnostics" },
        el("thead", {}, el("tr", {}, ["severity", "code", "place", "message", "field path", "offset"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows)));
  }));
}

function row(d, i) {
  return el("tr", { class: "diagnostic " + d.severity, dataset: { stage: stageOf(d) } },
    el("td", {}, el("span", { class: "severity " + d.severity }, d.severity)),
    el("td", {}, el("code", {}, visible(d.code))),
    el("td", {}, place(d, i)),
    el("td", {}, visible(d.message)),
    el("td", {}, el("code", {}, visible(d.field_path))),
    el("td", { class: "number" }, d.offset === null || d.offset === undefined ? "–" : number(d.offset)),
  );
}

// a node (a link to it), a graph input or output (by name, when the summary lists it), or the model
function place(d, i) {
  if (d.op_type || d.node_name) return diagnosticLink(d, i);
  const value = /^ModelProto\.graph\.(input|output)\[(\d+)\]/.exec(d.field_path || "");
  if (!value) return el("span", { class: "hint" }, "(the model)");
  const listed = (state.model.graph[value[1] + "s"] || [])[Number(value[2])];
  return el("span", { class: "graph-value" }, `graph ${value[1]} `, el("code", {}, listed ? visible(listed.name) : "#" + value[2]));
}

function diagnosticLink(d, i) {
  const label = visible(`${d.op_type || "?"} ${d.node_name || ""}`.trim());
  // nodes of function bodies are not drawn: only a node of the model's graphs is a link
  if (!/^ModelProto\.graph\.node\[/.test(d.field_path || "")) return el("span", {}, label, el("span", { class: "hint" }, " (in a function)"));
  return el("a", { href: "#", class: "diagnostic-link", dataset: { diagnostic: String(i) }, onclick: (e) => (e.preventDefault(), jumpToDiagnostic(d).catch(fail)) }, label);
}

// Find each diagnostic's node (the worker matches field paths to graph paths
// and file indexes) and mark the nodes drawn.
export async function locateDiagnostics() {
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
  for (const group of document.querySelectorAll("#scene .item.node")) markNode(group, group.dataset.path || state.graphPath, Number(group.dataset.position));
}

export function diagnosticsOf(path, position) {
  return (state.diagnostics && state.diagnostics.byNode.get(`${path}|${position}`)) || [];
}

// a drawn node's marks: its colour (has-error, has-warning) and, not to rely
// on colour alone, a mark in its corner (✗ for errors, ! for warnings, and
// how many findings) with a tooltip naming their stages and codes
export function markNode(group, path, position) {
  const found = diagnosticsOf(path, position);
  const hasError = found.some((d) => d.severity === "error");
  group.classList.toggle("has-error", hasError);
  group.classList.toggle("has-warning", !hasError && found.length > 0);
  for (const old of group.querySelectorAll(".finding-mark, .findings")) old.remove();
  if (!found.length) return;
  const rect = group.querySelector("rect");
  const mark = svg("text", { class: "finding-mark", x: rect ? Number(rect.getAttribute("width")) - 3 : 0, y: -3 });
  mark.textContent = `${hasError ? "✗" : "!"} ${found.length}`;
  const title = svg("title", { class: "findings" });
  title.textContent = found.map((d) => `${stageOf(d)} ${d.severity} ${visible(d.code)}`).join("\n");
  group.append(mark, title);
}

async function jumpToDiagnostic(d) {
  showTab("graph");
  await openGraph();
  if (!d.at) await locateDiagnostics();
  if (!d.at) return status(`no node of the graphs is at ${d.field_path}`, "error");
  await goToNode(d.at.path, d.at.position, d.at.page);
}

export function diagnosticsPart(found) {
  if (!found.length) return null;
  return [
    el("h4", {}, "Findings"),
    el("ul", { class: "values diagnostics" }, found.map((x) => el("li", { class: "diagnostic " + x.severity, dataset: { stage: stageOf(x) } },
      el("span", { class: "severity " + x.severity }, x.severity), el("span", { class: "badge stage" }, visible(stageOf(x))), " ",
      el("code", {}, visible(x.code)), " ", visible(x.message),
      el("div", { class: "hint" }, el("code", {}, visible(x.field_path)), x.offset === null || x.offset === undefined ? "" : `, offset ${number(x.offset)}`)))),
  ];
}
