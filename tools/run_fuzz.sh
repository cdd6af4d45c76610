#!/usr/bin/env bash
# Runs one fuzz target for a given time: tools/run_fuzz.sh model|tensor SECONDS [libFuzzer flags...]
# Corpus and findings live in the ignored .cache/fuzz/ (tools/setup_fuzz.sh
# makes them). libFuzzer stops at the first input that lets anything but
# ModelImportError escape, runs longer than 10 s, or grows past 2 GiB, writes
# it to .cache/fuzz/findings/ and exits non-zero; this script exits with it.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: tools/run_fuzz.sh model|tensor SECONDS [flags...]}
seconds=${2:?usage: tools/run_fuzz.sh model|tensor SECONDS [flags...]}
shift 2
case "$target" in model|tensor) ;; *) echo "unknown target: $target" >&2; exit 64 ;; esac
[ -d ".cache/fuzz/corpus-$target" ] || bash tools/setup_fuzz.sh
mkdir -p .cache/fuzz/findings "$(pwd)/.cache/fuzz/work-$target"
exec .venv/bin/python "fuzz/fuzz_$target.py" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=262144 \
    -artifact_prefix=".cache/fuzz/findings/$target-" -print_final_stats=1 \
    "$@" ".cache/fuzz/work-$target" ".cache/fuzz/corpus-$target"
