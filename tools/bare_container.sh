#!/usr/bin/env bash
# The README's two commands as a stranger runs them: in a fresh container of
# the bare base image (tools/base_image.sh: Debian minbase with python3, pip,
# venv and the CA bundle only; no compiler, no browser, no curl, no git), on
# this checkout's committed HEAD copied in (the files git tracks, as a
# download of the repository has them: no .git, and no git installed), as
# root, under root's home (/root/onnx-import-service; /root is private, mode
# 0700, so a worker that leaves root for its own uid sees none of it). Nothing
# of this machine is mounted: a tar of that commit is copied into the
# container before it starts (docker cp), and nothing else: no pip cache,
# wheel folder or pip configuration; pip and apt use only the index settings
# the base image carries.
#
# Stages, each timed: the container's policy is shown (its seccomp mode,
# capabilities, and whether it may make namespaces), the copy is unpacked,
# `bash tools/dev.sh test` runs (as root it installs what the suite needs:
# Chromium, Playwright's driver libraries, curl), then the README walkthrough
# (`tools/readme_walkthrough.py`: `bash tools/dev.sh serve` with its defaults
# from the copy's root, every example checked).
#
#   bash tools/bare_container.sh                       # Docker's default seccomp profile and capabilities (.ci/run's stage)
#   bash tools/bare_container.sh --policy unconfined   # seccomp=unconfined, default capabilities: workers make namespaces
#   bash tools/bare_container.sh --policy default --only 'tests/service/process/test_worker_walls.py tests/checks/test_check_worker_walls.py'
#
#   exit 0: both passed; 1: one failed; 2: cannot run here
#
# --policy default (the default) adds no --privileged, --cap-add or
# --security-opt: the engine's default seccomp profile (Docker's refuses
# unshare, mount and setns without CAP_SYS_ADMIN, which its default
# capabilities lack, so workers have no namespaces, no minimal root, and
# leave root for uid 65534 on the host's file system) and its default
# capability set. --policy unconfined runs with seccomp=unconfined and the
# same capabilities: workers may make user namespaces, as on a host.
# --only 'PATHS' runs `bash tools/dev.sh setup` (.venv, as `test` makes it),
# then pytest on those paths alone (-rs: each skip's reason), in one process,
# and no walkthrough: a quick look at one policy's effect on a few tests.
#
# On this 2-core machine, shared: the whole run 13 to 17 minutes under either
# policy (pytest's main pass 9.5 to 14 minutes of it); --only on the four
# sandbox test modules (worker walls, check-worker walls, seccomp, sandbox),
# about 80 s.
#
# Uncommitted changes are not in the container: commit first. Environment:
# DOCKER (docker), BARE_TIMEOUT (seconds, 3000), BARE_POLICY (default).
set -euo pipefail
cd "$(dirname "$0")/.."

DOCKER=${DOCKER:-docker}
TIMEOUT=${BARE_TIMEOUT:-3000}
NAME="onnx-bare-$$"
POLICY=${BARE_POLICY:-default}
ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --policy) POLICY=${2:-}; shift 2 ;;
        --policy=*) POLICY=${1#--policy=}; shift ;;
        --only) ONLY=${2:-}; shift 2 ;;
        --only=*) ONLY=${1#--only=}; shift ;;
        *) echo "bare_container.sh: unknown argument $1 (--policy default|unconfined, --only 'PATHS')" >&2; exit 2 ;;
    esac
done
case "$POLICY" in
    default) policy_options=() ;;
    unconfined) policy_options=(--security-opt seccomp=unconfined) ;;
    *) echo "bare_container.sh: --policy is default or unconfined, not '$POLICY'" >&2; exit 2 ;;
esac

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
git archive --format=tar --output="$work/checkout.tar" HEAD
chmod -R a+rX "$work"
say "running the README's commands on $(git rev-parse --short HEAD) in a fresh container of $image (policy: $POLICY${ONLY:+; pytest on $ONLY only})"

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
# What the container lets its root do: the walls of the workers depend on it.
policy() {
    grep -E "^(Seccomp|CapEff|CapBnd):" /proc/self/status
    if unshare --user --map-root-user --mount --pid --fork true 2>/dev/null; then
        echo "namespaces: a user namespace with mount and PID namespaces may be made"
    else
        echo "namespaces: refused (unshare)"
    fi
}
unpack() { mkdir -p /root/onnx-import-service && tar -xf /checkout.tar -C /root/onnx-import-service; }
stage "policy" policy
stage "copy the repository in" unpack || exit 1
cd /root/onnx-import-service
result=0
if [ -n "${BARE_ONLY:-}" ]; then
    stage "bash tools/dev.sh setup" bash tools/dev.sh setup || exit 1
    # shellcheck disable=SC2086  # the paths, split
    stage "pytest $BARE_ONLY" .venv/bin/python -m pytest -q -rs -p no:cacheprovider $BARE_ONLY || result=1
    exit $result
fi
stage "bash tools/dev.sh test" bash tools/dev.sh test || result=1
stage "README walkthrough" .venv/bin/python tools/readme_walkthrough.py . || result=1
exit $result
'
set +e
"$DOCKER" create --name "$NAME" --init --shm-size=1g "${policy_options[@]}" \
    -e CI=true -e BARE_ONLY="$ONLY" "$image" bash -c "$inside" >/dev/null &&
    "$DOCKER" cp "$work/checkout.tar" "$NAME:/checkout.tar" &&
    timeout "$TIMEOUT" "$DOCKER" start --attach "$NAME"
status=$?
set -e
if [ "$status" = 124 ]; then
    say "the stage ran past ${TIMEOUT} s"
fi
say "exit $status after $((SECONDS - started)) s in all"
[ "$status" = 0 ] || exit 1
