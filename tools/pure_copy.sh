#!/usr/bin/env bash
# Makes FOLDER/importer a pure-Python copy of the checkout's importer/ (its
# sources and package data, without the compiled modules an editable compiled
# install leaves beside them), replacing what FOLDER held. Put FOLDER first on
# PYTHONPATH (with PYTHONSAFEPATH=1) to run the pure build from a compiled
# checkout: tools/dev.sh (the importer's tests), tools/run_fuzz.sh (atheris
# sees only bytecode) and bench/run.py use it.
# Usage: bash tools/pure_copy.sh FOLDER
set -euo pipefail
folder=${1:?usage: tools/pure_copy.sh FOLDER}
cd "$(dirname "$0")/.."
rm -rf "$folder"
mkdir -p "$folder"
cp -R importer "$folder/"
find "$folder" \( -name '*.so' -o -name '*.pyd' -o -name __pycache__ \) -prune -exec rm -rf {} +
