// The page's side of the graph worker (graph-worker.js, a module worker):
// started on first use, asked questions with ask(op, message), a promise of
// its answer; its progress goes to the status line, its failures come back as
// Errors (a Problem when the service refused the graph document).

import { status } from "./dom.js";
import { Problem } from "./problem.js";

let worker = null;
let nextCall = 0;
const pending = new Map();

function graphWorker() {
  if (worker) return worker;
  worker = new Worker(new URL("./graph-worker.js", import.meta.url), { type: "module" });
  worker.onmessage = (event) => {
    const data = event.data;
    if (data.progress) return status(data.progress);
    const call = pending.get(data.id);
    if (!call) return;
    pending.delete(data.id);
    if (data.ok) call.resolve(data.result);
    else call.reject(data.error.problem ? new Problem(data.error.problem) : new Error(data.error.message));
  };
  worker.onerror = (event) => {
    event.preventDefault();
    for (const call of pending.values()) call.reject(new Error("graph worker: " + (event.message || "it did not start")));
    pending.clear();
    worker = null;
  };
  return worker;
}

export function ask(op, message = {}) {
  const id = ++nextCall;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject });
    graphWorker().postMessage(Object.assign({ id, op }, message));
  });
}
