// The graph tab's search: node and tensor names containing the query, found
// by the graph worker (typing, debounced), listed under the field; a result
// goes to its node and, for an initializer, opens the tensor.

import { $, el, fill, number, visible } from "./dom.js";
import { fail } from "./api.js";
import { state } from "./state.js";
import { ask } from "./graph-worker-client.js";
import { goToNode } from "./graph-view.js";
import { openTensorRef } from "./tensors.js";

let searchTimer = null;
export function installSearch() {
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
    } }, el("span", { class: "badge" }, r.kind), " ", visible(r.text), " ", el("span", { class: "hint" }, visible(r.detail))))),
    total > results.length ? el("li", { class: "hint" }, `${number(total - results.length)} more: refine the search`) : null,
    total === 0 ? el("li", { class: "hint" }, "no node or tensor name contains this") : null,
  );
  list.hidden = false;
}
