"""The service as it ships, not the checkout: wheel, fresh install, unprivileged.

The wheel is built from exactly the files the Dockerfile copies into its
builder stage (tests/support/wheel_builds.py), its importer compiled where a C
compiler works, as the image's is (else pure; /healthz must name the build),
installed into a new virtual environment in a temporary folder
outside the source tree, and `python -m service` is started from there the way
the image starts it: the image's environment (Dockerfile ENV, with /tmp, /data
and /store moved into the test folder, and the loopback address), the image's
uid (10001; as root the test switches to it with setpriv: no capabilities, no
new privileges; as another user it runs as that user), a working directory it
cannot write, the install and the data root read-only, and (as root, where
mount namespaces are permitted) the whole root file system remounted
read-only but for the store folder and a temporary folder, as
`read_only: true` does. Then, over HTTP: readiness, an upload, its summary,
tensor bytes compared with the model's own values, a server-side model with
external data, problem responses, the front end's memory against the
deployments' budget, nothing written elsewhere, a second replica sharing the
store, and a clean stop on SIGTERM. Setup takes 10 to 30 seconds (pip's cache
holds the dependencies), plus about a minute to compile the importer unless
that wheel was built already (tests/support/wheel_builds.py caches it by the
build context's digest; `bash tools/dev.sh test` builds it beside its setup).
"""

from __future__ import annotations

import contextlib
import ctypes.util
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
import pytest
from build_backend import compiler_problem
from onnx import TensorProto, helper
from support.deploy_files import DEPLOY, FRONT_END_ANNOTATION, k8s_quantity, read_dockerfile, yaml_document
from support.paths import REPO
from support.service_harness import assert_problem
from support.wheel_builds import Wheels

pytestmark = pytest.mark.slow

START_SECONDS = 90
STOP_SECONDS = 30
LISTENING = re.compile(r"Uvicorn running on http://127\.0\.0\.1:(\d+)")
ID = re.compile(r"[0-9a-f]{64}")

WEIGHT = np.arange(6, dtype=np.float32).reshape(2, 3) / 4  # stored as raw_data
COUNTS = np.array([-3, 0, 1 << 40], dtype=np.int64)  # stored in int64_data (converted by the worker)
EXTERNAL = np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)  # in the data root, as external data


@dataclass
class Replica:
    """One running `python -m service` of the installed wheel."""

    log: Path
    process: subprocess.Popen[bytes] | None = None
    url: str = ""
    exit_code: int | None = None
    stop_seconds: float = 0.0

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else "(no log)"

    def stop(self) -> None:
        """SIGTERM, as a container runtime stops it; SIGKILL only past STOP_SECONDS."""
        if self.process is None or self.exit_code is not None:
            return
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)  # our own session: the service and its workers
            self.process.wait()
            self.exit_code = -signal.SIGKILL
        self.stop_seconds = time.monotonic() - started


@dataclass
class Packaged:
    """The installed service, its folders, and its running replicas."""

    root: Path
    venv: Path
    data: Path
    store: Path
    tmp: Path
    uid: int
    dedicated_uid: bool  # True: a uid of its own (files it owns anywhere are its writes)
    prefix: list[str]  # runs a command as that uid (and on a read-only root, where possible)
    replicas: list[Replica] = field(default_factory=list)
    install_state: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    build: str = ""  # the importer's build in the wheel: compiled or pure

    @property
    def first(self) -> Replica:
        return self.replicas[0]


# --- running as the image's user


def switch_user(uid: int, gid: int) -> list[str]:
    """The command prefix that runs a command as uid:gid (root only)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root but util-linux's setpriv is missing: cannot switch to an unprivileged user")
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--"]


def read_only_root(root: Path, writable: list[Path]) -> tuple[list[str], str]:
    """The prefix that runs a command in a mount namespace of its own where `/`
    is read-only but for `writable` (what `read_only: true` and
    readOnlyRootFilesystem do), and how it went: root only, and only where
    mount namespaces are permitted; elsewhere file permissions alone guard."""
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or unshare is None:
        return [], "not emulated (needs root and unshare); file permissions only"
    binds = " && ".join(f'mount --bind "${n}" "${n}"' for n in range(1, len(writable) + 1))
    script = f'{binds} && mount -o remount,bind,ro / && shift {len(writable)} && exec "$@"'
    prefix = [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", *map(str, writable)]
    probe = f'touch "{writable[0]}/.probe" && rm "{writable[0]}/.probe" && ! touch "{root}/.probe" 2>/dev/null'
    result = subprocess.run([*prefix, "/bin/sh", "-c", probe], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        return [], f"not emulated (a mount namespace is not permitted here: {result.stderr.strip()[:200]}); file permissions only"
    return prefix, "emulated: / read-only in a mount namespace of the service's own, but for the store and tmp"


def base_interpreter(prefix: list[str]) -> str:
    """A Python >= 3.11 the service's user can run (a venv links to it).

    The test's own interpreter may live where that user cannot read (a pyenv
    under /root: its binary may still start, but with another Python's
    standard library); the system's python3.11 then stands in (the image has
    its own). An interpreter qualifies when it reports the same version and
    prefix to that user as to us.
    """
    candidates = [os.path.realpath(getattr(sys, "_base_executable", sys.executable))]
    candidates += [shutil.which(name) or "" for name in ("python3.11", "python3.12", "python3.13", "python3")]
    candidates += ["/usr/bin/python3.11", "/usr/local/bin/python3.11"]
    probe = "import sys, venv, multiprocessing.forkserver; print(sys.version, sys.base_prefix, sys.version_info >= (3, 11))"
    tried = []
    for candidate in dict.fromkeys(c for c in candidates if c and os.path.exists(c)):
        seen = [
            subprocess.run([*user, candidate, "-c", probe], capture_output=True, text=True, timeout=60, cwd="/") for user in ([], prefix)
        ]
        if all(r.returncode == 0 for r in seen) and seen[0].stdout == seen[1].stdout and seen[0].stdout.strip().endswith("True"):
            return candidate
        tried.append(candidate)
    pytest.skip(f"no Python >= 3.11 that an unprivileged user can run (tried {tried})")


def tree_state(path: Path) -> dict[str, tuple[int, int, int]]:
    """Every entry under `path`: mode, size, mtime."""
    state = {}
    for entry in [path, *path.rglob("*")]:
        info = entry.lstat()
        state[str(entry)] = (info.st_mode, info.st_size, info.st_mtime_ns)
    return state


def read_only(path: Path) -> None:
    for folder, folders, files in os.walk(path):
        for name in [*folders, *files]:
            target = os.path.join(folder, name)
            if not os.path.islink(target):
                os.chmod(target, stat.S_IMODE(os.lstat(target).st_mode) & ~0o222)
    path.chmod(stat.S_IMODE(path.stat().st_mode) & ~0o222)


def writable_again(path: Path) -> None:
    path.chmod(stat.S_IMODE(path.stat().st_mode) | stat.S_IWUSR)
    for folder, folders, files in os.walk(path):
        for name in [*folders, *files]:
            target = os.path.join(folder, name)
            if not os.path.islink(target):
                os.chmod(target, stat.S_IMODE(os.lstat(target).st_mode) | stat.S_IWUSR)


# --- building and installing


def run(command: list[str], **options: Any) -> None:
    result = subprocess.run(command, capture_output=True, text=True, timeout=600, **options)
    assert result.returncode == 0, f"{' '.join(command)}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"


def wheel_for(root: Path, wheels: Wheels) -> tuple[Path, str]:
    """The wheel as the image builds it, into root/wheels, and its importer build:
    compiled where a C compiler works (as IMPORTER_BUILD=auto does), else pure."""
    build = "compiled" if compiler_problem() is None else "pure"
    (root / "wheels").mkdir()
    return Path(shutil.copy2(wheels(build), root / "wheels")), build


def install(wheel: Path, venv: Path, interpreter: str) -> None:
    """A fresh venv; the wheel and its dependencies (from the index, through pip's cache)."""
    run([interpreter, "-m", "venv", "--without-pip", str(venv)])
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "--disable-pip-version-check"]
    run([*pip, "install", "--quiet", "--no-input", str(wheel)])


# --- the models


def uploaded_model() -> bytes:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul")]
    initializers = [
        helper.make_tensor("w", TensorProto.FLOAT, WEIGHT.shape, WEIGHT.tobytes(), raw=True),
        helper.make_tensor("counts", TensorProto.INT64, COUNTS.shape, COUNTS.tolist()),
    ]
    graph = helper.make_graph(
        nodes,
        "packaged",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], producer_name="test_packaged_service")
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


def write_external_model(folder: Path) -> None:
    """`external.onnx` with its weight in `weights.bin` beside it."""
    weight = helper.make_tensor("e", TensorProto.FLOAT, EXTERNAL.shape, EXTERNAL.tobytes(), raw=True)
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "e"], ["y"])],
        "external",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save_model(model, folder / "external.onnx", save_as_external_data=True, location="weights.bin", size_threshold=0)
    for path in folder.iterdir():  # onnx writes external data owner-only; a data root is readable by the service
        path.chmod(0o644)
    assert (folder / "weights.bin").stat().st_size == EXTERNAL.nbytes


# --- the service


def launch(packaged: Packaged) -> Replica:
    """Start one more replica: the image's environment, its own port and log;
    returns once it is ready."""
    dockerfile = read_dockerfile()
    moved = {"/tmp": packaged.tmp, "/data": packaged.data, "/store": packaged.store}
    environment = {key: str(moved.get(value, value)) for key, value in dockerfile.runtime.env().items()}
    environment |= {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "ONNX_SERVICE_HOST": "127.0.0.1",  # the only address tests may use
        "ONNX_SERVICE_PORT": "0",  # any free port; read back from the log
        "ONNX_SERVICE_WORKERS": "2",
        "ONNX_SERVICE_HTTP_WORKERS": "2",  # as the deploy files set it, whatever this machine's CPU count
        "ONNX_SERVICE_WORKER_MEMORY": "1GiB",
    }
    for variable in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # this machine's numpy needs them where set
        if variable in os.environ:
            environment[variable] = os.environ[variable]
    workdir = packaged.root / "run"  # like the image's WORKDIR /: not writable
    workdir.mkdir(exist_ok=True)
    replica = Replica(packaged.root / f"replica-{len(packaged.replicas)}.log")
    packaged.replicas.append(replica)
    command = [*packaged.prefix, str(packaged.venv / "bin" / "python"), "-m", "service"]
    with replica.log.open("wb") as log:
        replica.process = subprocess.Popen(
            command, cwd=workdir, env=environment, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    deadline = time.monotonic() + START_SECONDS
    while not replica.url:
        if replica.process.poll() is not None:
            replica.exit_code = replica.process.returncode
            pytest.fail(f"the installed service exited with {replica.exit_code} at start:\n{replica.log_tail()}")
        assert time.monotonic() < deadline, f"the installed service did not listen within {START_SECONDS} s:\n{replica.log_tail()}"
        match = LISTENING.search(replica.log.read_text(errors="replace"))
        if match:
            replica.url = f"http://127.0.0.1:{match.group(1)}"
        time.sleep(0.1)
    with httpx.Client(base_url=replica.url, timeout=30) as client:
        while client.get("/readyz").status_code != 200:
            assert time.monotonic() < deadline, f"not ready within {START_SECONDS} s:\n{replica.log_tail()}"
            time.sleep(0.2)
    return replica


@pytest.fixture(scope="module")
def packaged(wheels: Wheels) -> Iterator[Packaged]:
    image_uid, image_gid = read_dockerfile().user_ids()
    as_root = os.geteuid() == 0
    uid, gid = (image_uid, image_gid) if as_root else (os.getuid(), os.getgid())
    prefix = switch_user(uid, gid) if as_root else []
    interpreter = base_interpreter(prefix)
    root = Path(tempfile.mkdtemp(prefix="onnx-packaged-"))  # outside the source tree
    root.chmod(0o755)
    service = Packaged(root, root / "venv", root / "data", root / "store", root / "tmp", uid, as_root, prefix)
    try:
        started = time.monotonic()
        wheel, service.build = wheel_for(root, wheels)
        install(wheel, service.venv, interpreter)
        how = f"{service.build} importer, {wheel.name}, {interpreter}"
        service.notes.append(f"packaged service: wheel built and installed in {time.monotonic() - started:.1f} s ({how})")
        service.data.mkdir()
        write_external_model(service.data)
        for folder in (service.store, service.tmp):
            folder.mkdir(mode=0o700)
            os.chown(folder, uid, gid)
        if not as_root:  # the install and the data root read-only to the service's own user too
            read_only(service.venv)
            read_only(service.data)
        read_only_prefix, how = read_only_root(root, [service.store, service.tmp])
        service.prefix = read_only_prefix + prefix
        service.notes.append(f"packaged service: read-only root {how}")
        service.install_state = tree_state(service.venv)
        launch(service)
        service.notes.append(f"packaged service: ready {time.monotonic() - started:.1f} s after the build started")
        yield service
    finally:
        for replica in service.replicas:
            replica.stop()
        if not as_root:
            for path in (service.venv, service.data):
                if path.exists():
                    writable_again(path)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture()
def client(packaged: Packaged) -> Iterator[httpx.Client]:
    replica = packaged.first
    if replica.exit_code is not None:
        pytest.fail(f"the service has stopped (exit {replica.exit_code}):\n{replica.log_tail()}")
    with httpx.Client(base_url=replica.url, timeout=60) as client:
        yield client


def upload(client: httpx.Client, model: bytes, name: str = "packaged.onnx") -> httpx.Response:
    return client.post("/models", files={"model": (name, model, "application/octet-stream")})


# --- the tests, in the order a user meets the service


def test_the_installed_wheel_is_what_runs(packaged: Packaged, report: list[str]) -> None:
    (wheel,) = (packaged.root / "wheels").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        top = {name.split("/")[0] for name in archive.namelist()}
    assert top == {"importer", "service", "onnx_import_service-0.1.0.dist-info"}
    where = subprocess.run(
        [str(packaged.venv / "bin" / "python"), "-c", "import service, importer; print(service.__file__); print(importer.__file__)"],
        capture_output=True,
        text=True,
        cwd=packaged.root,
        env={"PATH": "/usr/bin:/bin", "PYTHONSAFEPATH": "1", **{k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")}},
        timeout=60,
    )
    for line in where.stdout.split():
        assert Path(line).is_relative_to(packaged.venv), f"imported from {line}, not the fresh install"
    assert not Path(where.stdout.split()[0]).is_relative_to(REPO)
    report.extend(packaged.notes)


def test_a_plain_install_runs_the_default_checks(packaged: Packaged, tmp_path: Path) -> None:
    """The wheel installed without extras: `onnx-import check` runs the default
    checks (schema, shape, security) to a pass; shape's onnx is a dependency."""
    model = tmp_path / "plain.onnx"
    model.write_bytes(uploaded_model())
    done = subprocess.run(
        [str(packaged.venv / "bin" / "onnx-import"), "check", "plain.onnx"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONSAFEPATH": "1", **{k: v for k, v in os.environ.items() if k.startswith("OPENBLAS_")}},
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["verdict"] == "pass" and set(report["checks"]) == {"schema", "security", "shape"}


def test_readiness_reports_the_sandbox(packaged: Packaged, client: httpx.Client, report: list[str]) -> None:
    assert client.get("/healthz").json() == {"status": "ok", "importer_build": packaged.build}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["status"] == "ready" and body["fork_server"] is True and body["store_writable"] is True
    report.append(f"packaged service: worker network isolation as the unprivileged user: {body['network_isolation']}")
    report.append(f"packaged service: worker sandbox as the unprivileged user: {', '.join(body['worker_sandbox']) or 'none'}")
    if ctypes.util.find_library("seccomp") is not None:  # the seccomp filter needs no privileges
        assert "seccomp" in body["worker_sandbox"], body


def test_upload_summary_and_tensor_bytes(client: httpx.Client) -> None:
    model = uploaded_model()
    created = upload(client, model)
    assert created.status_code == 201, created.text
    summary = created.json()
    model_id = summary["id"]
    assert ID.fullmatch(model_id) and created.headers["location"] == f"/models/{model_id}"
    assert summary["model_file"]["size"] == len(model)
    assert [v["name"] for v in summary["graph"]["inputs"]] == ["x"]
    assert [v["name"] for v in summary["graph"]["outputs"]] == ["y"]
    assert {t["name"] for t in summary["tensors"]} == {"w", "counts"}

    assert client.get(f"/models/{model_id}").json() == summary
    graph = client.get(f"/models/{model_id}/graph")
    assert graph.status_code == 200 and graph.headers["content-type"].startswith("application/json")
    for name, reference in (("w", WEIGHT), ("counts", COUNTS)):
        tensor = client.get(f"/models/{model_id}/tensors/{name}")
        assert tensor.status_code == 200, tensor.text
        assert tensor.headers["content-type"] == "application/octet-stream"
        assert tensor.content == reference.astype(reference.dtype.newbyteorder("<")).tobytes(), name

    again = upload(client, model, "same-bytes-other-name.onnx")
    assert again.status_code == 200 and again.json()["id"] == model_id, "the same content is the same model"


def test_server_side_model_with_external_data(client: httpx.Client) -> None:
    created = client.post("/models", json={"path": "external.onnx"})
    assert created.status_code == 201, created.text
    summary = created.json()
    (tensor,) = summary["tensors"]
    assert tensor["source"] == "external" and tensor["dims"] == [4, 4]
    values = client.get(tensor["href"])
    assert values.status_code == 200 and values.content == EXTERNAL.tobytes()


def test_errors_are_problems(client: httpx.Client) -> None:
    malformed = assert_problem(upload(client, b"\x0f\xff not protobuf"), 422)
    assert malformed["kind"] == "Malformed"
    assert_problem(client.post("/models", json={"path": "../../etc/passwd"}), 400)
    assert_problem(client.get("/models/" + "0" * 64), 404)


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        pending += children.get(current, [])
    return found


def resident_bytes(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def test_front_end_fits_the_deployments_memory_budget(packaged: Packaged, client: httpx.Client, report: list[str]) -> None:
    """The front end (server, fork server, resource tracker: every process
    between imports) within the budget compose.yaml and deploy/ reserve."""
    process = packaged.first.process
    assert process is not None
    assert client.get("/readyz").status_code == 200
    budget = k8s_quantity(yaml_document(DEPLOY / "deployment.yaml")["metadata"]["annotations"][FRONT_END_ANNOTATION])
    processes = descendants(process.pid)
    resident = sum(resident_bytes(pid) for pid in processes)
    mib = 1 << 20
    used = f"{resident / mib:.0f} MiB resident in {len(processes)} processes"
    report.append(f"packaged service: front end {used} (budget {budget / mib:.0f} MiB)")
    assert resident <= budget


def test_nothing_is_written_outside_the_store_and_tmp(packaged: Packaged) -> None:
    allowed = (packaged.store, packaged.tmp)
    stray = []
    for folder, _, files in os.walk(packaged.root):
        if Path(folder).is_relative_to(packaged.store) or Path(folder).is_relative_to(packaged.tmp):
            continue
        for name in files:
            path = Path(folder, name)
            if path.lstat().st_uid == packaged.uid and packaged.dedicated_uid:
                stray.append(path)
    if packaged.dedicated_uid:  # the shared scratch places: nothing of the service's uid either
        for shared in (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")):
            with contextlib.suppress(OSError):
                stray += [p for p in shared.iterdir() if p.lstat().st_uid == packaged.uid and not p.is_relative_to(packaged.root)]
    assert stray == [], f"written outside {allowed}: {stray}"
    assert tree_state(packaged.venv) == packaged.install_state, "the install was written to"
    assert any(packaged.store.iterdir()), "the store is where imports go"


def test_a_second_replica_serves_what_the_first_imported(packaged: Packaged, client: httpx.Client) -> None:
    """Scale-out as deploy/ runs it: replicas share one store (here on one
    file system), so any replica answers for any model, and the same content
    posted to another replica is the same model."""
    model = uploaded_model()
    first = upload(client, model)
    assert first.status_code in (200, 201), first.text
    model_id = first.json()["id"]
    second = launch(packaged)
    try:
        with httpx.Client(base_url=second.url, timeout=60) as other:
            assert other.get(f"/models/{model_id}").json() == first.json()
            assert other.get(f"/models/{model_id}/tensors/w").content == WEIGHT.tobytes()
            again = upload(other, model)
            assert again.status_code == 200 and again.json()["id"] == model_id
    finally:
        second.stop()
    assert second.exit_code in (0, -signal.SIGTERM), second.log_tail()
    assert client.get(f"/models/{model_id}/tensors/counts").content == COUNTS.tobytes(), "the first replica goes on"


def session_alive(session: int) -> bool:
    try:
        os.killpg(session, 0)
    except ProcessLookupError:
        return False
    return True


def test_sigterm_stops_the_service_cleanly(packaged: Packaged, report: list[str]) -> None:
    """As a container runtime stops it: a graceful shutdown, and no process left
    behind (uvicorn ends by re-raising the SIGTERM it handled, so exit -15)."""
    replica = packaged.first
    assert replica.process is not None
    replica.stop()
    report.append(f"packaged service: stopped {replica.stop_seconds:.1f} s after SIGTERM")
    assert replica.exit_code in (0, -signal.SIGTERM), replica.log_tail()
    log = replica.log.read_text()
    assert "Application shutdown complete" in log and "Traceback" not in log, replica.log_tail()
    deadline = time.monotonic() + 10
    while session_alive(replica.process.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not session_alive(replica.process.pid), "the fork server or a worker outlived the service"
