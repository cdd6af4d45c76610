"""How onnxruntime takes a model's external weights: from its own file, or from
memory it is handed (issue 40: why gpt2_small's runtime stage is slower than
a session made by hand).

For one model with external data (default: .cache/validation-models/gpt2_small.onnx,
made by bench/validation_bench.py --models-only), each way in a fresh process,
median of ROUNDS, the data file in the page cache first:

- **path**: `InferenceSession(path)`: onnxruntime maps the data file itself;
- **handed over**: the model's bytes (external references kept) with every
  external initializer given as an `OrtValue` over a read-only `np.memmap` of
  the data file (`SessionOptions.add_external_initializers`), as the
  `runtime` stage gives the importer's mapped bytes;
- **shared**: the same values given one by one with `add_initializer` (which
  onnxruntime documents as used in place); the model's references then name
  an empty file in a folder of the bench's own, since onnxruntime checks that
  the file exists.

Each with onnxruntime's default graph optimizations, and again with
optimizations and pre-packing off (what is left is the hand-over itself).
Printed: the session's seconds and how much the process's resident memory
grew; a way onnxruntime refuses is printed with its message.

    .venv/bin/python bench/ort_handover_bench.py [MODEL]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
MODEL = REPO / ".cache" / "validation-models" / "gpt2_small.onnx"
ROUNDS = 3
WAYS = ("path", "handed over", "shared")


def resident_mib() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20


def session_seconds(model: Path, way: str, optimized: bool) -> dict[str, Any]:
    """One session made in this process: its seconds and resident growth, or onnxruntime's refusal."""
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx.external_data_helper import uses_external_data

    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    if not optimized:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.add_session_config_entry("session.disable_prepacking", "1")
    before = resident_mib()
    started = time.perf_counter()
    try:
        if way == "path":
            ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        else:
            proto = onnx.load(str(model), load_external_data=False)
            names, values = [], []
            files: dict[str, np.memmap[Any, np.dtype[np.uint8]]] = {}  # each data file mapped once, as the stage does
            for tensor in (t for t in proto.graph.initializer if uses_external_data(t)):
                entries = {entry.key: entry.value for entry in tensor.external_data}
                location = entries["location"]
                if location not in files:
                    files[location] = np.memmap(model.parent / location, dtype=np.uint8, mode="r")
                data = files[location]
                offset = int(entries.get("offset", 0))
                view = data[offset : offset + int(entries["length"])].view(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
                names.append(tensor.name)
                values.append(ort.OrtValue.ortvalue_from_numpy(view.reshape(tuple(tensor.dims))))
                if way == "shared":
                    for entry in tensor.external_data:
                        if entry.key == "location":
                            entry.value = "empty.data"
            if way == "shared":
                os.chdir(tempfile.mkdtemp())
                Path("empty.data").touch()
                for name, value in zip(names, values, strict=True):
                    options.add_initializer(name, value)
            else:
                options.add_external_initializers(names, values)
            ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as error:  # onnxruntime's refusal is the finding
        return {"refused": str(error).splitlines()[-1].rsplit("FAIL : ", 1)[-1][:200]}
    return {"seconds": time.perf_counter() - started, "resident_mib": resident_mib() - before}


def main(arguments: list[str]) -> int:
    if arguments and arguments[0] == "--one":
        print(json.dumps(session_seconds(Path(arguments[1]), arguments[2], arguments[3] == "optimized")))
        return 0
    model = Path(arguments[0]) if arguments else MODEL
    if not model.is_file():
        print(f"no {model}: make it with bench/validation_bench.py --models-only", file=sys.stderr)
        return 2
    for path in model.parent.glob(f"{model.stem}*.data"):
        path.read_bytes()  # into the page cache
    print(f"{model.name}: onnxruntime session creation, median of {ROUNDS} fresh processes")
    print("| way | default optimizations | optimizations and pre-packing off |")
    print("| --- | --- | --- |")
    for way in WAYS:
        cells = []
        for optimized in ("optimized", "plain"):
            command = [sys.executable, __file__, "--one", str(model), way, optimized]
            runs = [json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout) for _ in range(ROUNDS)]
            if "refused" in runs[0]:
                cells.append(f"refused: {runs[0]['refused']}")
                continue
            seconds = statistics.median(run["seconds"] for run in runs)
            cells.append(f"{seconds:.3f} s, +{statistics.median(run['resident_mib'] for run in runs):.0f} MiB")
        print(f"| {way} | {cells[0]} | {cells[1]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
