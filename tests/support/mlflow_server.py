"""A real MLflow tracking server for the registry gate's tests: `MlflowServer`.

`mlflow server` (from the `mlflow` test dependency) on the loopback, a free
port, a SQLite backend and `--serve-artifacts` into a folder of its own, with
what webhooks to a loopback service need (private addresses and http allowed,
a Fernet key for the secrets, the webhook list cached 1 s instead of 60).
`stop()` and `start()` again keep the port, the database and the artifacts:
the same server, restarted.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from support.service_harness import free_port


class MlflowServer:
    def __init__(self, folder: Path) -> None:
        from cryptography.fernet import Fernet

        self.folder = folder
        self.port = free_port()
        self.key = Fernet.generate_key().decode()
        self.log = folder / "mlflow.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180.0) -> MlflowServer:
        env = dict(os.environ)
        env.update(
            MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS="true",
            MLFLOW_WEBHOOK_ALLOWED_SCHEMES="http,https",
            MLFLOW_WEBHOOK_SECRET_ENCRYPTION_KEY=self.key,
            MLFLOW_WEBHOOK_CACHE_TTL="1",
        )
        command = [
            sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{self.folder / 'mlflow.db'}",
            "--artifacts-destination", str(self.folder / "artifacts"), "--serve-artifacts",
            "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
        ]  # fmt: skip
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                ["nice", "-n", "19", *command], cwd=self.folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mlflow server exited with {self.process.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"mlflow server did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """Stop the server and the processes it started (its own session)."""
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)  # what it left of its session
        self.process = None
