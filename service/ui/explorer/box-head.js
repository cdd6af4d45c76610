// The head of a node's box, shared by the layout (graph-layout.js, which sizes
// the box) and the drawing (graph-view.js, which places its text and rows):
// the op type on the first line, the name on up to NAME_LINES more, 13 px each.

export const NAME_LINES = 3; // lines of a name, the last cut with "…" beyond them (the box's title holds it whole)

// the height of the head of a box of `lineCount` lines (its weight rows start below it)
export function headHeight(lineCount) {
  return lineCount > 1 ? 34 + 13 * (lineCount - 2) : 22;
}

// the baseline of line `index` of a head
export function lineY(index) {
  return index === 0 ? 15 : 28 + 13 * (index - 1);
}
