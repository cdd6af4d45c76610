// The summary tab: the open model's name and label and its facts, its
// checks' verdict and stages (checks.js), the smoke run's bindings
// (smoke-bindings.js) and their findings (diagnostics.js fills #diagnostics), inputs,
// outputs, op types, functions and metadata (from its summary; names and
// metadata as `visible` shows them), and the parameter count by
// element type (read from the tensor catalogue a page at a time).

import { $, el, fill, number, bytes, elementCount, visible } from "./dom.js";
import { apiJson } from "./api.js";
import { state } from "./state.js";
import { typeText } from "./type-text.js";
import { checksPart } from "./checks.js";
import { bindingsPart } from "./smoke-bindings.js";

function table(head, rows, className = "grid") {
  return el("table", { class: className }, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))));
}

export function renderSummary(s) {
  const g = s.graph;
  const opTypes = Object.entries(g.op_types).sort((a, b) => b[1] - a[1]);
  const cut = (list, shown) => (s.truncated.includes(list) ? ` (the first ${number(shown)} of ${number(s.counts[list])})` : "");
  const panel = $("#tab-summary");
  fill(panel, 
    el("h2", {}, visible(s.input)),
    el("dl", { class: "facts" },
      s.label ? [el("dt", {}, "label"), el("dd", { id: "model-label" }, visible(s.label))] : null,
      el("dt", {}, "id"), el("dd", {}, el("code", {}, s.id)),
      el("dt", {}, "file"), el("dd", {}, `${bytes(s.model_file.size)}, sha256 `, el("code", {}, s.model_file.sha256.slice(0, 16) + "…")),
      el("dt", {}, "producer"), el("dd", {}, visible(`${s.producer.name || "(none)"} ${s.producer.version || ""}`)),
      el("dt", {}, "IR version"), el("dd", {}, String(s.ir_version)),
      el("dt", {}, "opsets"), el("dd", {}, s.opsets.map((o) => `${visible(o.domain) || "ai.onnx"} ${o.version}`).join(", ") || "(none)"),
      el("dt", {}, "graph"), el("dd", {}, `${visible(g.name) || "(unnamed)"}: ${number(g.node_count)} nodes, ${number(g.subgraph_count)} subgraphs, ${number(s.counts.tensors)} tensors` +
        (s.tensors_not_catalogued ? ` (and ${number(s.tensors_not_catalogued)} more in large tensor attributes, not catalogued)` : "")),
      s.domain ? [el("dt", {}, "domain"), el("dd", {}, visible(s.domain))] : null,
    ),
    el("h3", {}, "Checks"),
    checksPart(s),
    bindingsPart(s),
    el("p", { id: "diagnostic-counts" }, "Findings of every stage: ",
      el("strong", { id: "diagnostic-errors", class: s.diagnostics && s.diagnostics.errors ? "bad" : null }, number(s.diagnostics ? s.diagnostics.errors : 0)), " errors, ",
      el("strong", { id: "diagnostic-warnings" }, number(s.diagnostics ? s.diagnostics.warnings : 0)), " warnings"),
    el("div", { id: "diagnostics" }, el("p", { class: "hint" }, "reading…")),
    el("h3", {}, "Inputs" + cut("inputs", g.inputs.length)),
    table(["name", "type"], g.inputs.map((v) => [visible(v.name), typeText(v.type)])),
    el("h3", {}, "Outputs" + cut("outputs", g.outputs.length)),
    table(["name", "type"], g.outputs.map((v) => [visible(v.name), typeText(v.type)])),
    el("h3", {}, "Op types" + cut("op_types", opTypes.length)),
    table(["op type", "nodes"], opTypes.map(([op, n]) => [visible(op), number(n)]), "grid compact"),
    el("h3", {}, "Parameters"),
    el("div", { id: "parameters" }, el("p", { class: "hint" }, "counting…")),
    s.functions.length ? [el("h3", {}, "Functions"), table(["domain", "name", "nodes"], s.functions.map((f) => [visible(f.domain), visible(f.name), number(f.node_count)]))] : null,
    Object.keys(s.metadata_props).length ? [el("h3", {}, "Metadata"), table(["key", "value"], Object.entries(s.metadata_props).map(([k, v]) => [visible(k), visible(v)]))] : null,
  );
}

// Parameter count and bytes by element type: every initializer (and sparse
// initializer values) of the catalogue, read a page of 1000 at a time.
export async function countParameters(summary, generation) {
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
