// Only the part of a large drawing near the view is in the page: each box and
// edge is made when it first comes near the view, and taken out of the page
// while it is far from it, so that the browser neither styles, lays out nor
// paints thousands of elements nobody sees (painting and laying out a 5,000
// node drawing cost more than laying out its graph, and a resize laid all of
// it out again). Searching, selecting and the minimap work from the layout,
// not from the page's elements.

const MARGIN = 0.5; // of the view's width and height, on each side: what a short pan shows is there already
const BATCH = 400; // parts put in the page per task when many come near at once (a zoom out): the page never stalls

function near(box, view) {
  return box.x1 >= view.x0 && box.x0 <= view.x1 && box.y1 >= view.y0 && box.y0 <= view.y1;
}

function widened(view) {
  const dx = (view.x1 - view.x0) * MARGIN;
  const dy = (view.y1 - view.y0) * MARGIN;
  return { x0: view.x0 - dx, y0: view.y0 - dy, x1: view.x1 + dx, y1: view.y1 + dy };
}

export class Culling {
  // view: {x0, y0, x1, y1}, the part of the drawing shown, in its units
  constructor(view) {
    this.view = widened(view);
    this.parts = []; // {make, box, parent, element (once made), shown}
    this.moves = 0; // a later move drops what an earlier one still had to show
  }

  // a part of the drawing: make() builds its element, put in `parent` while near the view
  add(make, box, parent) {
    const part = { make, box, parent, element: null, shown: false };
    this.parts.push(part);
    if (near(box, this.view)) this.show(part);
  }

  show(part) {
    if (!part.element) part.element = part.make();
    part.parent.append(part.element);
    part.shown = true;
  }

  // the view moved: what left it goes at once, what came near it comes BATCH parts per task
  setView(view) {
    this.view = widened(view);
    const move = ++this.moves;
    const coming = [];
    for (const part of this.parts) {
      const shown = near(part.box, this.view);
      if (shown === part.shown) continue;
      if (shown) coming.push(part);
      else {
        part.element.remove();
        part.shown = false;
      }
    }
    const showBatch = (start) => {
      if (move !== this.moves) return;
      for (const part of coming.slice(start, start + BATCH)) this.show(part);
      if (start + BATCH < coming.length) setTimeout(() => showBatch(start + BATCH), 0);
    };
    showBatch(0);
  }
}

export function itemBox(item) {
  return { x0: item.x, y0: item.y, x1: item.x + item.width, y1: item.y + item.height };
}

export function edgeBox(edge) {
  const xs = edge.points.map((p) => p.x);
  const ys = edge.points.map((p) => p.y);
  return { x0: Math.min(...xs), y0: Math.min(...ys), x1: Math.max(...xs), y1: Math.max(...ys) };
}
