// Where an edge's label (its values' types, graph-layout.js) is drawn, and
// which labels are drawn at all: a label sits centred beside the middle point
// of its edge's line, cut at LABEL_CHARS characters (the edge's title has all
// of it), and a label that would overlap one placed before it (edges running
// side by side) is left out (`crowded`), so that the labels drawn can be read.
// Used by the layout, which marks the crowded ones, and by the view, which
// draws the others.

const LABEL_CHAR = 5.6; // width of one character of a label (10px monospace)
const LABEL_CHARS = 40; // a longer label (long symbolic dimension names) is cut
const CELL = 200; // the grid the overlap test looks labels up in

export function labelText(label) {
  return label.length > LABEL_CHARS ? label.slice(0, LABEL_CHARS - 1) + "…" : label;
}

export function labelAt(edge) {
  const middle = edge.points[Math.floor(edge.points.length / 2)];
  return { x: middle.x + 4, y: middle.y + 3 };
}

// the box a label covers (centred on its x, its baseline at y)
export function labelBox(edge) {
  const { x, y } = labelAt(edge);
  const half = (labelText(edge.label).length * LABEL_CHAR) / 2;
  return { x0: x - half, y0: y - 10, x1: x + half, y1: y + 2 };
}

const overlap = (a, b) => a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1;

// Sets `crowded` on each labelled edge whose label overlaps one kept before it, in the edges' order.
export function placeLabels(edges) {
  const grid = new Map(); // "column,row" -> boxes kept there
  for (const edge of edges) {
    if (!edge.label || !edge.points.length) continue;
    const box = labelBox(edge);
    const cells = [];
    for (let column = Math.floor(box.x0 / CELL); column <= Math.floor(box.x1 / CELL); column++) {
      for (let row = Math.floor(box.y0 / CELL); row <= Math.floor(box.y1 / CELL); row++) cells.push(`${column},${row}`);
    }
    edge.crowded = cells.some((cell) => (grid.get(cell) || []).some((kept) => overlap(kept, box)));
    if (edge.crowded) continue;
    for (const cell of cells) {
      if (!grid.has(cell)) grid.set(cell, []);
      grid.get(cell).push(box);
    }
  }
  return edges;
}
