// The service's error answers, RFC 9457 problems (application/problem+json),
// as one Error type, Problem, carrying the problem as `problem`. Shared by the
// page (api.js: its requests; graph-worker-client.js: the worker's failures,
// rebuilt) and the graph worker (graph-worker.js: the graph document's fetch).

// An error answer of the service (an RFC 9457 problem), or a failure to reach it.
export class Problem extends Error {
  constructor(problem) {
    super(problem.detail || problem.title || `HTTP ${problem.status}`);
    this.problem = problem;
  }
}

// The Problem of a response that is not OK: its JSON body, or its status and
// status text when the body is not JSON; the response's status when the body
// names none.
export async function responseProblem(response) {
  let problem;
  try {
    problem = await response.json();
  } catch (_) {
    problem = null;
  }
  if (!problem || typeof problem !== "object") problem = { status: response.status, detail: response.statusText };
  problem.status = problem.status || response.status;
  return new Problem(problem);
}
