// The tensors tab: the catalogue's list (by name prefix, a page at a time)
// and one tensor's panel: its facts, where it lives, its downloads (raw bytes,
// and .npy when the API gives it an npy_href) and a preview of its first bytes
// (a Range request), decoded by tensor-values.js.

import { $, el, fill, number, bytes, dimsText, elementCount, visible } from "./dom.js";
import { api, apiJson, download, fail } from "./api.js";
import { state } from "./state.js";
import { showTab } from "./tabs.js";
import { preview } from "./tensor-values.js";

const PREVIEW_BYTES = 4 << 20; // a preview reads at most this much of a tensor (a Range request)

export async function listTensors(prefix, more = false) {
  const generation = state.generation;
  if (!more) {
    state.tensorsCursor = null;
    $("#tensor-list tbody").replaceChildren();
  }
  let url = `${state.model.links.tensors}?limit=100`;
  if (prefix) url += "&prefix=" + encodeURIComponent(prefix);
  if (more && state.tensorsCursor) url += "&cursor=" + encodeURIComponent(state.tensorsCursor);
  const page = await apiJson(url);
  if (generation !== state.generation) return;
  for (const t of page.items) {
    $("#tensor-list tbody").append(el("tr", {},
      el("td", {}, el("a", { href: "#", onclick: (e) => (e.preventDefault(), openTensor(t).catch(fail)) }, visible(t.name) || "(unnamed)")),
      el("td", {}, t.elem_type), el("td", {}, dimsText(t.dims)), el("td", {}, number(t.byte_length)), el("td", {}, t.role)));
  }
  state.tensorsCursor = page.next_cursor;
  $("#more-tensors").hidden = !page.next_cursor;
}

export async function openTensorRef(ref) {
  // a reference from the graph (name, field_path, elem_type, dims, href): its catalogue entry has the rest
  showTab("tensors");
  const page = await apiJson(`${state.model.links.tensors}?limit=1000&prefix=${encodeURIComponent(ref.name)}`);
  const entry = page.items.find((t) => t.field_path === ref.field_path) || Object.assign({ byte_length: null, source: "?", role: "?", alias: ref.name }, ref);
  await openTensor(entry);
}

function whereItLives(t) {
  const initializer = (state.model.graph.initializers || []).find((i) => i.field_path === t.field_path);
  if (initializer && initializer.location) {
    const l = initializer.location;
    if (l.file) return `${l.source}: ${l.file}, offset ${number(l.offset)}, ${number(l.length)} bytes`;
    if (l.offset !== undefined && l.offset !== null) return `${l.source} in the model file at offset ${number(l.offset)}`;
    return l.source;
  }
  return t.source === "external" ? "external data file" : t.source === "raw_data" ? "raw_data in the model file" : t.source;
}

async function openTensor(t) {
  const generation = state.generation;
  const box = $("#tensor");
  const stem = (t.alias || "tensor").replace(/[^A-Za-z0-9._-]/g, "_");
  fill(box, 
    el("h3", {}, visible(t.name) || "(unnamed)"),
    el("dl", { class: "facts" },
      el("dt", {}, "type"), el("dd", {}, t.elem_type),
      el("dt", {}, "dims"), el("dd", {}, `${dimsText(t.dims)} = ${number(elementCount(t.dims))} elements`),
      el("dt", {}, "bytes"), el("dd", { id: "tensor-bytes" }, t.byte_length === null ? "?" : bytes(t.byte_length)),
      el("dt", {}, "lives in"), el("dd", {}, whereItLives(t)),
      el("dt", {}, "field path"), el("dd", {}, el("code", {}, t.field_path)),
      el("dt", {}, "role"), el("dd", {}, t.role),
    ),
    el("p", { class: "downloads" },
      el("button", { type: "button", id: "download-raw", onclick: () => download(t.href, stem + ".bin").catch(fail) }, "Download raw"),
      " ",
      // npy_href: the service's link to the .npy form, null for a type that has none (STRING, packed 4- and 2-bit types...)
      t.npy_href ? el("button", { type: "button", id: "download-npy", onclick: () => download(t.npy_href, stem + ".npy").catch(fail) }, "Download .npy") : el("span", { class: "hint" }, "no .npy form for this type"),
    ),
    el("div", { id: "preview" }, el("p", { class: "hint" }, "reading…")),
  );
  // the catalogue's byte_length is the packed size; STRING tensors are served as (length, bytes) pairs
  const known = t.byte_length !== null && t.elem_type !== "STRING";
  const wanted = known ? Math.min(PREVIEW_BYTES, t.byte_length) : PREVIEW_BYTES;
  if (wanted === 0 || elementCount(t.dims) === 0) {
    fill($("#preview"), el("p", { class: "hint" }, "no bytes: an empty tensor"));
    return;
  }
  const response = await api(t.href, { headers: { Range: `bytes=0-${wanted - 1}` } });
  const data = new Uint8Array(await response.arrayBuffer());
  if (generation !== state.generation) return;
  const range = /\/(\d+)$/.exec(response.headers.get("Content-Range") || "");
  const served = range ? Number(range[1]) : data.byteLength;
  if (!known) fill($("#tensor-bytes"), bytes(served), el("span", { class: "hint" }, " as served"));
  fill($("#preview"), ...preview(t, data));
}
