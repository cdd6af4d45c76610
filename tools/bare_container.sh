#!/usr/bin/env bash
# The README's two commands as a stranger runs them: in a fresh container of
# the bare base image (tools/base_image.sh: Debian minbase with python3, pip,
# venv and the CA bundle only; no compiler, no browser, no curl, no git), on a
# fresh clone of this checkout's committed HEAD. Nothing of this machine is
# mounted but a git bundle of that commit (read-only): no pip cache, wheel
# folder or pip configuration; pip and apt use only the index settings the
# base image carries.
#
# Stages, each timed: git is installed (a new user clones), the bundle is
# cloned, `bash tools/dev.sh test` runs (as root it installs what the suite
# needs: Chromium, Playwright's driver libraries, curl), then the README
# walkthrough (`tools/readme_walkthrough.py`: `bash tools/dev.sh serve` with
# its defaults from the clone's root, every example checked).
#
#   bash tools/bare_container.sh      # exit 0: both passed; 1: one failed; 2: cannot run here
#
# Uncommitted changes are not in the container: commit first. Environment:
# DOCKER (docker), BARE_TIMEOUT (seconds, 3000).
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=${DOCKER:-docker}
TIMEOUT=${BARE_TIMEOUT:-3000}
NAME="onnx-bare-$$"

say() { echo "bare_container.sh: $*"; }

if ! timeout 20 "$DOCKER" info >/dev/null 2>&1; then
    say "no container engine answers here: the bare-container stage cannot run"
    exit 2
fi
started=$SECONDS
set +e
image=$(bash tools/base_image.sh)
status=$?
set -e
if [ "$status" = 2 ]; then
    say "the bare base image cannot be built here (tools/base_image.sh said why): the bare-container stage cannot run"
    exit 2
elif [ "$status" != 0 ]; then
    say "tools/base_image.sh failed"
    exit 1
fi
say "base image $image ready after $((SECONDS - started)) s"

work=$(mktemp -d)
cleanup() {
    "$DOCKER" rm -f "$NAME" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
git bundle create --quiet "$work/checkout.bundle" HEAD
chmod -R a+rX "$work"
say "running the README's commands on $(git rev-parse --short HEAD) in a fresh container of $image"

# What runs inside, as a new user on a bare Debian would (as root there).
# shellcheck disable=SC2016  # expanded inside the container
inside='
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive
stage() {  # stage NAME COMMAND...: run it, print its wall time and status
    local name=$1 began=$SECONDS status
    shift
    echo "== bare: $name"
    "$@"
    status=$?
    echo "== bare: $name: exit $status after $((SECONDS - began)) s"
    return $status
}
get_git() { apt-get update -qq && apt-get install -y -qq --no-install-recommends git >/dev/null; }
stage "install git" get_git || exit 1
stage "clone" git -c advice.detachedHead=false clone --quiet /bundle/checkout.bundle /srv/onnx-import-service || exit 1
cd /srv/onnx-import-service
result=0
stage "bash tools/dev.sh test" bash tools/dev.sh test || result=1
stage "README walkthrough" .venv/bin/python tools/readme_walkthrough.py . || result=1
exit $result
'
set +e
timeout "$TIMEOUT" "$DOCKER" run --rm --name "$NAME" --init --shm-size=1g \
    --mount "type=bind,source=$work,target=/bundle,readonly" \
    -e CI=true "$image" bash -c "$inside"
status=$?
set -e
if [ "$status" = 124 ]; then
    say "the stage ran past ${TIMEOUT} s"
fi
say "exit $status after $((SECONDS - started)) s in all"
[ "$status" = 0 ] || exit 1
