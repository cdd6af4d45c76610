// The smoke run's dimension bindings, in the summary under the stages: a
// table with a column per run (1st binding, 2nd binding, in run order) and a
// row per dimension (NAME, or INPUT[AXIS]) with where its values came from
// (request, model, registry or default). Read from `checks.smoke.bindings`
// (one {key: value} per run) and `checks.smoke.binding_sources` ({key:
// source}); a summary without them has `checks.smoke.dims`, the request's
// bindings of its one run (every other free dimension was 1).

import { el, number, visible } from "./dom.js";

const ORDINALS = ["1st", "2nd", "3rd"];
const ordinal = (n) => ORDINALS[n - 1] || `${n}th`;

// {runs: [{key: value}], sources: {key: source}, fallback: bool} of a smoke entry, or null when it has no bindings
export function bindingsOf(smoke) {
  if (!smoke) return null;
  if (Array.isArray(smoke.bindings) && smoke.bindings.length) {
    return { runs: smoke.bindings.map((run) => run || {}), sources: smoke.binding_sources || {}, fallback: false };
  }
  if (smoke.dims && Object.keys(smoke.dims).length) {
    return { runs: [smoke.dims], sources: Object.fromEntries(Object.keys(smoke.dims).map((key) => [key, "request"])), fallback: true };
  }
  return null;
}

export function bindingsPart(summary) {
  const found = bindingsOf(summary.checks && summary.checks.smoke);
  if (!found) return null;
  const keys = [];
  for (const run of found.runs) for (const key of Object.keys(run)) if (!keys.includes(key)) keys.push(key);
  const head = ["dimension", ...found.runs.map((_, i) => `${ordinal(i + 1)} binding`), "source"];
  const rows = keys.map((key) =>
    el("tr", { dataset: { dimension: key } },
      el("th", {}, el("code", {}, visible(key))),
      found.runs.map((run) => el("td", { class: "number" }, key in run ? number(run[key]) : "–")),
      el("td", { class: "source" }, visible(String(found.sources[key] || "")))));
  return [
    el("h4", {}, "Smoke run bindings"),
    el("table", { id: "smoke-bindings", class: "grid compact" },
      el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)),
    found.fallback ? el("p", { class: "hint" }, "The request's bindings of the one run; every other free dimension was 1.") : null,
  ];
}
