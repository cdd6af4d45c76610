// The check stages (signature, schema, security, shape, runtime, smoke): which ones an
// import from this page asks for (the checkboxes of the open panel: nothing is
// sent, and the server runs its --default-checks, until the user changes
// one), and the open model's verdict and each stage's status, counts and
// reason, in the summary, and a listed model's verdict with the stages it
// covers (`pass · 3 of 6 stages`). Every status is said in words, its colour and mark
// only repeat it. A summary stored before the stages has neither `checks` nor
// `verdict`: the operator check's counts are shown as the schema stage's.

import { $, el, number, visible } from "./dom.js";

export const STAGES = ["signature", "schema", "security", "shape", "runtime", "smoke"]; // the order they run in
const DOCUMENTED_DEFAULT = ["schema", "shape", "security"]; // --default-checks unless the server is told otherwise
const WHAT = {
  signature: "the folder's model.sig (OpenSSF model signing) against the trusted signers",
  schema: "every node against its operator's schema",
  security: "what a registry acts on: static output sizes, custom domains, hidden characters…",
  shape: "strict type and shape inference",
  runtime: "an onnxruntime session made in the sandbox",
  smoke: "one run on synthetic inputs",
};
const MARKS = { pass: "✓", fail: "✗", incomplete: "!", skipped: "–" };
const VERDICTS = {
  pass: "every stage run passed",
  fail: "a stage found an error",
  incomplete: "a stage did not finish: the model is not known to pass",
};

// -- choosing the stages of an import

let chosen = null; // null: the server's default; else the stages the user ticked

export function installChecksChoice() {
  const boxes = STAGES.map((stage) =>
    el("label", { class: "check-choice", title: WHAT[stage] },
      el("input", { type: "checkbox", value: stage, checked: DOCUMENTED_DEFAULT.includes(stage), onchange: (e) => choose(e.target) }), " ", stage));
  $("#checks-choice").append(...boxes);
  $("#checks-default").addEventListener("click", () => {
    chosen = null;
    for (const box of document.querySelectorAll("#checks-choice input")) box.checked = DOCUMENTED_DEFAULT.includes(box.value);
    describeChoice();
  });
  describeChoice();
}

function choose(box) {
  const boxes = [...document.querySelectorAll("#checks-choice input")];
  const tick = (stage, on) => (boxes.find((b) => b.value === stage).checked = on);
  if (box.value === "smoke" && box.checked) tick("runtime", true); // the run needs the session the load makes
  if (box.value === "runtime" && !box.checked) tick("smoke", false);
  chosen = boxes.filter((b) => b.checked).map((b) => b.value);
  describeChoice();
}

function describeChoice() {
  $("#checks-default").hidden = chosen === null;
  $("#checks-sent").textContent = chosen === null
    ? "None asked: the server runs its default (schema, shape and security unless it is configured otherwise)."
    : chosen.length ? `Asked: ${chosen.join(", ")}.` : "None ticked: the server will refuse the import.";
}

// the query string of an import: empty for the server's default
export const checksQuery = () => (chosen === null ? "" : "?checks=" + encodeURIComponent(chosen.join(",")));

// -- the open model's verdict and stages

// `checks` as stored, or, for a summary from before the stages, the operator check's counts as the schema stage's
export function stagesOf(summary) {
  if (summary.checks && Object.keys(summary.checks).length) return summary.checks;
  const counted = summary.diagnostics || { errors: 0, warnings: 0 };
  return { schema: { status: counted.errors ? "fail" : "pass", errors: counted.errors, warnings: counted.warnings } };
}

export function checksPart(summary) {
  const stages = stagesOf(summary);
  const verdict = summary.verdict;
  const notRun = STAGES.filter((stage) => !(stage in stages));
  const rows = Object.entries(stages).map(([stage, c]) => el("tr", { class: "stage", dataset: { stage } },
    el("th", { title: WHAT[stage] || "" }, visible(stage)),
    el("td", {}, statusBadge(c.status)),
    el("td", { class: "number errors" }, number(c.errors)),
    el("td", { class: "number warnings" }, number(c.warnings)),
    el("td", { class: "reason" }, c.reason ? visible(c.reason) : ""),
  ));
  return [
    verdict
      ? el("p", { id: "verdict", class: "verdict " + verdict },
        el("span", { class: "mark", "aria-hidden": "true" }, MARKS[verdict] || "?"), " Verdict: ",
        el("strong", { id: "verdict-value" }, visible(verdict)), el("span", { class: "hint" }, ` — ${VERDICTS[verdict] || ""}`))
      : el("p", { id: "verdict", class: "verdict none" }, "No verdict: this model was imported before the check stages; the operator check alone is known."),
    el("table", { id: "checks", class: "grid stages" },
      el("thead", {}, el("tr", {}, ["stage", "status", "errors", "warnings", "reason"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)),
    verdict && notRun.length ? el("p", { class: "hint" }, `Not run at this import: ${notRun.join(", ")}.`) : null,
  ];
}

export function statusBadge(status, more = null) {
  const known = status in MARKS ? status : "incomplete";
  return el("span", { class: "stage-status " + known }, el("span", { "aria-hidden": "true" }, MARKS[known] + " "), visible(status), more);
}

// A listed model's verdict with the stages it covers: `pass · 3 of 5 stages`, the
// stages named in its title. `stages`: the listing's {stage: status}, in run order
// (absent from a service before it: the verdict alone).
export function verdictBadge(verdict, stages) {
  if (!stages || !Object.keys(stages).length) return statusBadge(verdict);
  const ran = Object.keys(stages);
  const notRun = STAGES.filter((stage) => !(stage in stages));
  const badge = statusBadge(verdict, ` · ${ran.length} of ${STAGES.length} stages`);
  badge.classList.add("coverage");
  badge.title = `ran: ${ran.map((stage) => `${visible(stage)} (${visible(String(stages[stage]))})`).join(", ")}` +
    (notRun.length ? `; not run: ${notRun.join(", ")}` : "");
  return badge;
}
