// The explorer's page script, its entry module (loaded by index.html with
// type="module"): wires the page's controls to the modules under explorer/,
// then lists the store's models and opens the one the URL names (#model=...).
// The modules: dom.js (helpers), api.js (requests, the API key, problems),
// state.js, tabs.js, models.js (opening models) with external-locations.js
// (the external data files a picked model names), checks.js (the check stages:
// chosen at import, the verdict and each stage's status), summary.js with
// smoke-bindings.js (the smoke run's bindings),
// diagnostics.js (the findings of every stage),
// graph-view.js (drawing only what is near the view, culling.js) with
// graph-worker-client.js and the worker graph-worker.js, which lays graphs out
// with graph-layout.js (weights on their consumers, folded-weights.js; nodes
// drawn open), reads function bodies as graphs (function-graphs.js) and keeps
// layouts in the browser's storage (layout-store.js),
// minimap.js (the overview of a large drawing, moving the view),
// svg-export.js (the drawing saved as a standalone .svg file),
// node-details.js, search.js, tensors.js with tensor-values.js, and
// refused-model.js. Plain DOM, no framework, no build step; every request goes
// to this service's own API.

import { $, status } from "./explorer/dom.js";
import { currentToken, fail, setToken } from "./explorer/api.js";
import { state } from "./explorer/state.js";
import { showTab } from "./explorer/tabs.js";
import { entriesOfDrop, importPath, importWhenReady, listModels, openModel, pickFiles, renderPicked, upload } from "./explorer/models.js";
import { listTensors } from "./explorer/tensors.js";
import { drawGraph, fit, installPanZoom, zoom } from "./explorer/graph-view.js";
import { installSearch } from "./explorer/search.js";
import { installChecksChoice } from "./explorer/checks.js";
import { installMinimap } from "./explorer/minimap.js";
import { exportSvg } from "./explorer/svg-export.js";

function install() {
  const token = $("#token");
  token.value = currentToken();
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
    for (const entry of state.upload.files) {
      delete entry.location;
      delete entry.edited;
    }
    renderPicked();
    importWhenReady().catch(fail);
  });
  $("#upload").addEventListener("click", () => upload().catch(fail));
  $("#clear").addEventListener("click", () => ((state.upload = { files: [], model: null }), renderPicked(), status("", "info")));
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
  $("#weights-as-nodes").addEventListener("change", (e) => {
    state.weightsAsNodes = e.target.checked;
    if (state.layout) drawGraph(state.graphPath, state.graphPage).catch(fail);
  });
  $("#edge-shapes").addEventListener("change", (e) => $("#canvas").classList.toggle("no-edge-labels", !e.target.checked));
  $("#zoom-fit").addEventListener("click", fit);
  $("#zoom-in").addEventListener("click", () => zoom(1.25));
  $("#zoom-out").addEventListener("click", () => zoom(0.8));
  $("#export-svg").addEventListener("click", exportSvg);
  installPanZoom();
  installMinimap();
  installSearch();
  installChecksChoice();
  showTab("summary");

  listModels(true).catch(fail);
  const match = /^#model=([0-9a-f]{64})$/.exec(location.hash);
  if (match) openModel(match[1]).catch(fail);
}

install();
