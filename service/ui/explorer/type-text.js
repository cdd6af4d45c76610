// One ONNX type as text ("float[1, 3, ?]", "sequence<int64[?]>", ...), shared
// by the page (summary.js) and the graph worker (graph-worker.js): `sep`
// separates dims and map types (", " in the page's tables, "," in the graph's
// edge labels).

export function typeText(type, sep = ", ") {
  if (!type) return "?";
  if (type.kind === "tensor" || type.kind === "sparse_tensor") {
    const shape = type.shape === null || type.shape === undefined ? "?" : "[" + type.shape.map((d) => (d === null ? "?" : d)).join(sep) + "]";
    return (type.kind === "sparse_tensor" ? "sparse " : "") + type.elem_type + shape;
  }
  if (type.kind === "sequence" || type.kind === "optional") return `${type.kind}<${typeText(type.elem_type, sep)}>`;
  if (type.kind === "map") return `map<${type.key_type}${sep}${typeText(type.value_type, sep)}>`;
  return type.kind + (type.name ? ":" + type.name : "");
}
