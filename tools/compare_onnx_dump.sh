#!/usr/bin/env bash
# Diff the importer's structural dump against the onnx reference writer.
#
# This script owns the comparison step of the importer check
# (docs/import-rules.md §8): for one model file, or every *.onnx below a
# folder, it runs
#   importer side:   $IMPORTER_CMD MODEL        (default: PY -m importer dump)
#   reference side:  PY tools/onnx_dump.py      (one --batch process for all)
# and compares the two `onnx-dump/1` texts byte for byte.
#
# Usage: tools/compare_onnx_dump.sh MODEL.onnx|FOLDER
#
# Per model:
#   both dump, same bytes           -> matched
#   both refuse (exit 2)            -> refused (agreement; not a failure)
#   anything else                   -> differ: "DIFFER <path>: <why>" and, when
#                                      both dumped, the first DIFF_LINES lines of
#                                      `diff -u reference importer`
# Last line: "matched M of N (D differ, R refused)". Exit 0 when nothing
# differs, 1 when something does, 2 on usage errors or when no model is found.
#
# Environment:
#   IMPORTER_CMD  importer command, split on whitespace, run from the repo root
#                 with the absolute model path appended (default
#                 "PY -m importer dump"). IMPORTER_CMD="PY tools/onnx_dump.py"
#                 compares the reference writer with itself.
#   JOBS          importer processes run in parallel (default: CPU count)
#   TIMEOUT       seconds allowed per importer run (default 300; needs timeout(1))
#   DIFF_LINES    lines of diff shown per differing model (default 40)
# PY is the repo's .venv/bin/python when present, else python3.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [[ -x "$REPO/.venv/bin/python" ]]; then
    PY="$REPO/.venv/bin/python"
else
    PY="python3"
fi

if [[ $# -ne 1 ]]; then
    echo "usage: $0 MODEL.onnx|FOLDER" >&2
    exit 2
fi
target="$1"
if [[ "$target" != /* ]]; then
    target="$PWD/$target"
fi

models=()
if [[ -d "$target" ]]; then
    mapfile -d '' models < <(find "$target" -type f -name '*.onnx' -print0 | LC_ALL=C sort -z)
elif [[ -f "$target" ]]; then
    models=("$target")
else
    echo "$0: no such file or folder: $1" >&2
    exit 2
fi
total=${#models[@]}
if [[ $total -eq 0 ]]; then
    echo "$0: no *.onnx file under $1" >&2
    exit 2
fi

export IMPORTER_CMD="${IMPORTER_CMD:-$PY -m importer dump}"
export TIMEOUT="${TIMEOUT:-300}"
JOBS="${JOBS:-$(nproc 2>/dev/null || echo 4)}"
DIFF_LINES="${DIFF_LINES:-40}"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/compare_onnx_dump.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export WORK
mkdir -p "$WORK/ref" "$WORK/imp"
printf '%s\n' "${models[@]}" >"$WORK/list.txt"

# Reference side: one process for every model; <i>.json or <i>.err per entry.
"$PY" "$REPO/tools/onnx_dump.py" --batch "$WORK/list.txt" --out-dir "$WORK/ref" \
    >/dev/null 2>"$WORK/ref.log" || true

# Importer side: one process per model, JOBS at a time.
# shellcheck disable=SC2329  # invoked through xargs below
run_one() {
    local i="$1" model="$2" rc=0
    local -a cmd
    read -r -a cmd <<<"$IMPORTER_CMD"
    if command -v timeout >/dev/null 2>&1; then
        cmd=(timeout "$TIMEOUT" "${cmd[@]}")
    fi
    "${cmd[@]}" "$model" >"$WORK/imp/$i.json" 2>"$WORK/imp/$i.err" </dev/null || rc=$?
    echo "$rc" >"$WORK/imp/$i.rc"
}
export -f run_one
cd "$REPO"
for i in "${!models[@]}"; do
    printf '%s\0%s\0' "$i" "${models[$i]}"
done | xargs -0 -n 2 -P "$JOBS" bash -c 'run_one "$@"' _

matched=0
differ=0
refused=0
for i in "${!models[@]}"; do
    model="${models[$i]}"
    rc="$(cat "$WORK/imp/$i.rc" 2>/dev/null || echo missing)"
    if [[ -f "$WORK/ref/$i.json" ]]; then
        if [[ "$rc" == 0 ]] && cmp -s "$WORK/ref/$i.json" "$WORK/imp/$i.json"; then
            matched=$((matched + 1))
            continue
        fi
        differ=$((differ + 1))
        if [[ "$rc" == 0 ]]; then
            echo "DIFFER $model: dumps differ"
            diff -u --label reference --label importer \
                "$WORK/ref/$i.json" "$WORK/imp/$i.json" | head -n "$DIFF_LINES" || true
        elif [[ "$rc" == 2 ]]; then
            echo "DIFFER $model: importer refused, reference dumped: $(head -c 500 "$WORK/imp/$i.err")"
        elif [[ "$rc" == 124 ]]; then
            echo "DIFFER $model: importer timed out after ${TIMEOUT}s"
        else
            echo "DIFFER $model: importer exited $rc: $(tail -n 3 "$WORK/imp/$i.err" | head -c 1000)"
        fi
    else
        ref_msg="$(head -c 500 "$WORK/ref/$i.err" 2>/dev/null || echo 'no output')"
        if [[ "$rc" == 2 ]]; then
            refused=$((refused + 1))
            continue
        fi
        differ=$((differ + 1))
        if [[ "$rc" == 0 ]]; then
            echo "DIFFER $model: importer dumped, reference refused: $ref_msg"
        else
            echo "DIFFER $model: importer exited $rc, reference refused: $ref_msg"
        fi
    fi
done

echo "matched $matched of $total ($differ differ, $refused refused)"
if [[ $differ -gt 0 ]]; then
    exit 1
fi
exit 0
