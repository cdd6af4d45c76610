# Generator of the ONNX backend test data used by the importer sweep.
#
# This module owns the cache folder of test models (default
# <repo>/.cache/onnx-backend, ignored by git) and its manifest. It fills the
# folder from the installed onnx package:
#
#   node/<case>/...      onnx.backend.test.case.node.collect_testcases(), written
#                        by onnx's own cmd_tools.generate_data (model.onnx and
#                        test_data_set_N/input_J.pb, output_J.pb)
#   simple/, light/, pytorch-converted/, pytorch-operator/, real/
#                        copied from the wheel's onnx/backend/test/data
#
# and writes, inside the folder (paths relative to it, '/'-separated, sorted):
#
#   models.txt           every *.onnx file, one per line
#   tensors.txt          every .pb file that holds a TensorProto, one per line
#   non_tensors.txt      every other .pb file (Sequence/Map/Optional protos)
#   manifest.json        {"format": "onnx-backend-manifest/1", "onnx_version",
#                         "numpy_version", "models": [path],
#                         "tensor_files": [PB], "non_tensor_files": [PB],
#                         "unmatched_files": [path], "counts": {...}}
#                        PB = {"path", "model", "role": "input"|"output",
#                              "index": int, "name": str,
#                              "kind": the TypeProto member of that graph
#                                      input/output ("tensor_type", ...)}
#   .stamp.json          onnx/numpy/generator versions of a complete folder
#
# A .pb file is classified by the type of the graph input/output it belongs to
# (test_data_set_N/input_J.pb -> graph.input[J] of ../model.onnx;
# light/light_X_output_J.pb -> graph.output[J] of light_X.onnx): tensor_type
# means a TensorProto, anything else another proto. The list files work as
# `tools/onnx_dump.py --batch` / `--tensor-batch` inputs (relative paths there
# are resolved against the list file's folder).
#
# Usage: gen_backend_data.py [--out DIR] [--force]
# A folder whose stamp matches the installed versions is left alone (fast);
# otherwise it is rebuilt in DIR.partial and swapped in.
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
import types
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx.backend.test.case.node as node_cases
from cache_lock import cache_lock
from onnx.backend.test import cmd_tools

GENERATOR_VERSION = 1
MANIFEST_FORMAT = "onnx-backend-manifest/1"
STAMP = ".stamp.json"
MARKER = ".onnx-backend-cache"  # present in every folder this script builds

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / ".cache" / "onnx-backend"
WHEEL_DATA = Path(cmd_tools.DATA_DIR)

_DATA_SET_PB = re.compile(r"^(input|output)_(\d+)\.pb$")
_LIGHT_PB = re.compile(r"^(light_.+)_(input|output)_(\d+)\.pb$")


def _stamp() -> dict[str, Any]:
    return {
        "generator": GENERATOR_VERSION,
        "onnx_version": onnx.__version__,
        "numpy_version": np.__version__,
    }


def _is_complete(out: Path) -> bool:
    try:
        current = json.loads((out / STAMP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(current == _stamp() and (out / "manifest.json").is_file())


def _generate_node_cases(out: Path) -> None:
    """Write the node test cases exactly as onnx's cmd_tools.generate_data does.

    generate_data writes whatever `model_test.collect_testcases()` returns; it
    is handed the node collector instead of the model one for the duration.
    """
    namespace = vars(cmd_tools)
    saved = namespace["model_test"]
    namespace["model_test"] = types.SimpleNamespace(collect_testcases=node_cases.collect_testcases)
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            cmd_tools.generate_data(argparse.Namespace(output=str(out)))
    finally:
        namespace["model_test"] = saved


def _copy_wheel_data(out: Path) -> None:
    for entry in sorted(WHEEL_DATA.iterdir()):
        if entry.name == "node" or not entry.is_dir():
            continue  # node cases are generated from code
        shutil.copytree(entry, out / entry.name)


def _slot(pb: Path) -> tuple[Path, str, int] | None:
    """(model file, "input"/"output", index) a .pb file belongs to."""
    m = _DATA_SET_PB.match(pb.name)
    if m and pb.parent.name.startswith("test_data_set_"):
        return pb.parent.parent / "model.onnx", m.group(1), int(m.group(2))
    m = _LIGHT_PB.match(pb.name)
    if m:
        return pb.parent / f"{m.group(1)}.onnx", m.group(2), int(m.group(3))
    return None


def _manifest(out: Path) -> dict[str, Any]:
    def rel(p: Path) -> str:
        return p.relative_to(out).as_posix()

    models = sorted(out.rglob("*.onnx"), key=rel)
    graphs: dict[Path, onnx.GraphProto] = {}
    tensor_files: list[dict[str, Any]] = []
    non_tensor_files: list[dict[str, Any]] = []
    unmatched: list[str] = []
    for pb in sorted(out.rglob("*.pb"), key=rel):
        slot = _slot(pb)
        if slot is None or not slot[0].is_file():
            unmatched.append(rel(pb))
            continue
        model_path, role, index = slot
        if model_path not in graphs:
            graphs[model_path] = onnx.load(str(model_path), format="protobuf", load_external_data=False).graph
        values = graphs[model_path].input if role == "input" else graphs[model_path].output
        if index >= len(values):
            unmatched.append(rel(pb))
            continue
        kind = values[index].type.WhichOneof("value")
        entry = {
            "path": rel(pb),
            "model": rel(model_path),
            "role": role,
            "index": index,
            "name": values[index].name,
            "kind": kind,
        }
        (tensor_files if kind == "tensor_type" else non_tensor_files).append(entry)

    def group_counts(paths: list[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in paths:
            group = p.split("/", 1)[0]
            counts[group] = counts.get(group, 0) + 1
        return dict(sorted(counts.items()))

    model_paths = [rel(p) for p in models]
    return {
        "format": MANIFEST_FORMAT,
        "onnx_version": onnx.__version__,
        "numpy_version": np.__version__,
        "models": model_paths,
        "tensor_files": tensor_files,
        "non_tensor_files": non_tensor_files,
        "unmatched_files": unmatched,
        "counts": {
            "models": len(model_paths),
            "tensor_files": len(tensor_files),
            "non_tensor_files": len(non_tensor_files),
            "unmatched_files": len(unmatched),
            "models_by_group": group_counts(model_paths),
            "tensor_files_by_group": group_counts([e["path"] for e in tensor_files]),
            "non_tensor_files_by_group": group_counts([e["path"] for e in non_tensor_files]),
        },
    }


def _write_lines(path: Path, lines: list[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def _write_manifest(out: Path) -> dict[str, Any]:
    manifest = _manifest(out)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _write_lines(out / "models.txt", manifest["models"])
    _write_lines(out / "tensors.txt", [e["path"] for e in manifest["tensor_files"]])
    _write_lines(out / "non_tensors.txt", [e["path"] for e in manifest["non_tensor_files"]])
    return manifest


def _remove_built(folder: Path) -> None:
    """Remove a folder this script built (it carries MARKER); refuse others."""
    if not folder.exists():
        return
    if not (folder / MARKER).is_file():
        raise SystemExit(f"{folder} exists but was not made by {Path(__file__).name}; remove it or choose another --out")
    shutil.rmtree(folder)


def build(out: Path, force: bool = False) -> dict[str, Any]:
    """Make `out` a complete cache folder; return its manifest (one process at a time)."""
    with cache_lock(out):
        return _build(out, force)


def _build(out: Path, force: bool) -> dict[str, Any]:
    if not force and _is_complete(out):
        manifest: dict[str, Any] = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        return manifest
    if out.exists() and any(out.iterdir()) and not (out / MARKER).is_file():
        raise SystemExit(f"{out} is not empty and was not made by {Path(__file__).name}; remove it or choose another --out")
    partial = out.with_name(out.name + ".partial")
    _remove_built(partial)
    partial.mkdir(parents=True)
    (partial / MARKER).write_text("built by tools/gen_backend_data.py\n")
    _copy_wheel_data(partial)
    _generate_node_cases(partial)
    manifest = _write_manifest(partial)
    (partial / STAMP).write_text(json.dumps(_stamp(), sort_keys=True) + "\n")
    if out.exists():
        old = out.with_name(out.name + ".old")
        _remove_built(old)
        out.rename(old)
        partial.rename(out)
        shutil.rmtree(old)
    else:
        partial.rename(out)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate the ONNX backend test data into a cache folder.")
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="cache folder (default: %(default)s)",
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if the folder is complete")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    start = time.monotonic()
    fresh = args.force or not _is_complete(out)
    manifest = build(out, force=args.force)
    counts = manifest["counts"]
    state = "generated" if fresh else "up to date"
    print(f"{out}: {state} in {time.monotonic() - start:.1f}s (onnx {onnx.__version__})")
    print(
        f"models {counts['models']}, tensor .pb {counts['tensor_files']}, "
        f"non-tensor .pb {counts['non_tensor_files']}, "
        f"unmatched .pb {counts['unmatched_files']}"
    )
    for key in (
        "models_by_group",
        "tensor_files_by_group",
        "non_tensor_files_by_group",
    ):
        print(f"  {key}: {json.dumps(counts[key], sort_keys=True)}")
    if counts["unmatched_files"]:
        print("unmatched .pb files (see manifest.json):", file=sys.stderr)
        for path in manifest["unmatched_files"]:
            print(f"  {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
