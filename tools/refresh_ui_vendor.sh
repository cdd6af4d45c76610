#!/usr/bin/env bash
# Refreshes the explorer's vendored JavaScript (service/ui/vendor/) from the
# package registry pip is configured with, at the pinned version below, so
# that the wheel carries every script the explorer runs and users need no
# build step.
#
# dagre.js: Netron's port of the dagre layered layout (MIT), an ES module
# with no DOM use, imported by the explorer's graph worker unmodified. It is
# taken from the netron wheel (`pip download netron==VERSION --no-deps`),
# whose SHA-256 is checked against the pin below. To move to a new version,
# change both, run this script, and commit the files it wrote. The wheel has
# no licence file: netron-LICENSE.md is kept in the repository.
#
# Usage: bash tools/refresh_ui_vendor.sh   (needs pip; writes only service/ui/vendor/)
set -euo pipefail
cd "$(dirname "$0")/.."

NETRON_VERSION=9.3.3
NETRON_WHEEL_SHA256=37e94827e9eddadc27b94b70aacdd531436ce56b467dcba3c52144709e3612bb

VENDOR=service/ui/vendor
PYTHON=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: "netron==$NETRON_VERSION" -d "$work"
wheel=$(ls "$work"/netron-"$NETRON_VERSION"-*.whl)
actual=$(sha256sum "$wheel" | cut -d' ' -f1)
if [ "$actual" != "$NETRON_WHEEL_SHA256" ]; then
    echo "error: $wheel: sha256 $actual, expected $NETRON_WHEEL_SHA256" >&2
    exit 1
fi
"$PYTHON" -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("netron/dagre.js"))' "$wheel" >"$VENDOR/dagre.js"
{
    echo "netron $NETRON_VERSION (PyPI wheel), netron/dagre.js; MIT (netron-LICENSE.md)"
    echo "source: https://github.com/lutzroeder/netron (source/dagre.js), a port of https://github.com/dagrejs/dagre"
    echo "wheel sha256: $NETRON_WHEEL_SHA256"
    echo "sha256 of dagre.js: $(sha256sum "$VENDOR/dagre.js" | cut -d' ' -f1)"
} >"$VENDOR/VERSIONS.txt"
echo "refreshed $VENDOR:"
cat "$VENDOR/VERSIONS.txt"
