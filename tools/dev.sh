#!/usr/bin/env bash
# Sets everything up on a fresh machine, then runs the whole test suite
# (`bash tools/dev.sh test`) or the service on the bundled samples
# (`bash tools/dev.sh serve`). Idempotent: a second run reuses .venv.
set -euo pipefail
cd "$(dirname "$0")/.."

pick_python() {
    for candidate in python3.11 python3.12 python3.13 python3; do
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

# The exporter tests need torch (and onnxscript for its dynamo exporter). Only a
# CPU wheel already on this machine's pip find-links is taken: where there is
# none, those tests skip with the reason, rather than pip pulling a multi-GB
# CUDA build from the index.
install_exporters() {
    if .venv/bin/python -c 'import torch, onnxscript' 2>/dev/null; then
        return
    fi
    for folder in ${PIP_FIND_LINKS:-} /opt/wheels; do
        if compgen -G "$folder/torch-2.13.0*.whl" >/dev/null; then
            .venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0 onnxscript==0.7.2
            return
        fi
    done
    echo "note: no local torch 2.13.0 wheel; the exporter tests will be skipped"
}

# The explorer's browser tests drive Debian's Chromium (/usr/bin/chromium) with
# Playwright (which never downloads a browser of its own). As root, with apt, it
# is installed when missing; elsewhere, or if that fails, those tests skip with
# the reason.
install_chromium() {
    if [ -x /usr/bin/chromium ]; then
        return
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing Debian's chromium for the browser tests"
        if timeout 300 apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
            return
        fi
    fi
    echo "note: no /usr/bin/chromium (Debian's chromium, installed as root); the browser tests will be skipped"
}

run_tests() {
    setup
    install_exporters
    install_chromium
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
