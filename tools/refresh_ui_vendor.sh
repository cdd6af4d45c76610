#!/usr/bin/env bash
# Refreshes the explorer's vendored JavaScript (service/ui/vendor/) from the
# npm registry at the pinned versions below, so that the wheel carries every
# script the explorer runs and users need no build step.
#
# For each package: `npm pack NAME@VERSION` fetches the published tarball,
# its SHA-512 is checked against the pinned integrity (what `npm view
# NAME@VERSION dist.integrity` prints), and the built file and the licence are
# copied under service/ui/vendor/. To move to a new version, change both the
# version and the integrity, run this script, and commit the files it wrote.
#
# Usage: bash tools/refresh_ui_vendor.sh   (needs node's npm; writes only service/ui/vendor/)
set -euo pipefail
cd "$(dirname "$0")/.."

# elkjs: the Eclipse Layout Kernel compiled to JavaScript (EPL-2.0); the
# explorer's graph worker (a module worker) imports lib/elk.bundled.js for its
# side effect, the global ELK its UMD wrapper sets: the file is used unmodified.
ELKJS_VERSION=0.12.1
ELKJS_INTEGRITY=sha512-IhMYKHE4S2vtx0QrhBP3lYOIKDeIiJXBrdq9MGYkuB8ZHqhrBnHNfSUndjXFewrX1CPK8chwq+2NA0K0hliYuw==

VENDOR=service/ui/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# fetch NAME VERSION INTEGRITY: the tarball unpacked into $work/NAME/package
fetch() {
    local name=$1 version=$2 integrity=$3 tarball actual
    tarball=$(cd "$work" && npm pack --silent "$name@$version")
    actual="sha512-$(openssl dgst -sha512 -binary "$work/$tarball" | base64 -w0)"
    if [ "$actual" != "$integrity" ]; then
        echo "error: $name@$version: integrity $actual, expected $integrity" >&2
        exit 1
    fi
    mkdir -p "$work/$name"
    tar -xzf "$work/$tarball" -C "$work/$name"
}

fetch elkjs "$ELKJS_VERSION" "$ELKJS_INTEGRITY"
mkdir -p "$VENDOR"
cp "$work/elkjs/package/lib/elk.bundled.js" "$VENDOR/elk.bundled.js"
cp "$work/elkjs/package/LICENSE.md" "$VENDOR/elkjs-LICENSE.md"
{
    echo "elkjs $ELKJS_VERSION (npm), lib/elk.bundled.js and LICENSE.md; EPL-2.0 (the package is EPL-2.0 OR GPL-3.0-or-later; used under EPL-2.0)"
    echo "source: https://github.com/kieler/elkjs (tag $ELKJS_VERSION) and https://github.com/eclipse/elk"
    echo "tarball integrity: $ELKJS_INTEGRITY"
    echo "sha256 of elk.bundled.js: $(sha256sum "$VENDOR/elk.bundled.js" | cut -d' ' -f1)"
} >"$VENDOR/VERSIONS.txt"
echo "refreshed $VENDOR:"
cat "$VENDOR/VERSIONS.txt"
