# The ONNX import service image. Stage 1 builds the project's wheel, its
# importer compiled with mypyc (IMPORTER_BUILD=compiled: a C compiler and
# Python's headers are installed in that stage only), and the wheels of its
# dependencies; stage 2 installs them, offline, into a virtual environment
# (/opt/venv, without pip) on the same Python, with no compiler and no
# caches; its /healthz reports "importer_build": "compiled". It runs as uid 10001 with a read-only root file system: only
# /store (the content-addressed store) and /tmp (the fork server's socket)
# are written. /data, the folder of server-side models, is mounted read-only.
# See deploy/README.md.
#
#   docker build -t onnx-import-service:0.1.0 .
#   docker run --read-only --tmpfs /tmp -v models:/data:ro -v store:/store \
#       -e ONNX_SERVICE_ALLOW_ANONYMOUS=1 -p 127.0.0.1:8000:8000 onnx-import-service:0.1.0
#
# No `# syntax=` line: the engine's built-in BuildKit frontend (which has
# `RUN --mount`) builds it, so a build fetches no frontend image. It needs
# BuildKit (the default builder of Docker 23 and newer; DOCKER_BUILDKIT=1 on
# older engines) and, for stage 1, PyPI; no image registry beyond the base.
#
# Base image: one tag for both stages (the wheels of stage 1 must match the
# Python of stage 2): any Debian-based image with Python 3.11 or newer, pip,
# venv, `python` on the PATH, useradd and libseccomp.so.2. Pin it by digest
# for a reproducible build:
#   --build-arg PYTHON_IMAGE=python:3.11-slim-trixie@sha256:<digest>
# Where no registry is reachable, tools/base_image.sh builds one from
# Debian's packages: --build-arg PYTHON_IMAGE="$(bash tools/base_image.sh)".
ARG PYTHON_IMAGE=python:3.11-slim-trixie

FROM ${PYTHON_IMAGE} AS builder
# A distribution's own Python (Debian's python3) marks itself externally
# managed (PEP 668); `pip wheel` installs nothing, so that does not apply here.
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 \
    IMPORTER_BUILD=compiled
# The compiled importer's C compiler and Python's headers, in this stage only.
# The official image has the headers; Debian's python3 (tools/base_image.sh)
# has them in python3-dev. Unpinned: they are the base's Debian release's own
# packages, whichever release that is, and none of them reaches the runtime.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && if [ ! -e "$(python -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then \
        apt-get install -y --no-install-recommends python3-dev; \
    fi \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# The dependencies' wheels first, from pyproject.toml alone, so that a change to
# the code reuses this layer: the `fleet` extra's (obstore, psycopg[binary] with
# its own libpq, psycopg-pool: the image also serves a fleet, --store s3://...
# with --database postgresql://..., compose.fleet.yaml) and the `runtime`
# extra's (onnx and onnxruntime: the shape, runtime and smoke check stages) and
# the `signing` extra's (model-signing, cryptography: signed attestations with
# --signing-key, and `onnx-import verify` in an init container).
# --only-binary refuses any dependency that would need a compiler. pip's cache
# is a cache mount: it speeds up rebuilds and never becomes a layer.
COPY pyproject.toml ./
RUN --mount=type=cache,target=/root/.cache/pip \
    python -c 'import tomllib; project = tomllib.load(open("pyproject.toml", "rb"))["project"]; extras = project["optional-dependencies"]; print("\n".join(project["dependencies"] + extras["fleet"] + extras["runtime"] + extras["signing"]))' >/tmp/requirements.txt \
    && python -m pip wheel --only-binary=:all: --wheel-dir /wheels -r /tmp/requirements.txt
# Then what the project's wheel is built from (.dockerignore keeps the rest
# out): its metadata, its build backend (tools/build_backend.py: setuptools,
# adding mypy for the compiled build, and tools/compile_cache.py) and setup.py
# (mypyc's extension modules).
COPY README.md setup.py MANIFEST.in ./
COPY tools/build_backend.py tools/compile_cache.py tools/
COPY importer/ importer/
COPY service/ service/
# The project's wheel: mypyc compiles the importer (about a minute; the build's
# own requirements, setuptools and mypy with its mypyc, are wheels too). The
# compiled modules are kept in a cache mount by the digest of what they are
# compiled from (tools/compile_cache.py), so a change outside importer/ builds
# the wheel in seconds.
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=cache,target=/root/.cache/importer-compile \
    IMPORTER_COMPILE_CACHE=/root/.cache/importer-compile \
    python -m pip wheel --no-deps --only-binary=:all: --wheel-dir /wheels . \
    && ls -l /wheels

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="onnx-import-service" \
      org.opencontainers.image.description="Sandboxed ONNX import service" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# Install from the builder's wheels only (bind-mounted: they never become a
# layer) into /opt/venv, a virtual environment without pip: nothing is
# installed at run time, and the base's own packages stay out of the service's
# way. The base's pip runs it (`--python`); a venv is not externally managed.
# numpy's own test suites (17 MB) are left out, and so are onnx's backend test
# data and onnxruntime's transformer, quantization and model tools (27 MB):
# the check worker uses neither.
# No apt packages: the one system library the service loads, libseccomp.so.2
# (the workers' seccomp filter, through pyseccomp), is in the base image
# already, as Debian's apt depends on libseccomp2.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/venv \
    && python -m pip --python /opt/venv/bin/python install --no-cache-dir --no-index --find-links=/wheels \
        "onnx-import-service[fleet,runtime,signing]" \
    && find /opt/venv -depth -type d -path '*/site-packages/numpy/*' -name tests -exec rm -rf {} + \
    && rm -rf /opt/venv/lib/python*/site-packages/onnx/backend/test \
        /opt/venv/lib/python*/site-packages/onnxruntime/transformers \
        /opt/venv/lib/python*/site-packages/onnxruntime/quantization \
        /opt/venv/lib/python*/site-packages/onnxruntime/tools \
    && groupadd --system --gid 10001 onnx \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin onnx \
    && mkdir -p /data /store \
    && chown 10001:10001 /store \
    && chmod 0750 /store
# HOME and TMPDIR point at /tmp, the only writable place besides the store.
# PYTHONSAFEPATH keeps the working directory off sys.path. WORKERS is set
# because the service's default, the CPU count, is the host's inside a
# container; the memory a container needs is WORKERS x WORKER_MEMORY plus
# about 512 MiB (deploy/README.md, Sizing). Anonymous access on 0.0.0.0 is
# refused unless keys (ONNX_SERVICE_API_KEYS) or ONNX_SERVICE_ALLOW_ANONYMOUS=1
# are given: compose.yaml and deploy/ set one of them.
ENV PATH=/opt/venv/bin:$PATH \
    VIRTUAL_ENV=/opt/venv \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONSAFEPATH=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/tmp \
    TMPDIR=/tmp \
    ONNX_SERVICE_HOST=0.0.0.0 \
    ONNX_SERVICE_PORT=8000 \
    ONNX_SERVICE_DATA_ROOT=/data \
    ONNX_SERVICE_STORE=/store \
    ONNX_SERVICE_WORKERS=2 \
    ONNX_SERVICE_WORKER_MEMORY=2GiB
# A path where a volume is mounted: never the image's own files.
VOLUME ["/data", "/store"]
WORKDIR /
USER 10001:10001
EXPOSE 8000
# No curl in slim images: the check is Python's own urllib, on the configured port.
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('ONNX_SERVICE_PORT', '8000'); sys.exit(urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["python", "-m", "service"]
