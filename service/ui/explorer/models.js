// Opening models: files picked or dropped (a model with its external data
// files) and uploaded, a model under the data root, one of the store's list;
// then the open model's reset view (openSummary). A model picked is uploaded
// as soon as all it needs is there: the external data files it names (read
// here by external-locations.js) are picked, and nothing else is; until then
// the status line says what is missing, and Import sends what is picked as it
// is. An import asks for the checks ticked (checks.js), if the user changed
// them, and opens the graph; a refused one shows its problem (refused-model.js).
// An upload carries the name and label typed above the drop zone, if any.

import { $, el, fill, bytes, status, visible } from "./dom.js";
import { Problem, api, apiJson, describeError, fail } from "./api.js";
import { state } from "./state.js";
import { showTab } from "./tabs.js";
import { renderSummary, countParameters } from "./summary.js";
import { loadDiagnostics } from "./diagnostics.js";
import { showProblem } from "./refused-model.js";
import { checksQuery, verdictBadge } from "./checks.js";
import { externalLocations, normaliseLocation } from "./external-locations.js";

const NAMES_LISTED = 5; // missing or unnamed files named on the status line; the rest counted
const ID_PREFIX = 8; // hex digits of a model's id shown in the list (the whole id in its title)

function relativeLocation(path, folder) {
  return folder && path.startsWith(folder + "/") ? path.slice(folder.length + 1) : path.split("/").pop();
}

const baseName = (location) => location.split("/").pop();

// a file's location: where it lies beside the model, or else the one location the
// model names with its file name (a file picked without its folder)
function defaultLocation(path, folder, named) {
  const relative = relativeLocation(path, folder);
  if (!named || named.has(normaliseLocation(relative))) return relative;
  const same = [...named.values()].filter((location) => baseName(location) === baseName(relative));
  return same.length === 1 ? same[0] : relative;
}

const scans = new WeakMap(); // File -> its externalLocations answer (or the promise of it)
let picks = 0; // bumped at each pick: a scan or a decision for an older one is dropped

function namedOf(model) {
  const scan = model && scans.get(model.file);
  return scan && !(scan instanceof Promise) && scan.locations ? new Map(scan.locations.map((l) => [normaliseLocation(l), l])) : null;
}

const listed = (names) => names.slice(0, NAMES_LISTED).join(", ") + (names.length > NAMES_LISTED ? ` and ${names.length - NAMES_LISTED} more` : "");
const plural = (n, noun) => `${n} ${noun}${n === 1 ? "" : "s"}`;

// Uploads the picked model once it has all it names and nothing more; otherwise says what is missing.
export async function importWhenReady() {
  const pick = ++picks;
  const { model } = state.upload;
  if (!model) return;
  const name = visible(model.path);
  if (!scans.has(model.file)) {
    status(`reading which external data files ${name} names…`);
    const file = model.file;
    scans.set(file, externalLocations(file, () => Boolean(state.upload.model && state.upload.model.file === file)));
  }
  const scan = await scans.get(model.file);
  if (scan.locations === null && scan.reason === "another file was picked") scans.delete(model.file); // read again if picked again
  else scans.set(model.file, scan);
  if (pick !== picks || state.upload.model !== model) return;
  if (scan.locations === null) {
    status(`${name} picked; which external data files it names could not be read here (${scan.reason}): press Import to send it`);
    return;
  }
  renderPicked(); // the locations it names, for files picked without their folder
  const given = new Set(state.upload.files.filter((e) => e !== model).map((e) => normaliseLocation(e.location)));
  const named = new Set(scan.locations.map(normaliseLocation));
  const missing = scan.locations.filter((l) => !given.has(normaliseLocation(l)));
  const unnamed = state.upload.files.filter((e) => e !== model && !named.has(normaliseLocation(e.location)));
  if (missing.length) {
    status(`${name} needs ${missing.length} more ${missing.length === 1 ? "file" : "files"}: ${visible(listed(missing))} — drop or choose ${missing.length === 1 ? "it" : "them"} (Import sends what is picked now)`);
    return;
  }
  if (unnamed.length) {
    status(`${name} does not name ${plural(unnamed.length, "picked file")} (${visible(listed(unnamed.map((e) => e.location)))}): fix the locations, Clear and pick again, or press Import to send them all`);
    return;
  }
  await upload();
}

export function pickFiles(entries) {
  // entries: [{file, path}] with the path relative to what was picked or dropped
  // a pick with a model file starts over; one without adds external data files to the model picked before
  const hasModel = entries.some((e) => /\.onnx$/i.test(e.path));
  state.upload.files = hasModel ? entries : state.upload.files.concat(entries);
  const models = state.upload.files.filter((e) => /\.onnx$/i.test(e.path));
  if (!state.upload.model || !state.upload.files.includes(state.upload.model)) state.upload.model = models[0] || state.upload.files[0] || null;
  renderPicked();
  importWhenReady().catch(fail);
}

export function renderPicked() {
  const { files, model } = state.upload;
  const named = namedOf(model);
  $("#picked").hidden = files.length === 0;
  const select = $("#model-file");
  fill(select, ...files.map((e, i) => el("option", { value: String(i), selected: e === model }, e.path)));
  const folder = model && model.path.includes("/") ? model.path.slice(0, model.path.lastIndexOf("/")) : "";
  const rows = files
    .filter((e) => e !== model)
    .map((e) => {
      const value = e.edited ? e.location : defaultLocation(e.path, folder, named);
      const input = el("input", { value, spellcheck: "false", "aria-label": "location of " + e.path });
      input.addEventListener("input", () => ((e.location = input.value), (e.edited = true)));
      input.addEventListener("change", () => importWhenReady().catch(fail));
      e.location = input.value;
      return el("tr", {}, el("td", {}, e.path), el("td", {}, "→"), el("td", {}, input), el("td", {}, bytes(e.file.size).split(" (")[0]));
    });
  fill($("#externals tbody"), ...rows);
}

export async function entriesOfDrop(items) {
  const found = [];
  async function walk(entry, prefix) {
    if (entry.isFile) {
      const file = await new Promise((resolve, reject) => entry.file(resolve, reject));
      found.push({ file, path: prefix + entry.name });
    } else if (entry.isDirectory) {
      const reader = entry.createReader();
      for (;;) {
        const batch = await new Promise((resolve, reject) => reader.readEntries(resolve, reject));
        if (!batch.length) break;
        for (const child of batch) await walk(child, prefix + entry.name + "/");
      }
    }
  }
  const roots = [...items].map((item) => (item.webkitGetAsEntry ? item.webkitGetAsEntry() : null));
  if (roots.every(Boolean)) {
    for (const root of roots) await walk(root, "");
    return found;
  }
  return null;
}

export async function upload() {
  const { files, model } = state.upload;
  if (!model) return;
  picks++; // a decision still on its way for this pick is not taken again
  const form = new FormData();
  for (const field of ["name", "label"]) {
    const given = $("#upload-" + field).value;
    if (given.trim()) form.append(field, given); // the service checks it (printable, bounded): a refusal says why
  }
  form.append("model", model.file, model.file.name);
  for (const entry of files) if (entry !== model) form.append("external_data", entry.file, entry.location);
  status(`importing ${model.file.name} (${bytes(files.reduce((n, e) => n + e.file.size, 0)).split(" (")[0]})…`);
  // a refusal's offset is in the model file: the hex view reads the File sent, whatever its
  // name (the problem's `input` is the name bounded and escaped by the service, not a key to it)
  await importWith({ method: "POST", body: form }, model.file);
}

export async function importPath(path) {
  status(`importing ${path} from the data root…`);
  await importWith({ method: "POST", body: JSON.stringify({ path }), headers: { "Content-Type": "application/json" } }, null);
}

// `sent`: the model File uploaded (for a refusal's hex view), or null for a data-root path
async function importWith(request, sent) {
  let response;
  try {
    response = await api("/models" + checksQuery(), request);
  } catch (error) {
    if (error instanceof Problem && error.problem.kind) {
      showProblem(error.problem, sent);
      status(describeError(error), "error");
      return;
    }
    throw error;
  }
  const summary = await response.json();
  openSummary(summary, "graph");
  status(`${response.status === 201 ? "imported" : "already imported (its checks as run then)"}: ${visible(summary.input)}${summary.verdict ? ", verdict " + summary.verdict : ""}; drawing its graph…`, "ok");
  listModels(true).catch(() => {});
}

export async function openModel(id) {
  status("opening " + id.slice(0, 12) + "…");
  openSummary(await apiJson(`/models/${encodeURIComponent(id)}`));
  status("", "info");
}

// `tab`: the tab shown (an import opens the graph)
function openSummary(summary, tab = "summary") {
  state.model = summary;
  state.generation++;
  state.graph = null;
  state.layout = null;
  state.expanded = new Set();
  state.selected = null;
  $("#scene").replaceChildren();
  $("#details").hidden = true;
  $("#tensor-list tbody").replaceChildren();
  $("#tensor").replaceChildren();
  $("#tabs [data-tab=problem]").hidden = true;
  if (location.hash !== "#model=" + summary.id) history.replaceState(null, "", "#model=" + summary.id);
  const check = summary.diagnostics || { errors: 0, warnings: 0, items: [] };
  state.diagnostics = { errors: check.errors, warnings: check.warnings, items: check.items, complete: false, byNode: new Map() };
  renderSummary(summary);
  showTab(tab);
  countParameters(summary, state.generation).catch(fail);
  loadDiagnostics(summary, state.generation).catch(fail);
}

let modelsListing = 0; // the latest listing wins: an older answer still arriving is dropped

export async function listModels(reset) {
  const listing = reset ? ++modelsListing : modelsListing;
  const cursor = reset ? null : state.modelsCursor;
  const page = await apiJson("/models?limit=50" + (cursor ? "&cursor=" + encodeURIComponent(cursor) : ""));
  if (listing !== modelsListing) return;
  if (reset) $("#models").replaceChildren();
  for (const item of page.items) {
    // the name and label, then what tells two models of one name apart: an id prefix, the verdict (with
    // the stages it covers), the size and the time
    $("#models").append(
      el("li", { dataset: { id: item.id } },
        el("a", { href: "#model=" + item.id, title: item.id, onclick: (e) => (e.preventDefault(), openModel(item.id).catch(fail)) }, visible(item.input)),
        item.label ? [" ", el("span", { class: "model-label", title: "label" }, visible(item.label))] : null,
        " ", el("code", { class: "id-prefix", title: item.id }, item.id.slice(0, ID_PREFIX)),
        item.verdict ? [" ", verdictBadge(item.verdict, item.stages)] : null,
        el("small", {}, ` ${bytes(item.model_file.size).split(" (")[0]} · ${item.created.slice(0, 19).replace("T", " ")}`)),
    );
  }
  state.modelsCursor = page.next_cursor;
  $("#more-models").hidden = !page.next_cursor;
}
