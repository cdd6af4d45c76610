#!/usr/bin/env bash
# Installs what the fuzz targets need (atheris, in the project's .venv) and
# builds their seed corpora from the ONNX backend test data, into the ignored
# .cache/fuzz/: corpus-model (every model.onnx up to 64 KiB) and corpus-tensor
# (every TensorProto .pb file up to 64 KiB). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || bash tools/dev.sh setup
.venv/bin/python -m pip install --quiet --disable-pip-version-check 'atheris==3.0.0'
.venv/bin/python tools/gen_backend_data.py >/dev/null
.venv/bin/python - <<'PY'
import json, shutil
from pathlib import Path

backend = Path(".cache/onnx-backend")
manifest = json.loads((backend / "manifest.json").read_text())
for target, files in (("model", manifest["models"]), ("tensor", [entry["path"] for entry in manifest["tensor_files"]])):
    corpus = Path(".cache/fuzz") / f"corpus-{target}"
    corpus.mkdir(parents=True, exist_ok=True)
    copied = 0
    for index, relative in enumerate(files):
        source = backend / relative
        if source.stat().st_size <= 64 * 1024:
            destination = corpus / f"seed-{index:05d}"
            if not destination.exists():
                shutil.copyfile(source, destination)
            copied += 1
    print(f"{corpus}: {copied} seeds")
PY
mkdir -p .cache/fuzz/findings
