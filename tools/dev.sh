#!/usr/bin/env bash
# Sets everything up on a fresh machine, then runs the whole test suite
# (`bash tools/dev.sh test`) or the service on the bundled samples
# (`bash tools/dev.sh serve`). Idempotent: a second run reuses .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return
        fi
    done
    echo "error: Python 3.11 or newer is needed" >&2
    exit 1
}

setup() {
    if [ ! -x .venv/bin/python ]; then
        "$(pick_python)" -m venv .venv
    fi
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
    .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test,dev]'
}

run_tests() {
    setup
    echo "== ruff"
    .venv/bin/ruff check .
    echo "== mypy --strict"
    .venv/bin/mypy
    echo "== pytest"
    .venv/bin/python -m pytest "$@"
}

case "${1:-test}" in
    setup) setup ;;
    test) shift || true; run_tests "$@" ;;
    serve) shift; setup; exec .venv/bin/python -m service "$@" ;;
    *) echo "usage: bash tools/dev.sh [setup|test [pytest args]|serve [service args]]" >&2; exit 64 ;;
esac
