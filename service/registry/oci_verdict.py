"""The verdict attached to a validated OCI artifact: `attestation`, `attach`, `has_verdict`, `referrers_of`.

The verdict is pushed as a referrer (OCI image manifest v1.1): its
`subject` the validated manifest's descriptor, its config the empty
descriptor (`application/vnd.oci.empty.v1+json`), its layers, and the
annotations `org.onnx-import.verdict` (pass, fail, incomplete or refused: the
artifact's, its worst model's) and `org.onnx-import.stages` (each stage's
status, as the MLflow gate's `onnx_import.checks` tag:
`service.registry.verdict`). Its artifact type is its layers' media type,
chosen by `attestation`:

- where the service signs (`--signing-key`) and a model of the artifact was
  imported, the signed bundle (`SIGSTORE_BUNDLE`): one layer per imported
  `.onnx` file, the tenant's attestation of that model as
  `GET /models/{id}/attestation` serves it (its resourceUri
  `oci://HOST/REPOSITORY@DIGEST`, its subjects the files by their paths in
  the artifact), annotated `org.onnx-import.model` with the model's path. One
  referrer per artifact, not one per model: the verdict annotation and the
  gate's "seen already" (`has_verdict`) are the artifact's, and a deployer
  reads the attestation of every model with one referrer, which is pushed
  whole or not at all (per-model referrers could be found half pushed);
- else (no key, or no model imported: a refused artifact has no check run
  to attest), the verdict JSON (`VERDICT_JSON`: the same facts as the MLflow
  gate's tags, without their prefix, beside the artifact's registry,
  repository and digest), which `onnx-import verify` refuses as unsigned.

Where the registry has the referrers API, the referrer is found there by
its subject. Where it has not (distribution 2.8 answers 404), the OCI 1.1
referrers tag schema: the tag `sha256-<hex>` of the subject's digest holds
an image index of its referrers, read, added to and written back, as ORAS
and cosign do (two writers at once may lose one entry: the referrer itself
stays, findable by the referrers API of a newer registry).
`has_verdict` says whether the artifact has a referrer of the gate already,
so that an event seen again after its marker was pruned runs nothing.
"""

from __future__ import annotations

import base64
import json
import logging
from datetime import UTC, datetime
from typing import Any

from service.registry.oci_api import OCI_INDEX, OCI_MANIFEST, OciRegistry, sha256_digest
from service.registry.oci_artifact import (
    MODEL_ANNOTATION,
    SIGSTORE_BUNDLE,
    STAGES_ANNOTATION,
    VERDICT_ANNOTATION,
    VERDICT_JSON,
    VERDICT_TYPES,
)
from service.registry.verdict import CHECKS, PREFIX, VERDICT

log = logging.getLogger("service")

EMPTY_MEDIA_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY_BODY = b"{}"
MAX_ANNOTATION = 4000  # characters of the stages annotation


def fallback_tag(digest: str) -> str:
    """The referrers tag schema's tag of `digest`: `sha256-<hex>`."""
    return digest.replace(":", "-", 1)


def verdict_document(tags: dict[str, str], registry: str, repository: str, digest: str) -> dict[str, Any]:
    """The verdict JSON: the gate's tags (service.registry.verdict) without their prefix, and what they are about."""
    document: dict[str, Any] = {"registry": registry, "repository": repository, "digest": digest}
    for key, value in tags.items():
        name = key.removeprefix(PREFIX)
        document[name] = json.loads(value) if name in ("files", "bindings") else value
    document["created"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return document


def attestation(document: dict[str, Any], bundles: dict[str, bytes]) -> tuple[str, list[tuple[bytes, dict[str, str]]]]:
    """(media type, layers: each its bytes and annotations) of the referrer: each model's signed bundle (`bundles`, by
    the model's path in the artifact), else the verdict JSON; the media type is the referrer's artifact type too."""
    if bundles:
        return SIGSTORE_BUNDLE, [(bundle, {MODEL_ANNOTATION: path}) for path, bundle in sorted(bundles.items())]
    return VERDICT_JSON, [(json.dumps(document, separators=(",", ":"), sort_keys=True).encode(), {})]


async def attach(
    registry: OciRegistry,
    repository: str,
    subject: dict[str, Any],
    tags: dict[str, str],
    document: dict[str, Any],
    bundles: dict[str, bytes] | None = None,
) -> str:
    """Push the verdict referrer of `subject` (and the fallback tag's index where the registry needs it); its digest."""
    media_type, layers = attestation(document, bundles or {})
    await registry.push_blob(repository, EMPTY_BODY)
    descriptors = []
    for layer, layer_annotations in layers:
        descriptor: dict[str, Any] = {"mediaType": media_type, "digest": await registry.push_blob(repository, layer), "size": len(layer)}
        if layer_annotations:
            descriptor["annotations"] = layer_annotations
        descriptors.append(descriptor)
    annotations = {
        VERDICT_ANNOTATION: tags[VERDICT],
        STAGES_ANNOTATION: tags.get(CHECKS, "")[:MAX_ANNOTATION],
        "org.opencontainers.image.created": document["created"],
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": media_type,
        "config": {"mediaType": EMPTY_MEDIA_TYPE, "digest": sha256_digest(EMPTY_BODY), "size": len(EMPTY_BODY),
                   "data": base64.b64encode(EMPTY_BODY).decode()},
        "layers": descriptors,
        "subject": subject,
        "annotations": annotations,
    }  # fmt: skip
    body = json.dumps(manifest, separators=(",", ":")).encode()
    digest = sha256_digest(body)
    await registry.push_manifest(repository, digest, body, OCI_MANIFEST)
    if await registry.referrers(repository, subject["digest"]) is None:
        entry = {"mediaType": OCI_MANIFEST, "digest": digest, "size": len(body), "artifactType": media_type, "annotations": annotations}
        await _add_to_fallback(registry, repository, subject["digest"], entry)
    return digest


async def _add_to_fallback(registry: OciRegistry, repository: str, subject_digest: str, entry: dict[str, Any]) -> None:
    tag = fallback_tag(subject_digest)
    held = await registry.index_at_tag(repository, tag) or []
    manifests = [kept for kept in held if kept.get("digest") != entry["digest"]] + [entry]
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    await registry.push_manifest(repository, tag, json.dumps(index, separators=(",", ":")).encode(), OCI_INDEX)
    log.info("oci: %s:%s lists %d referrers (the referrers tag schema)", repository, tag, len(manifests))


async def referrers_of(registry: OciRegistry, repository: str, digest: str) -> list[dict[str, Any]]:
    """The referrers of `digest`: by the referrers API, else the fallback tag's index."""
    found = await registry.referrers(repository, digest)
    if found is None:
        found = await registry.index_at_tag(repository, fallback_tag(digest)) or []
    return found


async def has_verdict(registry: OciRegistry, repository: str, digest: str) -> bool:
    """The artifact has a verdict referrer of the gate already."""
    return any(entry.get("artifactType") in VERDICT_TYPES for entry in await referrers_of(registry, repository, digest))
