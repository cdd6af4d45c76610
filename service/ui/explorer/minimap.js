// The minimap: an overview, in a corner of the graph area, of a drawing too
// large for the canvas (more than about 1.5 canvases wide or tall at a
// readable scale; hidden otherwise). Each drawing's node boxes ("graph-drawn",
// from graph-view.js) are written once as the pixels of an image (5,000 boxes
// in a few milliseconds) put on a 2D canvas; a rectangle marks the part the
// view shows, following each move ("graph-moved"); a click or a drag in the
// minimap moves the view there (setTransform). Its dataset keeps what tests
// read: draw-ms, items, and view (the rectangle, in the minimap's pixels).

import { $ } from "./dom.js";
import { state } from "./state.js";
import { setTransform } from "./graph-view.js";

const READABLE = 0.8; // the scale a large drawing opens at (graph-view.js's placeView)
const SCREENS = 1.5; // shown when, at that scale, the drawing is more than this many canvases wide or tall
const MAX_WIDTH = 220; // the minimap's largest size, pixels
const MAX_HEIGHT = 360;
const MIN_SIDE = 48; // a very tall or wide drawing is stretched across, so the minimap is not a line
const FILLS = { node: "#7f98b1", input: "#6fa679", capture: "#6fa679", output: "#c0837b", stub: "#b3bbc3" }; // the boxes' strokes on the page
const VIEW = "#2f6fb0"; // --accent

let drawn = null; // {layout, sx, sy, boxes (an ImageData), scene (the scene's first child when drawn)}
let view = null; // the view's rectangle, minimap pixels
let painting = false;

const minimap = () => $("#minimap");

// the part of the canvas the drawing is seen in (beside the details panel), or the window's size while hidden
function visibleBox() {
  const box = $("#canvas").getBoundingClientRect();
  const details = $("#details");
  const width = box.width - (details.hidden ? 0 : details.getBoundingClientRect().width);
  return { width: width > 0 ? width : window.innerWidth, height: box.height > 0 ? box.height : window.innerHeight };
}

function needed(layout) {
  const box = visibleBox();
  return layout.items.length > 0 && (layout.width * READABLE > SCREENS * box.width || layout.height * READABLE > SCREENS * box.height);
}

// one scale per axis: the same unless the drawing is so tall (or wide) that it would be thinner than MIN_SIDE
function scales(layout) {
  const width = Math.max(1, layout.width);
  const height = Math.max(1, layout.height);
  const s = Math.min(MAX_WIDTH / width, MAX_HEIGHT / height);
  return { sx: Math.min(MAX_WIDTH / width, Math.max(s, MIN_SIDE / width)), sy: Math.min(MAX_HEIGHT / height, Math.max(s, MIN_SIDE / height)) };
}

// a colour as one pixel of an ImageData's Uint32Array (whatever the byte order)
function pixel(hex) {
  const bytes = new Uint8ClampedArray([1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)).concat(255));
  return new Uint32Array(bytes.buffer)[0];
}

// every box as whole pixels (at least one), written straight into the image: no path to rasterise
function paintBoxes(image, items, sx, sy) {
  const { width, height } = image;
  const pixels = new Uint32Array(image.data.buffer);
  const colours = new Map(Object.entries(FILLS).map(([kind, hex]) => [kind, pixel(hex)]));
  for (const item of items) {
    const colour = colours.get(item.kind);
    if (colour === undefined) continue;
    const x0 = Math.min(Math.floor(item.x * sx), width - 1);
    const y0 = Math.min(Math.floor(item.y * sy), height - 1);
    const x1 = Math.min(Math.max(Math.round((item.x + item.width) * sx), x0 + 1), width);
    const y1 = Math.min(Math.max(Math.round((item.y + item.height) * sy), y0 + 1), height);
    for (let y = Math.max(y0, 0); y < y1; y++) pixels.fill(colour, y * width + Math.max(x0, 0), y * width + x1);
  }
  return image;
}

function onDrawn(event) {
  const layout = event.detail;
  const started = performance.now();
  const { sx, sy } = scales(layout);
  const canvas = minimap();
  canvas.width = Math.max(1, Math.round(layout.width * sx));
  canvas.height = Math.max(1, Math.round(layout.height * sy));
  const boxes = paintBoxes(canvas.getContext("2d").createImageData(canvas.width, canvas.height), layout.items, sx, sy);
  drawn = { layout, sx, sy, boxes, scene: $("#scene").firstElementChild };
  follow(state.transform);
  paint();
  canvas.dataset.drawMs = (performance.now() - started).toFixed(1);
  canvas.dataset.items = String(layout.items.length);
  canvas.hidden = !needed(layout);
}

function hide() {
  drawn = null;
  view = null;
  minimap().hidden = true;
}

// the view's rectangle for a transform {x, y, k}
function follow(transform) {
  if (!drawn) return;
  const { width, height } = visibleBox();
  const { sx, sy } = drawn;
  const left = -transform.x / transform.k;
  const top = -transform.y / transform.k;
  view = { x: left * sx, y: top * sy, width: (width / transform.k) * sx, height: (height / transform.k) * sy };
  minimap().dataset.view = [view.x, view.y, view.width, view.height].map((v) => v.toFixed(1)).join(",");
  if (!painting) {
    painting = true;
    requestAnimationFrame(() => ((painting = false), paint()));
  }
}

function paint() {
  if (!drawn) return;
  const canvas = minimap();
  const context = canvas.getContext("2d");
  context.putImageData(drawn.boxes, 0, 0);
  if (!view) return;
  // clamped to the minimap, at least 3 pixels a side: always seen
  const x0 = Math.min(Math.max(view.x, 0), canvas.width - 3);
  const y0 = Math.min(Math.max(view.y, 0), canvas.height - 3);
  const x1 = Math.max(Math.min(view.x + view.width, canvas.width), x0 + 3);
  const y1 = Math.max(Math.min(view.y + view.height, canvas.height), y0 + 3);
  context.fillStyle = "rgba(47, 111, 176, 0.14)";
  context.fillRect(x0, y0, x1 - x0, y1 - y0);
  context.strokeStyle = VIEW;
  context.lineWidth = 1.5;
  context.strokeRect(x0 + 0.75, y0 + 0.75, x1 - x0 - 1.5, y1 - y0 - 1.5);
}

// centres the view on the drawing's point under the pointer, at the same scale
function moveTo(event) {
  if (!drawn) return;
  const canvas = minimap();
  const { layout, sx, sy } = drawn;
  const clamp = (v, high) => Math.min(Math.max(v, 0), high);
  // offsetX/Y: from the canvas's content box (inside its border), shown at clientWidth × clientHeight
  const x = clamp((event.offsetX * canvas.width) / canvas.clientWidth / sx, layout.width);
  const y = clamp((event.offsetY * canvas.height) / canvas.clientHeight / sy, layout.height);
  const { width, height } = visibleBox();
  const k = state.transform.k;
  setTransform({ k, x: width / 2 - x * k, y: height / 2 - y * k });
}

export function installMinimap() {
  const canvas = minimap();
  let dragging = false;
  document.addEventListener("graph-drawn", onDrawn);
  document.addEventListener("graph-moved", (event) => follow(event.detail));
  // the scene emptied (another model) or drawn again: this overview is stale until the next "graph-drawn"
  new MutationObserver(() => {
    if (drawn && $("#scene").firstElementChild !== drawn.scene) hide();
  }).observe($("#scene"), { childList: true });
  window.addEventListener("resize", () => {
    if (!drawn) return;
    canvas.hidden = !needed(drawn.layout);
    follow(state.transform);
  });
  canvas.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    event.preventDefault();
    dragging = true;
    canvas.setPointerCapture(event.pointerId);
    moveTo(event);
  });
  canvas.addEventListener("pointermove", (event) => dragging && moveTo(event));
  canvas.addEventListener("pointerup", () => (dragging = false));
  canvas.addEventListener("pointercancel", () => (dragging = false));
}
