"""Which pushed manifests the OCI gate validates (service.registry.oci_artifact), and the
verdict referrer it pushes (service.registry.oci_verdict) against a registry's answers made
in process (httpx's MockTransport): found by the referrers API where the registry has it,
else added to the `sha256-<hex>` tag's index beside the referrers already there."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from service.registry.oci_api import OciRegistry
from service.registry.oci_artifact import VERDICT_JSON, Layer, onnx_layers, subject_of
from service.registry.oci_verdict import attach, has_verdict, verdict_document
from service.registry.sources import Refused

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def _layer(
    path: str = "", media_type: str = "application/vnd.cncf.model.weight.v1.raw", key: str = "org.cncf.model.filepath"
) -> dict[str, Any]:
    return {"mediaType": media_type, "digest": DIGEST, "size": 10} | ({"annotations": {key: path}} if path else {})


def _manifest(*layers: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"schemaVersion": 2, "mediaType": MANIFEST, "config": {"mediaType": "application/vnd.oci.empty.v1+json"},
            "layers": list(layers)} | fields  # fmt: skip


def test_onnx_artifacts_are_validated_and_others_ignored() -> None:
    doc = _layer("README.md", "application/vnd.cncf.model.doc.v1.raw")
    tar = _layer("", "application/vnd.cncf.model.weight.v1.tar")
    modelpack = _manifest(
        _layer("model.onnx"), _layer("sub/weights.bin"), tar, doc, artifactType="application/vnd.cncf.model.manifest.v1+json"
    )
    assert onnx_layers(modelpack, MANIFEST) == [
        Layer(DIGEST, 10, "application/vnd.cncf.model.weight.v1.raw", "model.onnx"),
        Layer(DIGEST, 10, "application/vnd.cncf.model.weight.v1.raw", "sub/weights.bin"),
        Layer(DIGEST, 10, "application/vnd.cncf.model.weight.v1.tar", ""),
        Layer(DIGEST, 10, "application/vnd.cncf.model.doc.v1.raw", "README.md"),
    ]
    by_oras = _manifest(_layer("net.ONNX", "application/vnd.oci.image.layer.v1.tar", "org.opencontainers.image.title"))
    assert onnx_layers(by_oras, MANIFEST) == [Layer(DIGEST, 10, "application/vnd.oci.image.layer.v1.tar", "net.ONNX")]
    older = _manifest(_layer("m.onnx", key="org.cnai.model.filepath"))  # ModelPack's annotation before the CNCF
    assert onnx_layers(older, MANIFEST) == [Layer(DIGEST, 10, "application/vnd.cncf.model.weight.v1.raw", "m.onnx")]
    assert onnx_layers(_manifest(_layer("model.safetensors")), MANIFEST) is None  # no .onnx layer
    assert onnx_layers(_manifest(_layer("", "application/vnd.oci.image.layer.v1.tar+gzip")), MANIFEST) is None  # an ordinary image
    assert onnx_layers({"schemaVersion": 2, "mediaType": INDEX, "manifests": []}, INDEX) is None
    assert onnx_layers(_manifest(_layer("model.onnx"), artifactType=VERDICT_JSON), MANIFEST) is None  # the gate's own referrer
    assert onnx_layers(_manifest(_layer("model.onnx"), annotations={"org.onnx-import.verdict": "pass"}), MANIFEST) is None


@pytest.mark.parametrize("path", ["../model.onnx", "/abs/model.onnx", "a/../../model.onnx", "a/%2e%2e/model.onnx"])
def test_a_layer_path_leaving_the_artifact_is_refused(path: str) -> None:
    with pytest.raises(Refused, match="leaves the artifact"):
        onnx_layers(_manifest(_layer("model.onnx"), _layer(path)), MANIFEST)


def test_a_malformed_descriptor_is_refused() -> None:
    with pytest.raises(Refused, match="is not sha256:HEX"):
        onnx_layers(_manifest(_layer("model.onnx") | {"digest": "md5:00"}), MANIFEST)
    with pytest.raises(Refused, match="not a byte count"):
        onnx_layers(_manifest(_layer("model.onnx") | {"size": -1}), MANIFEST)


class Registry:
    """A registry's manifests in memory, with or without the referrers API."""

    def __init__(self, referrers_api: bool) -> None:
        self.referrers_api = referrers_api
        self.manifests: dict[str, bytes] = {}

    def answer(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if request.method == "POST":
            return httpx.Response(202, headers={"Location": "/v2/models/net/blobs/uploads/1"})
        if request.method == "PUT" and "/blobs/" in path:
            return httpx.Response(201)
        reference = path.rpartition("/")[2]
        if request.method == "PUT":
            self.manifests[reference] = request.content
            return httpx.Response(201)
        if "/referrers/" in path:
            if not self.referrers_api:
                return httpx.Response(404)
            found = [json.loads(body) for body in self.manifests.values() if json.loads(body).get("subject", {}).get("digest") == reference]
            entries = [{"digest": "sha256:x", "artifactType": manifest["artifactType"]} for manifest in found]
            return httpx.Response(200, json={"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}, headers={"Content-Type": INDEX})
        if reference in self.manifests:
            return httpx.Response(200, content=self.manifests[reference], headers={"Content-Type": INDEX})
        return httpx.Response(404)


def _attached(registry: Registry) -> str:
    async def run() -> str:
        client = OciRegistry("http://registry.test", transport=httpx.MockTransport(registry.answer))
        tags = {"onnx_import.verdict": "fail", "onnx_import.checks": "schema=pass,security=fail", "onnx_import.files": "[]"}
        subject = subject_of(MANIFEST, DIGEST, 500, _manifest(artifactType="application/vnd.cncf.model.manifest.v1+json"))
        digest = await attach(client, "models/net", subject, tags, verdict_document(tags, "registry.test", "models/net", DIGEST))
        assert await has_verdict(client, "models/net", DIGEST) and not await has_verdict(client, "models/net", OTHER)
        return digest

    return asyncio.run(run())


def test_the_referrer_without_the_referrers_api_is_added_to_the_tag_index() -> None:
    registry = Registry(referrers_api=False)
    held = {"mediaType": MANIFEST, "digest": OTHER, "size": 1, "artifactType": "application/vnd.dev.cosign.simplesigning.v1+json"}
    registry.manifests["sha256-" + "ab" * 32] = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": [held]}).encode()
    digest = _attached(registry)
    referrer = json.loads(registry.manifests[digest])
    assert referrer["subject"] == {
        "mediaType": MANIFEST,
        "digest": DIGEST,
        "size": 500,
        "artifactType": "application/vnd.cncf.model.manifest.v1+json",
    }
    assert referrer["artifactType"] == VERDICT_JSON and referrer["layers"][0]["mediaType"] == VERDICT_JSON
    assert referrer["config"] == {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2, "data": "e30=",
                                  "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"}  # fmt: skip
    assert referrer["annotations"]["org.onnx-import.verdict"] == "fail"
    assert referrer["annotations"]["org.onnx-import.stages"] == "schema=pass,security=fail"
    index = json.loads(registry.manifests["sha256-" + "ab" * 32])
    assert [entry["digest"] for entry in index["manifests"]] == [OTHER, digest]  # the cosign entry kept, ours added
    assert index["manifests"][1]["annotations"]["org.onnx-import.verdict"] == "fail"


def test_the_referrer_with_the_referrers_api_writes_no_tag() -> None:
    registry = Registry(referrers_api=True)
    digest = _attached(registry)
    assert list(registry.manifests) == [digest]
