#!/usr/bin/env bash
# Runs one fuzz target for a given time: tools/run_fuzz.sh model|tensor SECONDS [libFuzzer flags...]
# Corpus and findings live in the ignored .cache/fuzz/ (tools/setup_fuzz.sh
# makes them). libFuzzer stops at the first input that lets anything but
# ModelImportError escape, runs longer than 10 s, or grows past 2 GiB, writes
# it to .cache/fuzz/findings/ and exits non-zero; this script exits with it.
#
# Long runs: pass -fork=1 (libFuzzer runs the target in child processes and
# restarts them). The instrumented process's own RSS creeps up over tens of
# minutes while the importer's does not (driving the same harness with the
# same inputs uninstrumented stays flat), so a single process eventually trips
# the 2 GiB limit for no fault of the code under test; fork mode keeps that
# out of a campaign while a real per-input blow-up is still reported.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: tools/run_fuzz.sh model|tensor SECONDS [flags...]}
seconds=${2:?usage: tools/run_fuzz.sh model|tensor SECONDS [flags...]}
shift 2
case "$target" in model|tensor) ;; *) echo "unknown target: $target" >&2; exit 64 ;; esac
[ -d ".cache/fuzz/corpus-$target" ] || bash tools/setup_fuzz.sh
mkdir -p .cache/fuzz/findings "$(pwd)/.cache/fuzz/work-$target"
# atheris instruments Python bytecode: the target runs on a pure copy of
# importer/ (without the compiled modules an editable compiled install leaves
# beside the sources), first on its path; fuzz/runner.py checks it got it.
pure="$(pwd)/.cache/fuzz/pure-$target"
bash tools/pure_copy.sh "$pure"
# libFuzzer's fork mode runs argv[0] as a program: give it one that runs the target.
runner=".cache/fuzz/run-$target"
printf '#!/bin/sh\nPYTHONPATH="%s" IMPORTER_EXPECT_BUILD=pure FUZZ_RUNNER="$0" exec "%s" "%s" "$@"\n' \
    "$pure" "$(pwd)/.venv/bin/python" "$(pwd)/fuzz/fuzz_$target.py" > "$runner"
chmod +x "$runner"
# A child of this shell, not an exec: a process keeps the peak RSS of what it
# was before each exec (getrusage's ru_maxrss), which libFuzzer reads as the
# target's, so a fuzzer exec'd from a large caller (a test process holding
# gigabytes) would stop at once on -rss_limit_mb. Its status is this script's.
"$runner" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=262144 \
    -artifact_prefix=".cache/fuzz/findings/$target-" -print_final_stats=1 \
    "$@" ".cache/fuzz/work-$target" ".cache/fuzz/corpus-$target"
