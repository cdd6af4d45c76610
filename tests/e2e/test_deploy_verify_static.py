"""The verified model servers' manifests (deploy/verified-model, deploy/verified-oci-model), checked offline.

- Each kustomization rendered (as tests/e2e/test_deploy_static.py renders
  deploy/; compared with `kubectl kustomize` where kubectl exists), lists
  every file of its folder, and validates against the Kubernetes schemas
  (strict): the folder example against 1.30 and 1.37, as deploy/; the OCI
  example against 1.31 (the first with `volumes[].image`) and 1.37, and 1.30's
  schema refuses its image volume (the field is real, and new in 1.31).
- Every container, the init containers too, runs unprivileged on a read-only
  root (no capabilities, no privilege escalation, a seccomp profile), the
  verify container as the image's user; no service account token, no host
  namespaces.
- The verify init container runs the service's image, its command the
  `onnx-import` console script, and its arguments are taken by the product's
  own parser (`service.checks.command.build_parser`) and its usage rule
  (`verify_command.usage_problem`): its PATH and attestation on the volumes
  the fetchers fill, its public keys on the ConfigMap's mount, the model
  mounted read-only in it and in the server, the fetchers before it; for OCI,
  its reference (`oci_verify.parse_reference`: a digest) the image volume's
  own, which the server mounts read-only.
- The two ConfigMaps of public keys are the same file.
"""

from __future__ import annotations

import copy
import posixpath
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
from support.deploy_files import DEPLOY, DOCKERFILE, read_dockerfile, yaml_document
from support.paths import REPO
from test_deploy_static import KUBERNETES_VERSIONS, assert_kubectl_kustomize_agrees, pod_spec, project_version, render_kustomization

from service.attestation.verify_command import OCI_SCHEME, usage_problem
from service.checks.command import build_parser
from service.registry.oci_verify import parse_reference

Json = dict[str, Any]
FOLDER = DEPLOY / "verified-model"
OCI = DEPLOY / "verified-oci-model"
IMAGE_VOLUME_VERSIONS = ["1.31", "1.37"]  # volumes[].image (ImageVolumeSource) is in the schemas from 1.31
SCHEMA_VERSIONS = {FOLDER: KUBERNETES_VERSIONS, OCI: IMAGE_VOLUME_VERSIONS}
VERIFY = "verify-model"


def deployment(folder: Path) -> Json:
    (found,) = [document for document in render_kustomization(folder) if document["kind"] == "Deployment"]
    return found


def containers(pod: Json) -> list[Json]:
    return [*pod.get("initContainers", []), *pod["containers"]]


def named(pod: Json, name: str) -> Json:
    (found,) = [container for container in containers(pod) if container["name"] == name]
    return found


def mount_of(container: Json, path: str) -> Json:
    """The volume mount of `container` that holds `path`, the deepest."""
    found = [
        mount for mount in container.get("volumeMounts", []) if path == mount["mountPath"] or path.startswith(mount["mountPath"] + "/")
    ]
    assert found, f"{container['name']} mounts nothing at {path}"
    return max(found, key=lambda mount: len(mount["mountPath"]))


def parsed_verify(container: Json) -> Any:
    """The verify container's command as the product parses it (argparse exits on what it refuses)."""
    assert container["command"] == ["onnx-import"]
    args = build_parser().parse_args([*container["command"][1:], *container["args"]])
    assert args.command == "verify"
    assert usage_problem(args) == "", usage_problem(args)
    return args


@pytest.mark.parametrize("folder", [FOLDER, OCI], ids=["folder", "oci"])
def test_the_kustomization_lists_every_file_and_agrees_with_kubectl(folder: Path) -> None:
    listed = set(yaml_document(folder / "kustomization.yaml")["resources"])
    assert listed == {path.name for path in folder.glob("*.yaml")} - {"kustomization.yaml"}
    assert_kubectl_kustomize_agrees(folder, render_kustomization(folder))


@pytest.mark.parametrize(("folder", "version"), [(folder, version) for folder, versions in SCHEMA_VERSIONS.items() for version in versions])
def test_manifests_match_the_kubernetes_schemas(folder: Path, version: str) -> None:
    for document in render_kustomization(folder):
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{folder.name}: {document['kind']} against {version}: {'.'.join(map(str, error.path))}: {error.message}")


def test_the_image_volume_is_new_in_1_31() -> None:
    with pytest.raises(kubernetes_validate.ValidationError, match="image"):
        kubernetes_validate.validate(deployment(OCI), "1.30", strict=True)
    broken = copy.deepcopy(deployment(OCI))
    (volume,) = [volume for volume in pod_spec(broken)["volumes"] if "image" in volume]
    volume["image"]["ref"] = volume["image"].pop("reference")
    with pytest.raises(kubernetes_validate.ValidationError):  # strict: the check is not vacuous
        kubernetes_validate.validate(broken, IMAGE_VOLUME_VERSIONS[0], strict=True)


@pytest.mark.parametrize("folder", [FOLDER, OCI], ids=["folder", "oci"])
def test_every_container_runs_unprivileged_on_a_read_only_root(folder: Path) -> None:
    uid, gid = read_dockerfile(DOCKERFILE).user_ids()
    pod = pod_spec(deployment(folder))
    assert pod["automountServiceAccountToken"] is False and pod["enableServiceLinks"] is False
    assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in containers(pod):
        security = container["securityContext"]
        assert security["runAsNonRoot"] is True, container["name"]
        assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False, container["name"]
        assert security["readOnlyRootFilesystem"] is True, container["name"]
        assert security["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert "limits" in container["resources"], container["name"]
        writable = {mount["mountPath"] for mount in container.get("volumeMounts", []) if not mount.get("readOnly")}
        volumes = {volume["name"]: volume for volume in pod["volumes"]}
        assert all("emptyDir" in volumes[mount["name"]] for mount in container.get("volumeMounts", []) if not mount.get("readOnly")), (
            writable
        )
    verify = named(pod, VERIFY)
    assert (verify["securityContext"]["runAsUser"], verify["securityContext"]["runAsGroup"]) == (uid, gid)
    assert {mount["mountPath"] for mount in verify["volumeMounts"] if not mount.get("readOnly")} <= {"/tmp"}, (
        "verify writes nothing it checks"
    )


def test_verify_is_the_services_console_script() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["onnx-import"] == "service.checks.command:main"
    for folder in (FOLDER, OCI):
        assert named(pod_spec(deployment(folder)), VERIFY)["image"] == f"onnx-import-service:{project_version()}"


def test_the_folder_is_fetched_then_verified_then_served_read_only() -> None:
    pod = pod_spec(deployment(FOLDER))
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    names = [container["name"] for container in pod["initContainers"]]
    assert names.index("fetch-model") < names.index(VERIFY) and names.index("fetch-attestation") < names.index(VERIFY)
    assert names[-1] == VERIFY, "the last init container: nothing changes the model after it"
    verify = named(pod, VERIFY)
    args = parsed_verify(verify)
    model = mount_of(verify, args.path)
    assert model["readOnly"] is True and "emptyDir" in volumes[model["name"]] and model["mountPath"] == "/mnt/models"
    fetch_model = named(pod, "fetch-model")
    assert mount_of(fetch_model, fetch_model["args"][1])["name"] == model["name"] and fetch_model["args"][1] == args.path
    attestation = mount_of(verify, str(args.attestation))
    fetch_attestation = named(pod, "fetch-attestation")
    assert mount_of(fetch_attestation, fetch_attestation["args"][1])["name"] == attestation["name"] and attestation["readOnly"] is True
    fetched = posixpath.join(fetch_attestation["args"][1], posixpath.basename(fetch_attestation["args"][0]))
    assert str(args.attestation) == fetched, "verify reads the attestation where its fetcher writes it"
    _assert_keys_from_the_config_map(pod, verify, args)
    (server,) = pod["containers"]
    served = mount_of(server, "/mnt/models")
    assert served["name"] == model["name"] and served["readOnly"] is True
    assert "/mnt/models" in server["args"]


def test_the_oci_artifact_verified_is_the_one_the_server_mounts() -> None:
    pod = pod_spec(deployment(OCI))
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    (verify,) = pod["initContainers"]
    assert verify["name"] == VERIFY
    args = parsed_verify(verify)
    assert args.path.startswith(OCI_SCHEME)
    reference = parse_reference(args.path)  # a digest, never a tag
    (server,) = pod["containers"]
    served = mount_of(server, "/mnt/models")
    assert served["readOnly"] is True
    image = volumes[served["name"]]["image"]
    assert image["reference"] == f"{reference.registry}/{reference.repository}@{reference.digest}"
    _assert_keys_from_the_config_map(pod, verify, args)
    credentials = {env["name"]: env["value"] for env in verify["env"]}["DOCKER_CONFIG"]
    secret = volumes[mount_of(verify, credentials)["name"]]["secret"]
    assert secret["items"] == [{"key": ".dockerconfigjson", "path": "config.json"}], "a docker-registry Secret, as Docker's config.json"
    assert {"name": secret["secretName"]} in pod["imagePullSecrets"], "the kubelet pulls the volume with the same credentials"
    assert "sizeLimit" in volumes[mount_of(verify, "/tmp")["name"]]["emptyDir"], "the layers are pulled into /tmp"


def _assert_keys_from_the_config_map(pod: Json, verify: Json, args: Any) -> None:
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    for key_file in args.public_keys:
        mount = mount_of(verify, str(key_file))
        assert mount["readOnly"] is True
        config_map = volumes[mount["name"]]["configMap"]["name"]
        assert config_map == "onnx-import-verify-keys" and key_file.name == "public-keys.pem"


def test_the_public_keys_config_maps_are_one_file() -> None:
    assert (FOLDER / "configmap-verify-keys.yaml").read_bytes() == (OCI / "configmap-verify-keys.yaml").read_bytes()
    keys = yaml_document(FOLDER / "configmap-verify-keys.yaml")
    assert keys["metadata"]["name"] == "onnx-import-verify-keys" and set(keys["data"]) == {"public-keys.pem"}
