// The page's DOM and text helpers: $ (one element by selector), el and svg
// (building HTML and SVG elements), fill (replacing an element's children),
// status (the status line), visible (untrusted text with its control and
// bidirectional characters shown), and the number, byte-size and dims
// formats the panels share.

import { visible } from "./visible.js";

export { visible };

export const $ = (selector) => document.querySelector(selector);

export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "dataset") Object.assign(node.dataset, value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

// replaceChildren, skipping null, undefined and false, flattening arrays
export function fill(node, ...children) {
  node.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
export function svg(tag, attributes = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, value);
  return node;
}

export const number = (n) => (typeof n === "number" ? n.toLocaleString("en-US") : String(n));

export function bytes(n) {
  if (typeof n !== "number") return "?";
  if (n < 1024) return `${n} B`;
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = n;
  let unit = -1;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 2 : 1)} ${units[unit]} (${number(n)} B)`;
}

export const dimsText = (dims) => "[" + dims.join(", ") + "]";
export const elementCount = (dims) => dims.reduce((a, b) => a * b, 1);

export function status(text, kind = "info") {
  const box = $("#status");
  box.textContent = text;
  box.className = kind;
}

