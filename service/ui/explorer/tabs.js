// The view's tabs (summary, graph, tensors, diff; the problem tab is opened by
// refused-model.js): showing one starts what it needs, the graph's loading and
// first drawing, the tensor list's first page, or the diff's choice of models.

import { $ } from "./dom.js";
import { fail } from "./api.js";
import { state } from "./state.js";
import { openGraph } from "./graph-view.js";
import { listTensors } from "./tensors.js";
import { renderDiffTab } from "./diff-view.js";

export function showTab(name) {
  for (const button of document.querySelectorAll("#tabs button")) button.setAttribute("aria-selected", String(button.dataset.tab === name));
  for (const panel of document.querySelectorAll(".tab")) panel.hidden = panel.id !== "tab-" + name;
  if (name === "graph" && state.model) openGraph().catch(fail);
  if (name === "diff" && state.model) renderDiffTab();
  if (name === "tensors" && state.model && !$("#tensor-list tbody").children.length) listTensors("").catch(fail);
}
