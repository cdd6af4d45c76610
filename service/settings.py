"""Every setting of the service: a command-line flag and an environment variable.

Owns `Settings` (frozen, validated) and `load_settings(argv, environ)`. Each
setting `--some-name` is also read from `ONNX_SERVICE_SOME_NAME`; the flag wins
over the variable, the variable over the default. Defaults are the safe ones
(loopback address, bounded uploads, bounded workers). Sizes accept a unit
(`512MiB`, `2GiB`, `1.5G`, plain bytes). Test hooks (`--debug-worker-sleep`
and the per-request sleep header) are refused unless
`ONNX_SERVICE_TEST_HOOKS=1` is set in the environment.
"""

from __future__ import annotations

import argparse
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

ENV_PREFIX = "ONNX_SERVICE_"
TEST_HOOKS_VARIABLE = "ONNX_SERVICE_TEST_HOOKS"
REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA_ROOT = REPO / "testdata" / "samples"
DEFAULT_STORE = Path("state") / "store"

KIB = 1 << 10
MIB = 1 << 20
GIB = 1 << 30
_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": KIB,
    "m": 1000**2, "mb": 1000**2, "mib": MIB,
    "g": 1000**3, "gb": 1000**3, "gib": GIB,
    "t": 1000**4, "tb": 1000**4, "tib": 1 << 40,
}  # fmt: skip
_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*")


class SettingsError(ValueError):
    """A setting has a value the service refuses to start with."""


def parse_size(text: str) -> int:
    """`2GiB` -> 2147483648; `1.5M` -> 1500000; `4096` -> 4096."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise SettingsError(f"{text!r} is not a size (a number with an optional unit such as KiB, MiB, GiB)")
    return int(float(match.group(1)) * _UNITS[unit])


def _parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise SettingsError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value):
        raise SettingsError(f"{text!r} is not a finite number of seconds")
    return value


def _parse_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SettingsError(f"{text!r} is not an integer") from None


@dataclass(frozen=True, slots=True)
class Settings:
    """The validated settings. Sizes in bytes, durations in seconds."""

    host: str = "127.0.0.1"
    port: int = 8000
    data_root: Path = DEFAULT_DATA_ROOT
    store: Path = DEFAULT_STORE
    workers: int = max(1, os.cpu_count() or 1)
    queue: int = 64
    worker_memory: int = 2 * GIB
    worker_cpu_seconds: int = 60
    worker_timeout: float = 120.0
    max_upload: int = 2 * GIB
    max_upload_total: int = 16 * GIB
    store_max_bytes: int = 64 * GIB
    max_external_files: int = 1000
    log_level: str = "info"
    debug_worker_sleep: float = 0.0  # test hook: the worker sleeps before reading
    test_hooks: bool = False  # set from ONNX_SERVICE_TEST_HOOKS, never a flag

    def __post_init__(self) -> None:
        def require(condition: bool, message: str) -> None:
            if not condition:
                raise SettingsError(message)

        require(bool(self.host) and "\0" not in self.host, "--host must be a host name or address")
        require(0 <= self.port <= 65535, f"--port must be within 0 to 65535, not {self.port}")
        require(1 <= self.workers <= 256, f"--workers must be within 1 to 256, not {self.workers}")
        require(0 <= self.queue <= 100_000, f"--queue must be within 0 to 100000, not {self.queue}")
        require(self.worker_memory >= 128 * MIB, "--worker-memory must be at least 128MiB (the worker's runtime alone takes about 95MiB)")
        require(1 <= self.worker_cpu_seconds <= 86_400, "--worker-cpu-seconds must be within 1 to 86400")
        require(0.1 <= self.worker_timeout <= 86_400, "--worker-timeout must be within 0.1 to 86400 seconds")
        require(self.max_upload >= 1, "--max-upload must be positive")
        require(self.max_upload_total >= self.max_upload, "--max-upload-total must be at least --max-upload")
        require(self.store_max_bytes >= MIB, "--store-max-bytes must be at least 1MiB")
        require(1 <= self.max_external_files <= 100_000, "--max-external-files must be within 1 to 100000")
        require(self.log_level in ("critical", "error", "warning", "info", "debug"), f"--log-level {self.log_level!r} is not a level")
        require(self.debug_worker_sleep >= 0, "--debug-worker-sleep must not be negative")
        require(
            self.debug_worker_sleep == 0 or self.test_hooks,
            f"--debug-worker-sleep is a test hook: refused unless {TEST_HOOKS_VARIABLE}=1",
        )
        require(self.data_root.is_dir(), f"--data-root {str(self.data_root)!r} is not a directory")


_PARSERS: dict[str, Callable[[str], object]] = {
    "host": str,
    "port": _parse_int,
    "data_root": Path,
    "store": Path,
    "workers": _parse_int,
    "queue": _parse_int,
    "worker_memory": parse_size,
    "worker_cpu_seconds": _parse_int,
    "worker_timeout": _parse_seconds,
    "max_upload": parse_size,
    "max_upload_total": parse_size,
    "store_max_bytes": parse_size,
    "max_external_files": _parse_int,
    "log_level": str.lower,
    "debug_worker_sleep": _parse_seconds,
}

_HELP = {
    "host": "address to listen on",
    "port": "port to listen on (0: any free port)",
    "data_root": "folder of server-side models (POST /models with a JSON path)",
    "store": "folder of the content-addressed store (created if missing)",
    "workers": "imports running at once (default: CPU count)",
    "queue": "imports that may wait for a worker; beyond that 503",
    "worker_memory": "memory cap of one import worker (RLIMIT_DATA)",
    "worker_cpu_seconds": "CPU-time cap of one import worker (RLIMIT_CPU)",
    "worker_timeout": "wall-clock deadline of one import worker, in seconds",
    "max_upload": "largest model part of an upload",
    "max_upload_total": "largest upload in all (model and external data)",
    "store_max_bytes": "store size cap; least recently used models are evicted",
    "max_external_files": "external data files one model may name",
    "log_level": "critical, error, warning, info or debug",
    "debug_worker_sleep": f"TEST HOOK (needs {TEST_HOOKS_VARIABLE}=1): seconds each worker sleeps before reading",
}


def env_name(field_name: str) -> str:
    return ENV_PREFIX + field_name.upper()


def load_settings(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from flags, then environment variables, then defaults."""
    environ = os.environ if environ is None else environ
    parser = argparse.ArgumentParser(prog="python -m service", description="Sandboxed ONNX import service.")
    for name, _ in _PARSERS.items():
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, dest=name, default=None, metavar="VALUE", help=f"{_HELP[name]} (env {env_name(name)})")
    arguments = vars(parser.parse_args(argv))
    values: dict[str, object] = {}
    for setting in fields(Settings):
        if setting.name == "test_hooks":
            continue
        text = arguments.get(setting.name)
        if text is None:
            text = environ.get(env_name(setting.name))
        if text is not None:
            try:
                values[setting.name] = _PARSERS[setting.name](text)
            except SettingsError as error:
                raise SettingsError(f"--{setting.name.replace('_', '-')}: {error}") from None
    values["test_hooks"] = environ.get(TEST_HOOKS_VARIABLE) == "1"
    return Settings(**values)  # type: ignore[arg-type]
