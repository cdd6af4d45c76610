// Layouts kept in the browser's storage (IndexedDB, this origin's), so that
// reopening a model draws it at once instead of laying it out again. Used by
// the graph worker, and only once the model's graph document has loaded:
// what is kept is never shown to a caller the service did not let read the
// model. A key names the model by its id (the SHA-256 of its bytes: a model
// never changes under its id), the layout code's version, and the view
// (graph path, page, weights folded, nodes open). The KEEP most recently
// used layouts are kept; storage refused or failing (a private window, a
// full disk) only means layouts are not kept.

const DATABASE = "onnx-explorer-layouts";
const STORE = "layouts";
const KEEP = 48;

let opening = null;

function database() {
  if (!opening) {
    opening = new Promise((resolve) => {
      let request;
      try {
        request = indexedDB.open(DATABASE, 1);
      } catch {
        return resolve(null);
      }
      request.onupgradeneeded = () => request.result.createObjectStore(STORE, { keyPath: "key" }).createIndex("used", "used");
      request.onsuccess = () => resolve(request.result);
      request.onerror = () => resolve(null);
      request.onblocked = () => resolve(null);
    });
  }
  return opening;
}

function done(request) {
  return new Promise((resolve) => {
    request.onsuccess = () => resolve(request.result);
    request.onerror = () => resolve(null);
  });
}

export async function storedLayout(key) {
  const db = await database();
  if (!db) return null;
  try {
    const found = await done(db.transaction(STORE, "readwrite").objectStore(STORE).get(key));
    if (!found) return null;
    db.transaction(STORE, "readwrite").objectStore(STORE).put(Object.assign(found, { used: Date.now() }));
    return found.layout;
  } catch {
    return null;
  }
}

export async function storeLayout(key, layout) {
  const db = await database();
  if (!db) return;
  try {
    const store = db.transaction(STORE, "readwrite").objectStore(STORE);
    await done(store.put({ key, used: Date.now(), layout }));
    const index = db.transaction(STORE, "readwrite").objectStore(STORE).index("used");
    const count = await done(index.count());
    let extra = (count || 0) - KEEP;
    if (extra <= 0) return;
    const cursor = index.openCursor(); // oldest first
    cursor.onsuccess = () => {
      const at = cursor.result;
      if (!at || extra-- <= 0) return;
      at.delete();
      at.continue();
    };
  } catch {
    // not kept: the next opening lays it out again
  }
}
