// The Diff tab: the open model compared with another the caller may read
// (GET /models/{a}/diff/{b}, every page joined): the open model is b (the
// new version), the one picked is a (the one before). It shows the
// comparison's head (opsets, inputs and outputs, op-type counts) and a table
// of the nodes and initializers added, removed and changed; a node's row
// goes to it in the graph. On the open model's graph the nodes added and
// changed are marked (`markDiff`, with a corner sign: + added, ~ changed),
// until another model opens or the comparison is cleared; removed ones are
// in model a, listed in the table.

import { $, el, fill, number, status, svg, visible } from "./dom.js";
import { apiJson, fail } from "./api.js";
import { state } from "./state.js";
import { drawGraph, goToNode, openGraph } from "./graph-view.js";
import { showTab } from "./tabs.js";
import { PAGE_SIZE } from "./graph-layout.js";

const MAX_PAGES = 100; // 100,000 changes at 1,000 a page: the table is bounded, its head says how many

// the models the open one can be compared with: those of the model list, by name, label and id prefix
function choices() {
  const open = state.model ? state.model.id : "";
  return [...document.querySelectorAll("#models li[data-id]")]
    .filter((li) => li.dataset.id !== open)
    .map((li) => {
      const label = li.querySelector(".model-label");
      return el("option", { value: li.dataset.id }, `${li.querySelector("a").textContent}${label ? ` (${label.textContent})` : ""} ${li.dataset.id.slice(0, 8)}`);
    });
}

export function renderDiffTab() {
  const options = choices();
  fill($("#tab-diff"),
    el("form", { id: "diff-form", class: "toolbar", onsubmit: (e) => (e.preventDefault(), compare($("#diff-with").value).catch(fail)) },
      el("label", { for: "diff-with" }, "Compare with the model before: "),
      el("select", { id: "diff-with" }, options.length ? options : el("option", { value: "" }, "(import another model first)")),
      el("button", { type: "submit", disabled: !options.length }, "Compare"),
      state.diff && state.diff.b === state.model.id ? el("button", { type: "button", class: "quiet", onclick: clearDiff }, "Clear marks") : null),
    el("div", { id: "diff-result" }, state.diff && state.diff.b === state.model.id ? resultPart(state.diff) : null),
  );
}

async function compare(a) {
  if (!a || !state.model) return;
  const b = state.model.id;
  const generation = state.generation;
  status("comparing…");
  const url = `/models/${encodeURIComponent(a)}/diff/${encodeURIComponent(b)}?limit=1000`;
  let page = await apiJson(url);
  const head = page;
  const changes = [...page.changes];
  for (let pages = 1; page.next_cursor && pages < MAX_PAGES; pages++) {
    page = await apiJson(`${url}&cursor=${encodeURIComponent(page.next_cursor)}`);
    changes.push(...page.changes);
  }
  if (generation !== state.generation) return; // another model is open by now
  const marks = new Map(); // b's position -> "added" | "changed"
  for (const c of changes) if (c.kind === "node" && c.change !== "removed") marks.set(c.b_position, c.change);
  state.diff = { a, b, head, changes, marks, complete: !page.next_cursor };
  renderDiffTab();
  if (state.layout) await drawGraph(state.graphPath, state.graphPage, null, true);
  status(head.identical ? "the two models are identical" : `${number(changes.length)} changes`, "info");
}

function clearDiff() {
  state.diff = null;
  renderDiffTab();
  if (state.layout) drawGraph(state.graphPath, state.graphPage, null, true).catch(fail);
}

function table(head, rows, attributes = {}) {
  return el("table", Object.assign({ class: "grid" }, attributes), el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((cells) => (cells instanceof Element ? cells : el("tr", {}, cells.map((c) => el("td", {}, c)))))));
}

function typeCell(side) {
  if (!side) return "";
  const shape = Array.isArray(side.shape) ? `[${side.shape.map((d) => (d === null ? "?" : d)).join(",")}]` : "";
  return `${side.elem_type || side.kind || ""}${shape}`;
}

async function showNode(position) {
  showTab("graph");
  await openGraph();
  if (state.graph) await goToNode(state.graph.root, position, Math.floor(position / PAGE_SIZE));
}

// a node's name; one of the open model (added, changed) goes to it in the graph
function nodeLink(change) {
  if (change.kind !== "node" || change.change === "removed") return visible(change.name || "(unnamed)");
  const position = change.b_position;
  return el("a", { href: "#", class: "node-link", onclick: (e) => (e.preventDefault(), showNode(position).catch(fail)) },
    visible(change.name || `(unnamed) #${position}`));
}

function resultPart(diff) {
  const { head, changes } = diff;
  const counts = head.counts;
  return [
    el("p", { id: "diff-head" }, head.identical ? "Identical: no opset, input, output, node or initializer differs." :
      `Nodes: ${counts.node.added} added, ${counts.node.removed} removed, ${counts.node.changed} changed. ` +
      `Initializers: ${counts.initializer.added} added, ${counts.initializer.removed} removed, ${counts.initializer.changed} changed.` +
      (diff.complete ? "" : " (the table holds the first pages)")),
    head.opsets.length ? [el("h3", {}, "Opsets"), table(["domain", "change", "before", "now"], head.opsets.map((o) => [visible(o.domain || "ai.onnx"), o.change, String(o.a ?? ""), String(o.b ?? "")]))] : null,
    ...["inputs", "outputs"].map((side) => head[side].length
      ? [el("h3", {}, side === "inputs" ? "Inputs" : "Outputs"), table(["name", "change", "before", "now"], head[side].map((v) => [visible(v.name), v.change, typeCell(v.a), typeCell(v.b)]))]
      : null),
    head.op_types.length ? [el("h3", {}, "Op types"), table(["op type", "before", "now"], head.op_types.map((o) => [visible(o.op_type), number(o.a), number(o.b)]))] : null,
    changes.length ? [el("h3", {}, "Changes"), table(["kind", "change", "name", "op type / type", "what differs"],
      changes.map((c) => el("tr", { class: `diff-${c.change}`, dataset: { kind: c.kind } },
        el("td", {}, c.kind), el("td", {}, c.change), el("td", {}, nodeLink(c)),
        el("td", {}, c.kind === "node" ? visible(c.op_type || "") : typeCell(c.b || c.a)),
        el("td", {}, (c.fields || []).join(", ")))), { id: "diff-changes" })] : null,
  ].flat(Infinity); // el() flattens one level only
}

// a drawn node of the open model's main graph, marked when the comparison added or changed it
export function markDiff(group, path, position) {
  const diff = state.diff;
  group.classList.remove("diff-added", "diff-changed");
  for (const old of group.querySelectorAll(".diff-mark")) old.remove();
  if (!diff || !state.model || diff.b !== state.model.id || !state.graph || path !== state.graph.root) return;
  const change = diff.marks.get(position);
  if (!change) return;
  group.classList.add(`diff-${change}`);
  const sign = svg("text", { class: "diff-mark", x: 3, y: -3 }); // not by colour alone
  sign.textContent = change === "added" ? "+ added" : "~ changed";
  group.append(sign);
}
