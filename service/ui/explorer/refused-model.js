// A refused model: the problem tab (the refusal's kind, message, offset and
// field path) and, for an upload, a hex view of the local file (the File this
// browser sent) around the offset, read in the browser.

import { $, el, fill, number, visible } from "./dom.js";
import { fail } from "./api.js";

const HEX_ROWS_AROUND = 8; // rows of 16 bytes shown before and after the offset's row
const HEX_NAME_CHARS = 120; // of the local file's name in the hex view's heading (all of it in the heading's tooltip)

// `file`: the model File this browser sent (the offset is in it), or null (a data-root path)
export function showProblem(p, file) {
  const button = $("#tabs [data-tab=problem]");
  button.hidden = false;
  fill($("#tab-problem"), 
    el("h2", {}, p.title || "Refused"),
    el("dl", { class: "facts problem" },
      el("dt", {}, "kind"), el("dd", { id: "problem-kind" }, p.kind || "–"),
      el("dt", {}, "status"), el("dd", {}, String(p.status)),
      el("dt", {}, "message"), el("dd", { id: "problem-detail" }, p.detail || ""),
      el("dt", {}, "offset"), el("dd", { id: "problem-offset" }, p.offset === null || p.offset === undefined ? "–" : String(p.offset)),
      el("dt", {}, "field path"), el("dd", { id: "problem-field-path" }, el("code", {}, p.field_path || "–")),
      el("dt", {}, "file"), el("dd", {}, p.input || "–"),
      p.limit ? [el("dt", {}, "limit"), el("dd", {}, p.limit)] : null,
    ),
    el("div", { id: "hex" }),
  );
  for (const panel of document.querySelectorAll(".tab")) panel.hidden = panel.id !== "tab-problem";
  for (const b of document.querySelectorAll("#tabs button")) b.setAttribute("aria-selected", String(b === button));
  if (typeof p.offset === "number") {
    if (file) hexView(file, p.offset).catch(fail);
    else fill($("#hex"), el("p", { class: "hint" }, "The hex view reads the file in this browser: it is shown for uploads, not for files under the data root."));
  }
}

async function hexView(file, offset) {
  const row = Math.floor(offset / 16);
  const start = Math.max(0, (row - HEX_ROWS_AROUND) * 16);
  const end = Math.min(file.size, (row + HEX_ROWS_AROUND + 1) * 16);
  const data = new Uint8Array(await file.slice(start, end).arrayBuffer());
  const lines = [];
  for (let at = start; at < end; at += 16) {
    const cells = [];
    const text = [];
    for (let i = 0; i < 16; i++) {
      const position = at + i;
      if (position >= end) {
        cells.push(el("span", { class: "byte pad" }, "  "));
        continue;
      }
      const b = data[position - start];
      const hit = position === offset;
      cells.push(el("span", { class: hit ? "byte hit" : "byte", title: `offset ${position}`, dataset: hit ? { offset: String(position) } : {} }, b.toString(16).padStart(2, "0")));
      text.push(el("span", { class: hit ? "hit" : null }, b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : "."));
    }
    lines.push(el("div", { class: "hexline" }, el("span", { class: "address" }, String(at).padStart(10, " ")), " ", cells, "  ", el("span", { class: "ascii" }, text)));
  }
  const note = offset >= file.size ? `The offset is the end of the file (${number(file.size)} bytes): the data stops there.` : `Byte ${number(offset)} is highlighted; addresses are decimal.`;
  const name = visible(file.name); // control characters escaped (a tab as \x09), so none is invisible
  const shown = name.length > HEX_NAME_CHARS ? name.slice(0, HEX_NAME_CHARS - 1) + "…" : name;
  const heading = el("h3", { id: "hex-file", title: name }, `${shown}, bytes ${number(start)}–${number(Math.max(start, end - 1))}`);
  fill($("#hex"), heading, el("p", { class: "hint" }, note), el("pre", { class: "hexdump" }, lines));
}
