"""Helpers of the service tests: a real `python -m service` on a free port.

`ServiceProcess` starts the server as a subprocess (its own store and data
root; `python -m support.faulty_service` instead of `python -m service` when
its environment asks for test faults, `support.faults.FaultPlan.env()`),
waits for /readyz, and stops it with SIGTERM; what it shares with the
service in the test process (support.in_process_service) is
`ServiceUnderTest`. Also: finding the import
workers (children of the fork server, a child of the service) through /proc,
the content-derived id as documented in service/app.py, and the reference
SHA-256 of a tensor from the onnx package (tools/onnx_dump.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from service.settings import Settings
from service.store.work_area import is_probe
from support.fault_worker import SLEEPER_NAME
from support.faults import FAULTS, FAULTS_VARIABLE, FaultSandbox
from support.paths import REPO

SAMPLES = REPO / "testdata" / "samples"
# On the fleet store (a both_stores module's [fleet] round: support/servers.py's
# `store_kind` sets FLEET to the session's FleetServers, None otherwise), every
# ServiceProcess stores on S3 and indexes in PostgreSQL, its `store` folder
# being its --cache-dir; a test reading the local store's files is marked
# `local_store` and skips there.
FLEET: Any = None
FLEET_STORES: dict[Path, tuple[str, str]] = {}  # a store folder -> its (s3 URL, database URL): processes given one folder share it
PROBLEM_FIELDS = ("type", "title", "status", "detail", "instance")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ServiceUnderTest:
    """What a service the tests start has, in a process of its own or in the
    test process (support.in_process_service): its address and a client, its
    store (in fleet mode, the session's S3 and PostgreSQL) and what is in it."""

    def __init__(self, store: Path, data_root: Path, *args: str) -> None:
        self.store = store
        self.data_root = data_root
        self.args = list(args)
        self.port = 0
        self.fleet_store: tuple[str, str] | None = None  # (s3 URL, database URL) in fleet mode

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def fleet_arguments(self) -> list[str]:
        """In fleet mode, unless the test names a store, the flags that store
        the service on the session's S3 and PostgreSQL (chosen once per store
        folder: a restart, or a second service, finds the same models)."""
        if FLEET is None or any(arg.startswith("--store") for arg in self.args):
            return []
        if self.store not in FLEET_STORES:
            FLEET_STORES[self.store] = (FLEET.new_store_url(), FLEET.new_database())
        self.fleet_store = FLEET_STORES[self.store]
        return ["--store", self.fleet_store[0], "--database", self.fleet_store[1], "--cache-dir", str(self.store)]

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=60, **kwargs)

    def stored_contents(self) -> set[str]:
        """The ids of the models whose content is in the store: folders in a
        local one; in fleet mode, those with objects in the bucket (recorded or not)."""
        if self.fleet_store is None:
            models = self.store / "models"
            return {folder.name for folder in models.iterdir()} if models.exists() else set()
        from service.store.backends import open_store

        for name, value in FLEET.environ.items():
            os.environ.setdefault(name, value)
        settings = Settings(store=self.fleet_store[0], database=self.fleet_store[1], cache_dir=self.store.parent / "inspect-cache")
        store = open_store(settings)
        store.open_storage()
        try:
            return {place.split("/")[0] for place in store.content.places()}
        finally:
            store.close()

    def content_stored(self, model_id: str) -> bool:
        return model_id in self.stored_contents()

    def temporary_files(self) -> list[Path]:
        """What the service left in its per-process tmp folders (not the readiness
        check's probe, which a listing may meet while it is written; a folder
        removed while it is listed was not left: it is listed again)."""
        for _ in range(10):
            try:
                return [p for folder in (self.store / "tmp").iterdir() if folder.is_dir() for p in folder.rglob("*") if not is_probe(p)]
            except FileNotFoundError:
                time.sleep(0.05)
        raise AssertionError("the store's tmp folders kept changing while they were listed")


class ServiceProcess(ServiceUnderTest):
    def __init__(self, store: Path, data_root: Path, *args: str, env: dict[str, str] | None = None, log: Path | None = None) -> None:
        super().__init__(store, data_root, *args)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ONNX_SERVICE_")}
        self.env.update(env or {})
        self.log = log or store.parent / f"service-{id(self)}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def wait_for_log(self, text: str, timeout: float = 20.0) -> None:
        """Wait until the service has logged `text`; fail with the log's tail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while text not in (logged := self.log.read_text(errors="replace")):
            assert time.monotonic() < deadline, f"{text!r} never appeared in the service log:\n{logged[-2000:]}"
            time.sleep(0.02)

    def start(self, timeout: float = 30.0, wait_for: str = "/readyz") -> ServiceProcess:
        """Start the service and wait until `wait_for` answers 200 (`/healthz`
        for a replica started before its storage, which is not ready yet)."""
        self.port = free_port()
        command = [
            sys.executable,
            "-m",
            "support.faulty_service" if FAULTS_VARIABLE in self.env else "service",
            "--port",
            str(self.port),
            "--store",
            str(self.store),
            "--data-root",
            str(self.data_root),
        ]
        if not any(arg.startswith("--http-workers") for arg in self.args):
            # one front end: the tests reach into it (its children, its log); test_front_ends.py runs several
            command += ["--http-workers", "1"]
        if fleet := self.fleet_arguments():
            command += fleet
            self.env.update(FLEET.environ)
        if FAULTS_VARIABLE in self.env:  # support.faulty_service, from tests/
            self.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "tests"), self.env.get("PYTHONPATH")]))
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen([*command, *self.args], cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the service exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + wait_for, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"the service did not become ready:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def worker_pids(self) -> list[int]:
        """Import workers: grandchildren of the service (fork server children)."""
        assert self.process is not None
        workers = []
        for child in children_of(self.process.pid):
            workers.extend(children_of(child))
        return workers

    def sleeping_workers(self) -> list[int]:
        """The workers a test fault holds (`X-Test-Worker-Sleep`), at any depth
        under the service: named support.fault_worker.SLEEPER_NAME, unlike the
        readiness probe's worker, which may run beside them."""
        assert self.process is not None
        found: list[int] = []
        parents = [self.process.pid]
        while parents:
            children = [child for parent in parents for child in children_of(parent)]
            found.extend(pid for pid in children if process_name(pid) == SLEEPER_NAME)
            parents = children
        return found


@contextlib.contextmanager
def serving(store: Path, data_root: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[ServiceProcess]:
    """A started service, stopped on the way out (for fixtures)."""
    service = ServiceProcess(store, data_root, *args, env=env).start()
    try:
        yield service
    finally:
        service.stop()


@contextlib.contextmanager
def saturated(tmp_path: Path) -> Iterator[ServiceProcess]:
    """A server of one import place and no queue, its place held by an import
    whose worker sleeps 3 s (test faults), so another import meanwhile is a
    503 with Retry-After; the holding import is waited for on the way out."""
    root = copy_samples(tmp_path / "saturated-root")
    with serving(tmp_path / "saturated-store", root, "--workers", "1", "--queue", "0", env=FAULTS) as busy:
        holder = threading.Thread(
            target=lambda: httpx.post(busy.url + "/models", json={"path": "add.onnx"}, headers={"X-Test-Worker-Sleep": "3"}, timeout=60)
        )
        holder.start()
        try:
            deadline = time.monotonic() + 20
            while not httpx.get(busy.url + "/readyz", timeout=10).json()["saturated"]:
                assert time.monotonic() < deadline, "the holding import never started"
                time.sleep(0.05)
            yield busy
        finally:
            holder.join()


def read_until_closed(connection: socket.socket, timeout: float = 10.0) -> tuple[bytes, bool]:
    """What the server sends until it closes the connection (True) or
    `timeout` seconds pass (False)."""
    received = b""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        connection.settimeout(left)
        try:
            chunk = connection.recv(65536)
        except TimeoutError:
            break
        except ConnectionResetError:
            return received, True
        if not chunk:
            return received, True
        received += chunk
    return received, False


@contextlib.contextmanager
def started_sandbox() -> Iterator[FaultSandbox]:
    """A started `Sandbox` in this process, its workers the test-only entry point
    (`support.faults.FaultSandbox`: jobs with faults; its fork server a child
    of this process, stopped on the way out for the modules after)."""
    import multiprocessing.forkserver

    started = FaultSandbox(Settings(worker_timeout=20.0))
    started.start()
    try:
        yield started
    finally:
        with contextlib.suppress(Exception):
            multiprocessing.forkserver._forkserver._stop()  # type: ignore[attr-defined]


def process_name(pid: int) -> str:
    """The process's name (/proc/PID/comm); "" once it has gone."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def children_of(pid: int) -> list[int]:
    """The pids of `pid`'s child processes (from /proc, every thread's)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found.extend(int(p) for p in (task / "children").read_text().split())
    return found


def open_files(pid: int) -> list[str]:
    """What the process's descriptors hold (/proc; one closed between the listing and its reading is left out)."""
    held = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(FileNotFoundError):
            held.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
    return held


def model_id_of(model: bytes, externals: dict[str, bytes], origin: str = "upload") -> str:
    """The documented id: SHA-256 over the origin ("upload" or "path") and the
    model's and the external files' SHA-256s."""
    digest = hashlib.sha256(f"onnx-import-id/2\n{origin}\n{hashlib.sha256(model).hexdigest()}\n".encode())
    for location in sorted(externals):
        digest.update(location.encode() + b"\0" + hashlib.sha256(externals[location]).hexdigest().encode() + b"\n")
    return digest.hexdigest()


def onnx_tensor_at(model: Any, field_path: str) -> Any:
    """The onnx TensorProto at a field path such as ModelProto.graph.node[0].attribute[1].t."""
    target = model
    for segment in field_path.split(".")[1:]:
        match = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", segment)
        assert match, segment
        target = getattr(target, match.group(1))
        if match.group(2) is not None:
            target = target[int(match.group(2))]
    return target


def reference_sha256(model_path: Path, field_path: str) -> str:
    import onnx
    from onnx_dump import tensor_sha256

    model = onnx.load(str(model_path))  # loads external data from the model's folder
    return str(tensor_sha256(onnx_tensor_at(model, field_path)))


def assert_problem(response: httpx.Response, status: int, slug: str | None = None) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json"), response.headers
    body: dict[str, Any] = response.json()
    for name in PROBLEM_FIELDS:
        assert name in body, (name, body)
    assert body["status"] == status
    assert body["type"].startswith("https://onnx-import.example/problems/")
    if slug is not None:
        assert body["type"].endswith("/" + slug), body
    assert len(body["detail"]) <= 500
    return body


def copy_samples(target: Path) -> Path:
    shutil.copytree(SAMPLES, target)
    return target
