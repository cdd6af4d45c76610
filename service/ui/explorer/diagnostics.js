// The operator check's diagnostics: read (a page at a time, up to
// MAX_DIAGNOSTICS), listed in the summary, located on their nodes by the
// graph worker, marked on the nodes drawn and in a node's details; a listed
// diagnostic's link goes to its node.

import { $, el, fill, number, status } from "./dom.js";
import { apiJson, fail } from "./api.js";
import { state } from "./state.js";
import { ask } from "./graph-worker-client.js";
import { openGraph, goToNode } from "./graph-view.js";
import { showTab } from "./tabs.js";

const DIAGNOSTICS_PAGE = 250;
const MAX_DIAGNOSTICS = 1000; // listed and marked: the first ones, in file order

// Every diagnostic, up to MAX_DIAGNOSTICS, a page at a time; then listed here
// and, once the graph is loaded, placed on their nodes.
export async function loadDiagnostics(summary, generation) {
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
  for (const group of document.querySelectorAll("#scene .item.node")) markNode(group, state.graphPath, Number(group.dataset.position));
}

export function diagnosticsOf(path, position) {
  return (state.diagnostics && state.diagnostics.byNode.get(`${path}|${position}`)) || [];
}

export function markNode(group, path, position) {
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

export function diagnosticsPart(found) {
  if (!found.length) return null;
  return [
    el("h4", {}, "Diagnostics"),
    el("ul", { class: "values diagnostics" }, found.map((x) => el("li", { class: "diagnostic " + x.severity },
      el("span", { class: "severity " + x.severity }, x.severity), " ", el("code", {}, x.code), " ", x.message,
      el("div", { class: "hint" }, el("code", {}, x.field_path), x.offset === null || x.offset === undefined ? "" : `, offset ${number(x.offset)}`)))),
  ];
}
