// A node's details, the panel beside the graph: its op, attributes (subgraphs
// and tensors as links), inputs, outputs, consumers and diagnostics, with
// links to other nodes and to tensors. Names from the model as `visible`
// shows them.

import { $, el, fill, number, dimsText, visible } from "./dom.js";
import { fail } from "./api.js";
import { drawGraph, goToNode } from "./graph-view.js";
import { openTensorRef } from "./tensors.js";
import { diagnosticsOf, diagnosticsPart } from "./diagnostics.js";

function nodeLink(ref) {
  const label = visible(`${ref.op_type} ${ref.name || "#" + ref.position}`);
  return el("a", { href: "#", class: "node-link", onclick: (e) => (e.preventDefault(), goToNode(ref.path, ref.position, ref.page).catch(fail)) }, label);
}

function tensorLink(ref, label) {
  return el("a", { href: "#", class: "tensor-link", onclick: (e) => (e.preventDefault(), openTensorRef(ref).catch(fail)) }, visible(label || ref.name) || "(unnamed)");
}

function valueRow(v, asOutput) {
  if (v.absent) return el("li", { class: "hint" }, asOutput ? "(absent: an optional output not asked for)" : "(absent: an optional input left out)");
  if (v.missing) return el("li", {}, el("code", {}, visible(v.name)));
  return el("li", {},
    el("code", {}, visible(v.name)), " ", v.type !== "?" ? el("span", { class: "type" }, v.type) : null,
    v.inferred ? el("span", { class: "badge", title: "the model does not declare this type: the shape stage inferred it" }, "inferred") : null,
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
      `open subgraph ${visible(g.name)} (${number(g.nodes)} nodes)`));
  } else if (a.ref) {
    value = `refers to the function's attribute ${visible(a.ref)}`;
  } else if (a.type === "TENSOR" && a.json) {
    value = tensorLink(a.json, `${a.json.name || "(unnamed)"} ${a.json.elem_type}${dimsText(a.json.dims)}`);
  } else if (a.type === "TENSORS" && Array.isArray(a.json)) {
    value = a.json.map((t) => tensorLink(t, `${t.name || "(unnamed)"} ${t.elem_type}${dimsText(t.dims)}`));
  } else {
    const text = JSON.stringify(a.json);
    value = el("code", {}, visible(text.length > 400 ? text.slice(0, 400) + "…" : text));
  }
  // a plural tensor attribute's document lists its first items only: say how many more there are
  const more = a.omitted ? el("div", { class: "hint omitted" }, `and ${number(a.omitted)} more ${a.type === "SPARSE_TENSORS" ? "sparse tensors" : "tensors"}: see the tensors list`) : null;
  return el("tr", {}, el("th", {}, visible(a.name)), el("td", { class: "hint" }, a.type), el("td", {}, value, more));
}

// the operator set a node's op is read from; a node of a function's body is as the function imports it
function opsetText(d) {
  if (d.opset_version === null || d.opset_version === undefined) return d.domain ? `${visible(d.domain)}, in a function's body` : "in a function's body";
  return d.domain ? `${visible(d.domain)} v${d.opset_version}` : `opset ${d.opset_version}`;
}

export function renderDetails(d) {
  const consumers = [];
  for (const out of d.outputs) {
    if (!out.consumers) continue;
    for (const c of out.consumers) consumers.push(el("li", {}, nodeLink(c), el("span", { class: "hint" }, " reads "), el("code", {}, visible(out.name))));
    if (out.consumerCount > out.consumers.length) consumers.push(el("li", { class: "hint" }, `… ${number(out.consumerCount - out.consumers.length)} more`));
  }
  const panel = $("#details");
  panel.hidden = false;
  fill(panel, 
    el("button", { type: "button", class: "quiet close", title: "close", onclick: () => (panel.hidden = true) }, "×"),
    el("h3", {}, visible(d.op_type), " ", el("span", { class: "hint" }, opsetText(d))),
    el("p", {}, el("strong", {}, visible(d.name) || "(unnamed)"), el("span", { class: "hint" }, ` node ${d.position} (file index ${d.index})`)),
    diagnosticsPart(diagnosticsOf(d.path, d.position)),
    el("h4", {}, "Attributes"),
    d.attributes.length ? el("table", { class: "attributes" }, el("tbody", {}, d.attributes.map(attributeRow))) : el("p", { class: "hint" }, "none"),
    el("h4", {}, "Inputs"), el("ol", { class: "values" }, d.inputs.map((v) => valueRow(v, false))),
    el("h4", {}, "Outputs"), el("ol", { class: "values" }, d.outputs.map((v) => valueRow(v, true))),
    el("h4", {}, "Consumers"), consumers.length ? el("ul", { class: "values" }, consumers) : el("p", { class: "hint" }, "none in this graph"),
  );
}
