// The page's state, shared by its modules: the open model and what is shown of
// it. `generation` is bumped when another model opens: an answer arriving late
// for the old one compares it and is dropped. (The API key is api.js's.)

export const state = {
  model: null, // the summary of the open model
  generation: 0, // bumped when another model opens: late answers for the old one are dropped
  upload: { files: [], model: null }, // picked files: {file, path}
  modelsCursor: null,
  tensorsCursor: null,
  graph: null, // {graphs, root} once the worker has loaded the document
  graphLoading: null, // {id, done} while it loads and draws its first view
  diagnostics: null, // {errors, warnings, items, complete, byNode: Map(`${path}|${position}` -> [diagnostic])}
  graphPath: null,
  graphPage: 0,
  layout: null,
  expanded: new Set(), // the keys (`${graph path}#${position}`) of the nodes drawn open, their bodies inside them
  weightsAsNodes: false, // the graph toolbar's "weights as nodes": false draws single-consumer weights inside their consumer
  selected: null,
  diff: null, // the last comparison (diff-view.js): {a, b, head, changes, marks: Map(b's position -> "added" | "changed"), complete}
  transform: { x: 0, y: 0, k: 1 },
};
