// `visible`: text taken from a model as it may be shown. Shared by the page
// (through dom.js) and the graph worker (its boxes are sized for the text as
// shown).

// Text taken from a model, made safe to read: control characters (C0, C1) as
// \xNN (a tab as \x09), and the invisible format characters that change what
// is shown (bidirectional embeddings, overrides, isolates and marks, zero-width
// characters, line and paragraph separators, the BOM) as \uNNNN, so none is
// invisible and none reorders the text around it. For textContent only (el
// puts strings as text nodes): it escapes nothing for HTML.
const HIDDEN = /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g;
export const visible = (text) =>
  text === null || text === undefined ? "" : String(text).replace(HIDDEN, (c) => {
    const code = c.charCodeAt(0);
    return code < 0x100 ? "\\x" + code.toString(16).padStart(2, "0") : "\\u" + code.toString(16).padStart(4, "0");
  });
