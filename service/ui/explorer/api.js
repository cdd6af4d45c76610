// The page's requests to this service's API: the API key of the token field
// (kept in sessionStorage: this tab's session only) sent as a Bearer header,
// error answers thrown as Problem errors (problem.js), how an error is told
// on the status line, and downloads (which need the header too).

import { Problem, responseProblem } from "./problem.js";
import { el, status } from "./dom.js";

export { Problem };

const TOKEN_KEY = "onnx-explorer-token";
let token = sessionStorage.getItem(TOKEN_KEY) || "";

export const currentToken = () => token;

export function setToken(value) {
  token = value;
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra = {}) {
  return Object.assign(token ? { Authorization: "Bearer " + token } : {}, extra);
}

export async function api(url, options = {}) {
  const response = await fetch(url, Object.assign({}, options, { headers: headers(options.headers || {}) }));
  if (!response.ok) throw await responseProblem(response);
  return response;
}

export const apiJson = async (url, options) => (await api(url, options)).json();

export function describeError(error) {
  if (error instanceof Problem || (error && error.problem)) {
    const p = error.problem;
    const hint = p.status === 401 ? " — enter an API key above" : p.status === 403 ? " — this key lacks the scope" : "";
    return `${p.status || ""} ${p.kind || p.title || "error"}: ${p.detail || ""}${hint}`;
  }
  return String(error && error.message ? error.message : error);
}

export function fail(error) {
  status(describeError(error), "error");
}

export async function download(href, filename) {
  // with an API key the browser cannot be told to send the header: fetch it here, then save the blob
  let url = href;
  if (token) url = URL.createObjectURL(await (await api(href)).blob());
  const link = el("a", { href: url, download: filename, hidden: true });
  document.body.append(link);
  link.click();
  link.remove();
  if (url !== href) setTimeout(() => URL.revokeObjectURL(url), 60000);
}
