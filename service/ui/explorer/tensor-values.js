// A tensor's values as the preview shows them: its raw little-endian bytes
// decoded by element type (float16, bfloat16, 64-bit integers...; STRING as
// the service's (length, bytes) pairs), statistics, a histogram and the first
// values.

import { el, svg, number, elementCount } from "./dom.js";

const PREVIEW_ITEMS = 64; // elements listed
const HISTOGRAM_BINS = 32;
const ELEMENT_SIZES = {
  FLOAT: 4, UINT8: 1, INT8: 1, UINT16: 2, INT16: 2, INT32: 4, INT64: 8, BOOL: 1, FLOAT16: 2, DOUBLE: 8,
  UINT32: 4, UINT64: 8, BFLOAT16: 2, FLOAT8E4M3FN: 1, FLOAT8E4M3FNUZ: 1, FLOAT8E5M2: 1, FLOAT8E5M2FNUZ: 1, FLOAT8E8M0: 1,
};

// decoding the raw little-endian layout

function half(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * 2 ** -14 * (fraction / 1024);
  if (exponent === 31) return fraction ? NaN : sign * Infinity;
  return sign * 2 ** (exponent - 15) * (1 + fraction / 1024);
}

function decode(type, data) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const size = ELEMENT_SIZES[type];
  const count = Math.floor(data.byteLength / size);
  const values = new Array(count);
  const f32 = new DataView(new ArrayBuffer(4));
  for (let i = 0; i < count; i++) {
    const at = i * size;
    switch (type) {
      case "FLOAT": values[i] = view.getFloat32(at, true); break;
      case "DOUBLE": values[i] = view.getFloat64(at, true); break;
      case "FLOAT16": values[i] = half(view.getUint16(at, true)); break;
      case "BFLOAT16": f32.setUint32(0, view.getUint16(at, true) << 16); values[i] = f32.getFloat32(0); break;
      case "INT8": values[i] = view.getInt8(at); break;
      case "UINT8": case "BOOL": values[i] = view.getUint8(at); break;
      case "INT16": values[i] = view.getInt16(at, true); break;
      case "UINT16": values[i] = view.getUint16(at, true); break;
      case "INT32": values[i] = view.getInt32(at, true); break;
      case "UINT32": values[i] = view.getUint32(at, true); break;
      case "INT64": values[i] = Number(view.getBigInt64(at, true)); break;
      case "UINT64": values[i] = Number(view.getBigUint64(at, true)); break;
      default: values[i] = view.getUint8(at); // float8 types: their bit patterns
    }
  }
  return values;
}

function decodeStrings(data) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const out = [];
  let at = 0;
  while (at + 8 <= data.byteLength && out.length < PREVIEW_ITEMS) {
    const length = Number(view.getBigUint64(at, true));
    if (at + 8 + length > data.byteLength) break;
    out.push(new TextDecoder().decode(data.subarray(at + 8, at + 8 + length)));
    at += 8 + length;
  }
  return out;
}

function formatValue(v) {
  if (typeof v !== "number") return String(v);
  if (Number.isInteger(v)) return String(v);
  return Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(4) : v.toPrecision(6).replace(/\.?0+$/, "");
}

export function preview(t, data) {
  const total = elementCount(t.dims);
  if (t.elem_type === "STRING") {
    const strings = decodeStrings(data);
    return [el("h4", {}, `Values: the first ${strings.length}`), el("ol", { class: "strings", start: "0" }, strings.map((s) => el("li", {}, el("code", {}, JSON.stringify(s)))))];
  }
  if (!ELEMENT_SIZES[t.elem_type]) {
    const hex = [...data.subarray(0, 64)].map((b) => b.toString(16).padStart(2, "0")).join(" ");
    return [el("p", { class: "hint" }, `${t.elem_type}: elements packed below a byte; the first bytes:`), el("pre", { class: "hex" }, hex)];
  }
  const values = decode(t.elem_type, data);
  const bits = /^FLOAT8/.test(t.elem_type) ? " (bit patterns)" : "";
  const finite = values.filter(Number.isFinite);
  let min = Infinity;
  let max = -Infinity;
  let sum = 0;
  for (const v of finite) {
    if (v < min) min = v;
    if (v > max) max = v;
    sum += v;
  }
  const over = values.length < total ? `over the first ${number(values.length)} of ${number(total)} elements` : `over all ${number(values.length)} elements`;
  const nonFinite = values.length - finite.length;
  return [
    el("h4", {}, "Statistics ", el("span", { class: "hint" }, over + bits)),
    el("dl", { class: "facts stats" },
      el("dt", {}, "min"), el("dd", { id: "stat-min" }, finite.length ? formatValue(min) : "–"),
      el("dt", {}, "max"), el("dd", { id: "stat-max" }, finite.length ? formatValue(max) : "–"),
      el("dt", {}, "mean"), el("dd", { id: "stat-mean" }, finite.length ? formatValue(sum / finite.length) : "–"),
      nonFinite ? [el("dt", {}, "NaN or ±Inf"), el("dd", {}, number(nonFinite))] : null,
    ),
    histogram(finite, min, max),
    el("h4", {}, `Values: the first ${Math.min(PREVIEW_ITEMS, values.length)}`),
    el("pre", { class: "values", id: "values" }, values.slice(0, PREVIEW_ITEMS).map(formatValue).join("  ")),
  ];
}

function histogram(values, min, max) {
  if (!values.length) return null;
  const counts = new Array(HISTOGRAM_BINS).fill(0);
  const span = max - min || 1;
  for (const v of values) counts[Math.min(HISTOGRAM_BINS - 1, Math.floor(((v - min) / span) * HISTOGRAM_BINS))]++;
  const top = Math.max(...counts);
  const width = 320;
  const height = 80;
  const bar = width / HISTOGRAM_BINS;
  const chart = svg("svg", { class: "histogram", viewBox: `0 0 ${width} ${height + 14}`, width, height: height + 14, role: "img", "aria-label": "histogram" });
  counts.forEach((n, i) => {
    const h = top ? (n / top) * height : 0;
    const rect = svg("rect", { x: (i * bar + 0.5).toFixed(1), y: (height - h).toFixed(1), width: (bar - 1).toFixed(1), height: h.toFixed(1) });
    const title = svg("title");
    title.textContent = `${formatValue(min + (i * span) / HISTOGRAM_BINS)} … ${formatValue(min + ((i + 1) * span) / HISTOGRAM_BINS)}: ${n}`;
    rect.append(title);
    chart.append(rect);
  });
  for (const [x, anchor, label] of [[0, "start", min], [width, "end", max]]) {
    const text = svg("text", { x, y: height + 12, "text-anchor": anchor });
    text.textContent = formatValue(label);
    chart.append(text);
  }
  return chart;
}
