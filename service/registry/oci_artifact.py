"""Which pushed manifests the OCI gate validates, and their layers: `onnx_layers`, `Layer`, and the media types.

A manifest is validated when it is an OCI image manifest (or Docker's v2)
one of whose layers names an `.onnx` file by its path annotation:
`org.cncf.model.filepath` (CNCF ModelPack's, modelpack/model-spec and PyPI's
`olot`; `org.cnai.model.filepath`, its name before the move to the CNCF, too)
or `org.opencontainers.image.title` (what `oras push` writes). So a ModelPack
artifact (`application/vnd.cncf.model.manifest.v1+json`) with `.onnx`
weight layers is, and so is any other artifact or image with such a layer;
whatever else the artifact holds is pulled with it (its external data). Anything
else is ignored: an image index, an ordinary image, an artifact with no
`.onnx` layer, and the gate's own verdict referrers (`VERDICT_TYPES`: their
artifact type, or the verdict annotation on the manifest).

Every layer of a validated manifest is pulled (`service.registry.oci_pull`):
its path is its file path annotation, confined as an external data location
is (relative, no `..`: `check_location`); a layer without one is pulled only
when it is an archive (its media type says tar), whose members carry their
own paths. At most `MAX_LAYERS` layers.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from service.errors import PathRefused
from service.imports.sources.upload import check_location
from service.registry.oci_api import DIGEST, MANIFEST_TYPES
from service.registry.sources import Refused

FILEPATHS = ("org.cncf.model.filepath", "org.cnai.model.filepath")
TITLE = "org.opencontainers.image.title"
VERDICT_JSON = "application/vnd.onnx-import.verdict.v1+json"  # the referrer's type and layer without a signing key
SIGSTORE_BUNDLE = "application/vnd.dev.sigstore.bundle.v0.3+json"  # the referrer's type and layer with one (issue 58)
VERDICT_TYPES = (VERDICT_JSON, SIGSTORE_BUNDLE)
VERDICT_ANNOTATION = "org.onnx-import.verdict"
STAGES_ANNOTATION = "org.onnx-import.stages"
MODEL_ANNOTATION = "org.onnx-import.model"  # a signed referrer's layer: the path of the model its bundle attests
MAX_LAYERS = 256


@dataclass(frozen=True, slots=True)
class Layer:
    digest: str
    size: int
    media_type: str
    path: str  # its file path annotation, confined ("" for an archive without one)

    @property
    def archive(self) -> bool:
        """Its media type says tar (ModelPack's `.tar`, `.tar+gzip`; an image layer): sniffed again when pulled."""
        return "tar" in self.media_type


def is_onnx_path(path: str) -> bool:
    return path.lower().endswith(".onnx")


def _annotation_path(layer: dict[str, Any]) -> str:
    annotations = layer.get("annotations")
    if not isinstance(annotations, dict):
        return ""
    found = next((annotations[key] for key in (*FILEPATHS, TITLE) if annotations.get(key)), "")
    return found if isinstance(found, str) else ""


def is_ours(manifest: dict[str, Any]) -> bool:
    """A verdict referrer the gate pushed (or one like it)."""
    annotations = manifest.get("annotations")
    return manifest.get("artifactType") in VERDICT_TYPES or (isinstance(annotations, dict) and VERDICT_ANNOTATION in annotations)


def onnx_layers(manifest: dict[str, Any], media_type: str) -> list[Layer] | None:
    """The layers to pull of a manifest the gate validates; None for one it ignores; Refused for one it cannot take."""
    kind = manifest.get("mediaType") or media_type
    layers = manifest.get("layers")
    if kind not in MANIFEST_TYPES or is_ours(manifest) or not isinstance(layers, list):
        return None
    if not any(isinstance(layer, dict) and is_onnx_path(_annotation_path(layer)) for layer in layers):
        return None
    if len(layers) > MAX_LAYERS:
        raise Refused(f"the artifact has {len(layers)} layers, more than the {MAX_LAYERS} the gate pulls")
    taken = []
    for number, layer in enumerate(layers):
        if not isinstance(layer, dict):
            raise Refused(f"layer {number} of the manifest is not a descriptor")
        digest, size, layer_type, path = layer.get("digest"), layer.get("size"), layer.get("mediaType"), _annotation_path(layer)
        if not isinstance(digest, str) or not DIGEST.fullmatch(digest):
            raise Refused(f"layer {number}'s digest {str(digest)[:100]!r} is not sha256:HEX")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise Refused(f"layer {number}'s size is not a byte count")
        if path:
            try:
                path = check_location(path)
            except PathRefused as error:
                raise Refused(f"layer {number}'s file path {path[:200]!r} leaves the artifact: {error}") from None
        found = Layer(digest, size, str(layer_type or ""), posixpath.normpath(path) if path else "")
        if found.path or found.archive:
            taken.append(found)
    return taken


def subject_of(pulled_media_type: str, digest: str, size: int, manifest: dict[str, Any]) -> dict[str, Any]:
    """The descriptor of the validated manifest, as a referrer's `subject`."""
    descriptor: dict[str, Any] = {"mediaType": manifest.get("mediaType") or pulled_media_type, "digest": digest, "size": size}
    if isinstance(manifest.get("artifactType"), str):
        descriptor["artifactType"] = manifest["artifactType"]
    return descriptor
