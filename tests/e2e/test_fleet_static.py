"""The fleet's compose files and images, checked offline (tests/e2e/test_container_fleet.py
builds and runs them for real where a container engine can be started).

- fleet/*/Dockerfile (SeaweedFS, PostgreSQL, HAProxy): hadolint with no
  finding at any level, as the service's Dockerfile (tests/e2e/test_deploy_static.py);
  no `# syntax=` line; every stage on the service's base (PYTHON_IMAGE, the
  same default); a numeric, non-root user; a health check.
- The service's Dockerfile installs the `fleet` extra (obstore, psycopg, psycopg-pool).
- compose.fleet.yaml: the Compose specification's JSON schema, alone and
  merged over compose.yaml (and `docker compose config` where the CLI is);
  every service hardened (read-only root, no capabilities, no-new-privileges,
  a non-root user); only the load balancer and the replicas published, on
  the loopback; the replicas configured alike but for their cache volumes,
  with settings the service accepts, sized for a 2-core host, no test hook;
  the S3 keys, bucket, database role, name and password the same wherever
  they are used, with the defaults and with the host's variables; HAProxy's
  servers exactly the replicas, checked on /readyz; no replica waits on
  the start of PostgreSQL, SeaweedFS or the bucket's creation (it waits for
  them itself, not ready: no start order is relied on).
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from support.deploy_files import COMPOSE, COMPOSE_FRONT_END, DOCKERFILE, compose_bytes, interpolate, read_dockerfile, yaml_document
from support.paths import REPO
from test_deploy_static import compose_errors, run_hadolint, settings_from

from service.settings.kinds import parse_size

FLEET_COMPOSE = REPO / "compose.fleet.yaml"
FLEET_IMAGES = REPO / "fleet"
FLEET_DOCKERFILES = sorted(FLEET_IMAGES.glob("*/Dockerfile"))
HAPROXY_CONFIG = FLEET_IMAGES / "haproxy" / "haproxy.cfg"
REPLICAS = ("onnx-import-1", "onnx-import-2", "onnx-import-3")
STORAGE = {"postgres", "seaweedfs", "s3-init"}  # what a replica's store needs: the database, S3, the bucket
PUBLISHED = {*REPLICAS, "load-balancer"}
SMALL_HOST_CPUS = 2
WRITABLE = {"/store", "/tmp"}
HOST_VARIABLES = {
    "ONNX_FLEET_BUCKET": "bucket-x",
    "ONNX_FLEET_PREFIX": "prefix-y",
    "ONNX_FLEET_S3_ACCESS_KEY": "access-z",
    "ONNX_FLEET_S3_SECRET_KEY": "secret-w",
    "ONNX_FLEET_DB_USER": "user_v",
    "ONNX_FLEET_DB_PASSWORD": "password-u",
    "ONNX_FLEET_DB_NAME": "db_t",
}

Json = dict[str, Any]


def fleet_document() -> Json:
    return yaml_document(FLEET_COMPOSE)


def merged(base: Json, override: Json) -> Json:
    """`override` over `base` as Compose merges them, for what these files use: mappings key by key, the rest replaced."""
    result: Json = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def fleet_services(variables: dict[str, str] | None = None) -> dict[str, Json]:
    """The fleet's services, interpolated with `variables` as the host's environment (none: the defaults)."""
    services = interpolate(fleet_document(), variables or {})["services"]
    assert isinstance(services, dict)
    return {name: service for name, service in services.items() if name != "onnx-import"}


# --- the images


@pytest.mark.parametrize("dockerfile", FLEET_DOCKERFILES, ids=lambda path: path.parent.name)
def test_fleet_dockerfiles_have_no_hadolint_finding(dockerfile: Path, tmp_path: Path) -> None:
    findings = run_hadolint(dockerfile, tmp_path)
    assert findings == [], "\n".join(f"line {f['line']}: {f['code']} {f['level']}: {f['message']}" for f in findings)


def test_every_fleet_image_is_built_here_on_the_services_base() -> None:
    assert {path.parent.name for path in FLEET_DOCKERFILES} == {"haproxy", "postgres", "seaweedfs"}
    default = read_dockerfile().arguments["PYTHON_IMAGE"]
    services = fleet_document()["services"]
    contexts = {str(service["build"]["context"]) for service in services.values() if "build" in service}
    assert contexts == {".", *(f"fleet/{path.parent.name}" for path in FLEET_DOCKERFILES)}
    for service in services.values():
        if "build" in service:
            assert service["build"]["args"]["PYTHON_IMAGE"] == "${PYTHON_IMAGE:-" + default + "}", service["build"]
            assert interpolate(service["build"]["args"], {"PYTHON_IMAGE": "base:x"})["PYTHON_IMAGE"] == "base:x"
    for path in FLEET_DOCKERFILES:
        text = path.read_text()
        assert not re.search(r"^#\s*syntax\s*=", text, re.IGNORECASE | re.MULTILINE), f"{path}: no frontend image"
        dockerfile = read_dockerfile(path)
        assert dockerfile.arguments == {"PYTHON_IMAGE": default}, path
        assert all(stage.base == "${PYTHON_IMAGE}" for stage in dockerfile.stages), path
        uid, gid = dockerfile.user_ids()
        assert uid >= 10000 and gid >= 10000, f"{path}: a numeric user of its own, not root"
        assert dockerfile.runtime.all("HEALTHCHECK"), path


def test_the_service_image_has_the_fleet_extra() -> None:
    with (REPO / "pyproject.toml").open("rb") as handle:
        extra = tomllib.load(handle)["project"]["optional-dependencies"]["fleet"]
    assert {re.split(r"[\[<>=]", requirement)[0] for requirement in extra} == {"obstore", "psycopg", "psycopg-pool"}
    dockerfile = read_dockerfile(DOCKERFILE)
    builder = " ".join(i.arguments for i in dockerfile.stage("builder").all("RUN"))
    runtime = " ".join(i.arguments for i in dockerfile.runtime.all("RUN"))
    assert 'extras["fleet"] + extras["runtime"] + extras["signing"]' in builder, "stage 1 builds those extras' wheels"
    assert '"onnx-import-service[fleet,runtime,signing]"' in runtime, "the runtime installs them"


# --- the compose file


def test_fleet_compose_matches_the_compose_specification() -> None:
    assert compose_errors(fleet_document()) == []
    assert compose_errors(merged(yaml_document(COMPOSE), fleet_document())) == []


def test_fleet_compose_schema_check_is_not_vacuous() -> None:
    broken = fleet_document()
    broken["services"]["postgres"]["read_only"] = ["not", "a", "boolean"]
    broken["services"]["seaweedfs"]["cap_dorp"] = ["ALL"]
    errors = compose_errors(broken)
    assert any("cap_dorp" in e for e in errors) and any("read_only" in e for e in errors), errors


def test_docker_compose_accepts_the_merged_files(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None or subprocess.run([docker, "compose", "version"], capture_output=True, timeout=60).returncode != 0:
        pytest.skip("no Docker Compose v2 CLI here: the files are checked against the Compose schema only")
    command = [docker, "compose", "--project-directory", str(REPO), "-f", str(COMPOSE), "-f", str(FLEET_COMPOSE), "config"]
    environment = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "DOCKER_CONFIG": str(tmp_path)}
    quiet = subprocess.run([*command, "--quiet"], capture_output=True, text=True, timeout=60, env=environment)
    assert quiet.returncode == 0, quiet.stderr
    services = subprocess.run([*command, "--services"], capture_output=True, text=True, timeout=60, env=environment)
    assert set(services.stdout.split()) == set(fleet_services()), "compose.yaml's single service is left out (profile single)"


def test_fleet_services_are_hardened() -> None:
    for name, service in fleet_services().items():
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"] and "cap_add" not in service, name
        assert "no-new-privileges:true" in service["security_opt"], name
        assert "privileged" not in service and "network_mode" not in service and "pid" not in service, name
        uid, _, gid = str(service["user"]).partition(":")
        assert int(uid) >= 10000 and int(gid) >= 10000, f"{name} runs as {service['user']}"
        limits = service["deploy"]["resources"]["limits"]
        assert 0 < float(limits["cpus"]) <= SMALL_HOST_CPUS and compose_bytes(limits["memory"]) > 0 and limits["pids"], name
        ports = [str(port) for port in service.get("ports", [])]
        assert bool(ports) == (name in PUBLISHED), f"{name}: only the load balancer and the replicas are published"
        assert all(port.startswith("127.0.0.1:") and port.endswith(":8000") for port in ports), (name, ports)
        for mount in service.get("volumes", []):
            assert mount["type"] in ("volume", "tmpfs") or mount.get("read_only") is True, (name, mount)
    published = [str(port).split(":")[1] for name in sorted(PUBLISHED) for port in fleet_services()[name]["ports"]]
    assert sorted(published) == ["8000", "8001", "8002", "8003"], "the load balancer on 8000, the replicas on 8001-8003"


def test_the_replicas_are_one_service_on_one_store(tmp_path: Path) -> None:
    services = fleet_services()
    replicas = [services[name] for name in REPLICAS]
    base = {k: v for k, v in replicas[0].items() if k not in ("ports", "volumes")}
    cache_volumes = set()
    for replica in replicas:
        assert {k: v for k, v in replica.items() if k not in ("ports", "volumes")} == base, "alike but for ports and volumes"
        mounts = {mount["target"]: mount for mount in replica["volumes"]}
        assert {target for target, mount in mounts.items() if not mount.get("read_only")} == WRITABLE
        assert mounts["/store"]["type"] == "volume"
        cache_volumes.add(mounts["/store"]["source"])
        assert mounts["/data"]["read_only"] is True and mounts["/tmp"]["type"] == "tmpfs"
    assert len(cache_volumes) == len(REPLICAS) and cache_volumes <= set(fleet_document()["volumes"]), "a cache volume each"
    replica = replicas[0]
    environment = replica["environment"]
    assert not [name for name in environment if "TEST" in name] and "entrypoint" not in replica, "test faults only in a test's override"
    settings = settings_from({k: v for k, v in environment.items() if k.startswith("ONNX_SERVICE_")}, tmp_path)
    assert settings.store_bucket == ("onnx-models", "store") and settings.database
    assert str(settings.cache_dir) == "/store" and settings.require_landlock
    with (REPO / "pyproject.toml").open("rb") as handle:
        version = tomllib.load(handle)["project"]["version"]
    assert replica["image"] == f"onnx-import-service:{version}", "compose.yaml's image"
    assert replica["build"]["context"] == "." and replica["build"]["dockerfile"] == "Dockerfile"
    assert replica["ipc"] == "none" and replica["init"] is True
    limits = replica["deploy"]["resources"]["limits"]
    tmpfs = next(mount for mount in replica["volumes"] if mount["type"] == "tmpfs")
    needed = settings.workers * settings.worker_memory + parse_size(replica[COMPOSE_FRONT_END]) + compose_bytes(tmpfs["tmpfs"]["size"])
    assert compose_bytes(limits["memory"]) >= needed, "memory >= workers x worker memory + front end + tmpfs"
    assert settings.workers <= float(limits["cpus"]) <= SMALL_HOST_CPUS, "a core per worker, on a 2-core host"
    grace = replica["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > settings.worker_timeout, "a stop lets a running import finish"


def test_no_replica_waits_on_the_start_of_its_storage() -> None:
    """A replica started before PostgreSQL or SeaweedFS answers (or before
    s3-init has made the bucket) stays up, not ready, and opens its store once
    they answer (tests/service/fleet/test_fleet_faults.py): the stack relies
    on that, not on start order. So no replica depends on them, the health
    check compose acts on is liveness (/healthz: a storage outage is no
    reason to restart), and readiness (/readyz) is what the load balancer
    checks; the one ordering left among the storage is s3-init's, a one-shot
    job started once SeaweedFS is up."""
    services = fleet_services()
    for name in REPLICAS:
        assert not set(services[name].get("depends_on", {})) & STORAGE, f"{name} waits on the start of its storage"
        assert "/healthz" in services[name]["healthcheck"]["test"][-1]
    waits = {(name, on) for name, service in services.items() for on in service.get("depends_on", {}) if on in STORAGE}
    assert waits == {("s3-init", "seaweedfs")}
    balancer = services["load-balancer"]["depends_on"]
    assert {condition["condition"] for condition in balancer.values()} == {"service_started"}, "HAProxy checks /readyz itself"


@pytest.mark.parametrize("variables", [{}, HOST_VARIABLES], ids=["defaults", "host variables"])
def test_keys_bucket_and_database_agree_wherever_they_are_used(variables: dict[str, str]) -> None:
    services = fleet_services(variables)
    seaweedfs, s3_init, postgres = (
        services["seaweedfs"]["environment"],
        services["s3-init"]["environment"],
        services["postgres"]["environment"],
    )
    keys = {(seaweedfs["AWS_ACCESS_KEY_ID"], seaweedfs["AWS_SECRET_ACCESS_KEY"])}
    keys.add((s3_init["AWS_ACCESS_KEY_ID"], s3_init["AWS_SECRET_ACCESS_KEY"]))
    for name in REPLICAS:
        environment = services[name]["environment"]
        keys.add((environment["AWS_ACCESS_KEY_ID"], environment["AWS_SECRET_ACCESS_KEY"]))
        assert environment["AWS_ENDPOINT_URL"] == s3_init["AWS_ENDPOINT_URL"] == "http://seaweedfs:8333"
        store = urlsplit(environment["ONNX_SERVICE_STORE"])
        assert (store.scheme, store.netloc) == ("s3", s3_init["S3_BUCKET"])
        database = urlsplit(environment["ONNX_SERVICE_DATABASE"])
        assert database.password is None, "the password in PGPASSWORD, not in the URL"
        assert (database.username, database.hostname, database.port) == (postgres["POSTGRES_USER"], "postgres", 5432)
        assert database.path == "/" + postgres["POSTGRES_DB"] and environment["PGPASSWORD"] == postgres["POSTGRES_PASSWORD"]
    assert len(keys) == 1 and all(keys.pop()), "one S3 identity, its keys everywhere the same"
    if variables:
        assert s3_init["S3_BUCKET"] == variables["ONNX_FLEET_BUCKET"]
        assert postgres["POSTGRES_PASSWORD"] == variables["ONNX_FLEET_DB_PASSWORD"]
        assert urlsplit(services[REPLICAS[0]]["environment"]["ONNX_SERVICE_STORE"]).path == "/" + variables["ONNX_FLEET_PREFIX"]


def test_haproxy_balances_exactly_the_replicas_checked_on_readyz() -> None:
    lines = [line.split("#")[0].split() for line in HAPROXY_CONFIG.read_text().splitlines()]
    lines = [words for words in lines if words]
    servers = {words[2] for words in lines if words[0] == "server"}
    assert servers == {f"{name}:8000" for name in REPLICAS}
    assert ["balance", "roundrobin"] in lines and ["option", "httpchk"] in lines
    check = next(words for words in lines if words[:2] == ["http-check", "send"])
    assert check[check.index("uri") + 1] == "/readyz"
    assert ["bind", ":8000"] in lines
    balancer = fleet_services()["load-balancer"]
    assert [str(port).rsplit(":", 1)[1] for port in balancer["ports"]] == ["8000"]
    assert set(balancer["depends_on"]) == set(REPLICAS)
