# syntax=docker/dockerfile:1
# The ONNX import service image. Stage 1 builds the project's wheel and the
# wheels of its dependencies; stage 2 installs them, offline, into a slim Python
# that has no compiler, no pip cache and, in the end, no pip. It runs as uid
# 10001 with a read-only root file system: only /store (the content-addressed
# store) and /tmp (the fork server's socket) are written. /data, the folder of
# server-side models, is mounted read-only. See deploy/README.md.
#
#   docker build -t onnx-import-service:0.1.0 .
#   docker run --read-only --tmpfs /tmp -v models:/data:ro -v store:/store \
#       -p 127.0.0.1:8000:8000 onnx-import-service:0.1.0
#
# Base image: one tag for both stages (the wheels of stage 1 must match the
# Python of stage 2). Pin it by digest for a reproducible build:
#   --build-arg PYTHON_IMAGE=python:3.11-slim-trixie@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11-slim-trixie

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Only what the wheel is built from (.dockerignore keeps the rest out).
COPY pyproject.toml README.md ./
COPY importer/ importer/
COPY service/ service/
# The project's wheel and one wheel per dependency; --only-binary refuses any
# dependency that would need a compiler.
RUN python -m pip wheel --only-binary=:all: --wheel-dir /wheels . \
    && ls -l /wheels

FROM ${PYTHON_IMAGE} AS runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="onnx-import-service" \
      org.opencontainers.image.description="Sandboxed ONNX import service" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"
# HOME and TMPDIR point at /tmp, the only writable place besides the store.
# PYTHONSAFEPATH keeps the working directory off sys.path. WORKERS is set
# because the service's default, the CPU count, is the host's inside a
# container; the memory a container needs is WORKERS x WORKER_MEMORY plus
# about 512 MiB (deploy/README.md, Sizing).
ENV PYTHONDONTWRITEBYTECODE=1 \
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
# Install from the builder's wheels only (bind-mounted: they never become a
# layer), then remove pip itself: nothing is installed at run time.
# No apt packages: the one system library the service loads, libseccomp.so.2
# (the workers' seccomp filter, through pyseccomp), is in the base image
# already, as Debian's apt depends on libseccomp2.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    python -m pip install --no-index --find-links=/wheels /wheels/onnx_import_service-*.whl \
    && python -m pip uninstall --yes pip setuptools wheel \
    && groupadd --system --gid 10001 onnx \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin onnx \
    && mkdir -p /data /store \
    && chown 10001:10001 /store \
    && chmod 0750 /store
# A path where a volume is mounted: never the image's own files.
VOLUME ["/data", "/store"]
WORKDIR /
USER 10001:10001
EXPOSE 8000
# slim has no curl: the check is Python's own urllib, on the configured port.
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('ONNX_SERVICE_PORT', '8000'); sys.exit(urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status != 200)"]
ENTRYPOINT ["python", "-m", "service"]
