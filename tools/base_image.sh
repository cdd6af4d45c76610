#!/usr/bin/env bash
# A local Python base image for the Dockerfile, built from Debian's packages
# where no image registry is reachable (the container tests use it when the
# official python image cannot be had). It is Debian's minbase with python3,
# python3-pip and python3-venv, `python` linked to `python3`
# (python-is-python3), made with debootstrap and loaded with `docker import`.
#
#   bash tools/base_image.sh            # prints the image's tag, e.g. onnx-import-base:bookworm-3f2a...
#   docker build --build-arg PYTHON_IMAGE="$(bash tools/base_image.sh)" -t onnx-import-service:0.1.0 .
#
# Cached by content: the tag ends in a hash of this script, the suite, the
# mirror, the packages and the host's local CA certificates; when the engine
# already has that tag, nothing is built (delete the image to rebuild it).
# Building needs root, debootstrap and Debian's mirror (about a minute).
#
# The host's local CA certificates (/usr/local/share/ca-certificates/*.crt)
# are added to the image's trust store, so that pip in the image build trusts
# what the host trusts (a TLS-intercepting egress proxy, as on these
# machines). This base is for building and testing here; it is not the
# official image, and it is never pushed.
#
# The Debian mirror is the one this machine's apt uses (its first `deb` source
# of a release suite with the main component, in /etc/apt/sources.list.d/*.sources
# or *.list, or /etc/apt/sources.list), unless DEBIAN_MIRROR names one; no
# mirror is written into this repository.
#
# Environment: BASE_SUITE (bookworm), DEBIAN_MIRROR (default: as above),
# BASE_REPOSITORY (onnx-import-base), DOCKER (docker). Progress goes to stderr;
# stdout has the tag only. Exit status 2: it cannot be built here (not root,
# no debootstrap); 1: the build failed.
set -euo pipefail

SUITE=${BASE_SUITE:-bookworm}
REPOSITORY=${BASE_REPOSITORY:-onnx-import-base}
DOCKER=${DOCKER:-docker}
PACKAGES=python3,python3-pip,python3-venv,python-is-python3
CA_FOLDER=/usr/local/share/ca-certificates

say() { echo "base_image.sh: $*" >&2; }

# The URI of this machine's first apt source that serves a release suite
# (no -updates, -security, -backports) with the main component.
apt_mirror() {
    local sources=()
    compgen -G "/etc/apt/sources.list.d/*.sources" >/dev/null && sources+=(/etc/apt/sources.list.d/*.sources)
    if [ ${#sources[@]} -gt 0 ]; then
        awk '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && enabled != "no" && components ~ /(^| )main( |$)/ && uri != "") {
                    n = split(suites, list, " ")
                    for (i = 1; i <= n; i++) if (list[i] !~ /[-\/]/) { print uri; found = 1; exit }
                }
                types = ""; suites = ""; components = ""; uri = ""; enabled = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "") }
            key == "types" { types = $0 } key == "suites" { suites = $0 } key == "components" { components = $0 }
            key == "enabled" { enabled = tolower($0) } key == "uris" { split($0, first, " "); uri = first[1] }
            END { if (!found) flush() }
        ' "${sources[@]}" | head -n 1
    fi
    local lists=()
    [ -f /etc/apt/sources.list ] && lists+=(/etc/apt/sources.list)
    compgen -G "/etc/apt/sources.list.d/*.list" >/dev/null && lists+=(/etc/apt/sources.list.d/*.list)
    if [ ${#lists[@]} -gt 0 ]; then
        awk '$1 == "deb" {
            i = 2; if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
            uri = $i; suite = $(i + 1)
            for (j = i + 2; j <= NF; j++) if ($j == "main" && suite !~ /[-\/]/) { print uri; exit }
        }' "${lists[@]}" | head -n 1
    fi
}

MIRROR=${DEBIAN_MIRROR:-$(apt_mirror | head -n 1)}
MIRROR=${MIRROR%/}
if [ -z "$MIRROR" ]; then
    say "no Debian mirror in this machine's apt sources: give one as DEBIAN_MIRROR"
    exit 2
fi

inputs_hash() {
    {
        cat "${BASH_SOURCE[0]}"
        echo "$SUITE $MIRROR $PACKAGES"
        if compgen -G "$CA_FOLDER/*.crt" >/dev/null; then
            cat "$CA_FOLDER"/*.crt
        fi
    } | sha256sum | cut -c1-16
}

TAG="$REPOSITORY:$SUITE-$(inputs_hash)"
if "$DOCKER" image inspect "$TAG" >/dev/null 2>&1; then
    say "reusing $TAG"
    echo "$TAG"
    exit 0
fi
if [ "$(id -u)" != 0 ]; then
    say "building $TAG needs root (debootstrap)"
    exit 2
fi
if ! command -v debootstrap >/dev/null 2>&1; then
    say "building $TAG needs debootstrap (apt-get install debootstrap)"
    exit 2
fi

WORK=$(mktemp -d /var/tmp/onnx-base.XXXXXX)
ROOTFS="$WORK/rootfs"
cleanup() {
    local status=$?
    # debootstrap mounts /proc and /sys in the target; a failed run may leave them.
    if command -v findmnt >/dev/null 2>&1; then
        { findmnt -rn -o TARGET | grep -F "$ROOTFS/" | sort -r || true; } | while read -r mounted; do
            umount -l "$mounted" || true
        done
    fi
    rm -rf --one-file-system "$WORK" || true
    exit "$status"
}
trap cleanup EXIT

started=$SECONDS
say "building $TAG: debootstrap $SUITE minbase with $PACKAGES from $MIRROR"
if ! debootstrap --variant=minbase --components=main --include="$PACKAGES" "$SUITE" "$ROOTFS" "$MIRROR" >"$WORK/debootstrap.log" 2>&1; then
    tail -n 30 "$WORK/debootstrap.log" >&2
    say "debootstrap failed"
    exit 1
fi
# The workers' seccomp filter loads libseccomp.so.2 (libseccomp2, which apt depends on).
if [ -z "$(find "$ROOTFS/usr/lib" -name libseccomp.so.2 -print -quit)" ]; then
    say "libseccomp.so.2 is missing from the base"
    exit 1
fi

if compgen -G "$CA_FOLDER/*.crt" >/dev/null; then
    cp "$CA_FOLDER"/*.crt "$ROOTFS$CA_FOLDER/"
    chroot "$ROOTFS" update-ca-certificates >/dev/null 2>&1
fi

# Slim, as the official slim images are: no package cache or lists, no
# documentation, no translations.
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/var/lib/apt/lists/* \
    "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/info/* \
    "$ROOTFS"/var/log/*.log "$ROOTFS"/var/log/apt/* "$ROOTFS"/debootstrap
find "$ROOTFS/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +

tar --numeric-owner -C "$ROOTFS" -c . |
    "$DOCKER" import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change "LABEL org.opencontainers.image.description=\"Debian $SUITE minbase with Python (tools/base_image.sh)\"" \
        --change 'CMD ["python3"]' \
        --message "tools/base_image.sh: debootstrap $SUITE minbase, $PACKAGES" \
        - "$TAG" >/dev/null
say "built $TAG in $((SECONDS - started)) s ($("$DOCKER" image inspect --format '{{.Size}}' "$TAG") bytes)"
echo "$TAG"
