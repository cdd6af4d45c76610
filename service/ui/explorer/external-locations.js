// Which external data files a model names, read in the browser before any
// upload: a small protobuf reader that walks a .onnx file just far enough to
// find the `location` entries of its tensors stored outside it (TensorProto
// data_location EXTERNAL = 1, external_data entries with key "location"): the
// graph's initializers and sparse initializers, the tensors of node
// attributes, subgraphs (If/Loop/Scan bodies) and function bodies, as the
// service's importer does (field numbers from onnx.proto). Everything else is
// skipped by its length, unread. Bounded and defensive: at most READ_LIMIT
// bytes are read (with File.slice, a window at a time, asynchronously),
// nesting at most MAX_DEPTH deep, at most MAX_FIELDS fields, and the main
// thread is given back every YIELD_EVERY fields. A file that is not a model,
// is cut short, or breaks a bound is "unknown" ({locations: null, reason}),
// never an exception: the page then leaves the import to the Import button.

const READ_LIMIT = 64 * 1024 * 1024; // bytes read from the file, at most
const MAX_DEPTH = 32; // messages nested in each other
const MAX_FIELDS = 5_000_000;
const MAX_LOCATIONS = 10_000; // distinct locations
const MAX_STRING = 64 * 1024; // bytes of one key or location
const YIELD_EVERY = 50_000; // fields read between two pauses of the main thread
const WINDOW = 1024 * 1024; // bytes read at once while reading on
const JUMP_WINDOW = 16 * 1024; // bytes read at once after skipping far (past a tensor's raw data)

// For each message read: its fields that are messages read in turn (others are skipped).
const CHILDREN = {
  model: { 7: "graph", 25: "function" }, // ModelProto.graph, .functions
  graph: { 1: "node", 5: "tensor", 15: "sparse" }, // GraphProto.node, .initializer, .sparse_initializer
  function: { 7: "node" }, // FunctionProto.node
  node: { 5: "attribute" }, // NodeProto.attribute
  attribute: { 5: "tensor", 6: "graph", 10: "tensor", 11: "graph", 22: "sparse", 23: "sparse" }, // t, g, tensors, graphs, sparse_tensor(s)
  sparse: { 1: "tensor", 2: "tensor" }, // SparseTensorProto.values, .indices
  tensor: { 13: "entry" }, // TensorProto.external_data
  entry: {}, // StringStringEntryProto: key = 1, value = 2 (read as strings)
};
const DATA_LOCATION = 14; // TensorProto.data_location
const EXTERNAL = 1;

class Unknown extends Error {}

// "a.bin", "./a.bin" and "a//b.bin" name one file (the importer compares them normalised too)
export const normaliseLocation = (location) => location.split("/").filter((part) => part !== "" && part !== ".").join("/");

// -> {locations: [string, ...] in file order, distinct} or {locations: null, reason}
// `stillWanted`: called at each pause; when it answers false the reading stops (unknown).
export async function externalLocations(file, stillWanted = () => true) {
  try {
    return { locations: await scan(file, stillWanted) };
  } catch (error) {
    return { locations: null, reason: error instanceof Unknown ? error.message : "it could not be read" };
  }
}

async function scan(file, stillWanted) {
  const size = file.size;
  let window = new Uint8Array(0);
  let windowStart = 0;
  let read = 0;
  const decoder = new TextDecoder("utf-8");

  async function load(position, needed) {
    const near = position >= windowStart && position <= windowStart + window.length; // reading on, not past a skipped field
    const length = Math.min(size - position, Math.max(needed, near ? WINDOW : JUMP_WINDOW));
    read += length;
    if (read > READ_LIMIT) throw new Unknown(`more than ${READ_LIMIT / 1024 / 1024} MiB of it would have to be read`);
    window = new Uint8Array(await file.slice(position, position + length).arrayBuffer());
    windowStart = position;
  }
  // whether the bytes [position, position + count) are in the window (or as many as the file has)
  const has = (position, count) =>
    position >= windowStart && (position + count <= windowStart + window.length || windowStart + window.length === size);
  // a varint at `position` (within `end`): its value (inexact past 2^53: a tag or a length
  // that large is refused by its reader), and `next` set to the position after it
  let next = 0;
  function varint(position, end) {
    let value = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (position >= end) throw new Unknown("it is cut short");
      const at = position - windowStart;
      if (at < 0 || at >= window.length) throw new Unknown("it is cut short");
      const byte = window[at];
      position++;
      value += (byte & 0x7f) * scale;
      if (byte < 0x80) {
        next = position;
        return value;
      }
      scale *= 128;
    }
    throw new Unknown("a number in it is over ten bytes");
  }

  const found = new Map(); // normalised -> as written (the first spelling)
  const stack = [{ kind: "model", position: 0, end: size }];
  let fields = 0;
  while (stack.length) {
    const frame = stack[stack.length - 1];
    if (frame.position >= frame.end) {
      stack.pop();
      finish(frame, stack[stack.length - 1], found);
      continue;
    }
    if (++fields > MAX_FIELDS) throw new Unknown(`it has more than ${MAX_FIELDS.toLocaleString("en-US")} fields`);
    if (fields % YIELD_EVERY === 0) {
      await new Promise((resolve) => setTimeout(resolve, 0));
      if (!stillWanted()) throw new Unknown("another file was picked");
    }
    if (!has(frame.position, 20)) await load(frame.position, 20); // a tag and a varint
    const tag = varint(frame.position, frame.end);
    if (tag > 0xffffffff) throw new Unknown("it is not a model (a field number too large)");
    const field = Math.floor(tag / 8);
    const wire = tag % 8;
    if (field === 0) throw new Unknown("it is not a model (a field numbered 0)");
    let position = next;
    if (wire === 0) {
      const value = varint(position, frame.end);
      if (frame.kind === "tensor" && field === DATA_LOCATION) frame.dataLocation = value;
      position = next;
    } else if (wire === 1 || wire === 5) {
      position += wire === 1 ? 8 : 4;
    } else if (wire === 2) {
      const length = varint(position, frame.end);
      if (length > Number.MAX_SAFE_INTEGER) throw new Unknown("a length in it is too large");
      const start = next;
      position = start + length;
      if (position > frame.end) throw new Unknown("it is cut short (a length runs past its end)");
      const child = CHILDREN[frame.kind][field];
      if (child) {
        if (stack.length >= MAX_DEPTH) throw new Unknown(`it nests more than ${MAX_DEPTH} deep`);
        stack.push({ kind: child, position: start, end: position, locations: child === "tensor" ? [] : null, dataLocation: 0 });
      } else if (frame.kind === "entry" && (field === 1 || field === 2)) {
        if (length > MAX_STRING) throw new Unknown("an external data entry in it is too long");
        if (!has(start, length)) await load(start, length);
        const text = decoder.decode(window.subarray(start - windowStart, start - windowStart + length));
        if (field === 1) frame.key = text;
        else frame.value = text;
      }
    } else {
      throw new Unknown(`it is not a model (wire type ${wire})`);
    }
    if (position > frame.end) throw new Unknown("it is cut short");
    frame.position = position;
  }
  if (found.size > MAX_LOCATIONS) throw new Unknown(`it names more than ${MAX_LOCATIONS} files`);
  return [...found.values()];
}

function finish(frame, parent, found) {
  if (frame.kind === "entry" && parent && frame.key === "location" && typeof frame.value === "string") parent.locations.push(frame.value);
  if (frame.kind === "tensor" && frame.dataLocation === EXTERNAL) {
    for (const location of frame.locations) {
      const key = normaliseLocation(location);
      if (!found.has(key)) found.set(key, location);
      if (found.size > MAX_LOCATIONS) throw new Unknown(`it names more than ${MAX_LOCATIONS} files`);
    }
  }
}
