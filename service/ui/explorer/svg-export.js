// SVG export: the drawing shown (a graph, or the page of it drawn) saved as a
// standalone .svg file: the drawing's edges and boxes at scale 1 (not the view's
// pan and zoom) with the arrow marker, a viewBox of the layout's size plus a
// margin, and explorer.css's rules for the drawing (those on "#canvas …", the
// custom properties they use resolved) in a <style>, so the file looks like
// the page on its own. No script. Built as DOM and written by XMLSerializer,
// which escapes every name; saved through a Blob URL and an <a download>.

import { $, el, svg, status } from "./dom.js";
import { state } from "./state.js";
import { wholeDrawing } from "./graph-view.js";

const MARGIN = 20; // around the layout, in the drawing's units (pixels at scale 1)
const BACKGROUND = "#fbfcfd"; // the canvas's
const SCOPE = "svg.onnx-graph"; // the file's root: "#canvas" in the page's rules

export function exportSvg() {
  const layout = state.layout;
  if (!layout || $("#canvas").dataset.drawn !== "true") {
    status("nothing to export yet: the graph is not drawn", "info");
    return;
  }
  const name = fileName(layout);
  const text = '<?xml version="1.0" encoding="UTF-8"?>\n' + new XMLSerializer().serializeToString(standalone(layout)) + "\n";
  save(new Blob([text], { type: "image/svg+xml" }), name);
  status(`saved ${name}: the drawing at scale 1, ${Math.round(layout.width)} × ${Math.round(layout.height)}`, "ok");
}

// the <svg> element of the file
function standalone(layout) {
  const width = Math.ceil(layout.width) + 2 * MARGIN;
  const height = Math.ceil(layout.height) + 2 * MARGIN;
  const root = svg("svg", { class: "onnx-graph", width, height, viewBox: `${-MARGIN} ${-MARGIN} ${width} ${height}` });
  const title = svg("title");
  title.textContent = drawingTitle(layout);
  const style = svg("style");
  style.textContent = drawingRules();
  const scene = svg("g", { class: "scene" });
  scene.append(...wholeDrawing(layout)); // all of it: the page holds only what is near its view (culling.js)
  for (const selected of scene.querySelectorAll(".selected")) selected.classList.remove("selected");
  root.append(title, style, $("#canvas defs").cloneNode(true),
    svg("rect", { x: -MARGIN, y: -MARGIN, width, height, fill: BACKGROUND }), scene);
  return root;
}

// the page's rules for the drawing: "#canvas …" selectors (not :hover, not the zoomed-out .far), values with var() resolved
function drawingRules() {
  const page = getComputedStyle(document.documentElement);
  const resolve = (text) => text.replace(/var\((--[\w-]+)\)/g, (_, name) => page.getPropertyValue(name).trim());
  const rules = [];
  for (const sheet of document.styleSheets) {
    for (const rule of sheet.cssRules) {
      if (!(rule instanceof CSSStyleRule)) continue;
      const selectors = rule.selectorText.split(",").map((s) => s.trim())
        .filter((s) => s.startsWith("#canvas ") && !s.includes(":hover"))
        .map((s) => SCOPE + s.slice("#canvas".length));
      if (selectors.length) rules.push(`${selectors.join(", ")} { ${resolve(rule.style.cssText)} }`);
    }
  }
  return "\n" + rules.join("\n") + "\n";
}

function graphTitle(layout) {
  const graph = state.graph && state.graph.graphs.find((g) => g.path === layout.path);
  return graph && state.graph.root !== layout.path ? graph.title : null;
}

function drawingTitle(layout) {
  const parts = [state.model ? state.model.input : "graph", graphTitle(layout), layout.pages > 1 ? `page ${layout.page + 1} of ${layout.pages}` : null];
  return parts.filter(Boolean).join(" — ");
}

// the model's file name without .onnx, the subgraph's title and the page: letters, digits, "._-" only
function fileName(layout) {
  const model = state.model ? state.model.input.split("/").pop().replace(/\.onnx$/i, "") : "graph";
  const parts = [model, graphTitle(layout), layout.pages > 1 ? `page${layout.page + 1}` : null].filter(Boolean);
  const stem = parts.join("-").replace(/[^A-Za-z0-9._-]+/g, "_").replace(/^[._]+/, "").slice(0, 120);
  return (stem || "graph") + ".svg";
}

function save(blob, name) {
  const url = URL.createObjectURL(blob);
  const link = el("a", { href: url, download: name, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60000);
}
