"""What a request body costs the HTTP layer alone: uvicorn's h11 protocol, the
service's hardened one (service/server/h11_protocol.py: h11 with its fast path for
Content-Length bodies) and uvicorn's httptools protocol, side by side.

Each protocol serves a tiny ASGI app that reads a body and drops it; curl
POSTs the same file (default: the 805 MB .cache/bench/weights-inline.onnx of
bench/make_models.py) `--runs` times, and the server's CPU time (user +
system, from /proc) and curl's wall time are reported per run. httptools is
not a dependency of the service: its row is measured where it is importable
(e.g. `pip install httptools` into a scratch environment and
`PYTHONPATH=...site-packages`), else reported as not measured.

Usage: .venv/bin/python bench/http_body_bench.py [--file PATH] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_FILE = REPO / ".cache" / "bench" / "weights-inline.onnx"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")

SERVER = """
import sys
import uvicorn
sys.path.insert(0, {repo!r})

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({{"type": "lifespan.startup.complete"}})
        await send({{"type": "lifespan.shutdown.complete"}})
        return
    total, more = 0, True
    while more:
        message = await receive()
        total += len(message.get("body", b""))
        more = message.get("more_body", False)
    body = str(total).encode()
    await send({{"type": "http.response.start", "status": 200, "headers": [(b"content-length", str(len(body)).encode())]}})
    await send({{"type": "http.response.body", "body": body}})

kind = {kind!r}
if kind == "hardened":
    from service.server.h11_protocol import protocol_class
    http = protocol_class(10.0)
else:
    http = kind
uvicorn.run(app, host="127.0.0.1", port={port}, http=http, log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def wait_for(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.05)
    raise RuntimeError(f"the server on port {port} did not start")


def measure(kind: str, path: Path, runs: int) -> list[tuple[float, float]]:
    """(curl's seconds, the server's CPU seconds) per run."""
    port = free_port()
    server = subprocess.Popen([sys.executable, "-c", SERVER.format(repo=str(REPO), kind=kind, port=port)])
    try:
        wait_for(port, time.monotonic() + 30)
        found = []
        for _ in range(runs):
            before = cpu_seconds(server.pid)
            done = subprocess.run(
                ["curl", "-s", "-w", " %{time_total}", "--data-binary", f"@{path}", "-H", "Content-Type: application/octet-stream",
                 f"http://127.0.0.1:{port}/"],
                capture_output=True, text=True, check=True, timeout=300,
            )  # fmt: skip
            received, seconds = done.stdout.split()
            if int(received) != path.stat().st_size:
                raise RuntimeError(f"{kind}: the app received {received} bytes of {path.stat().st_size}")
            found.append((float(seconds), cpu_seconds(server.pid) - before))
        return found
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    if not args.file.is_file():
        parser.error(f"{args.file} is missing: python bench/make_models.py makes it")
    size = args.file.stat().st_size
    print(f"{size / 1e6:.0f} MB body, {args.runs} runs, {os.cpu_count()} cores")
    print("| protocol | server CPU per run (median) | CPU per GB | receiving rate by CPU | curl's time (median) |")
    print("| --- | --- | --- | --- | --- |")
    for kind in ("h11", "hardened", "httptools"):
        if kind == "httptools" and importlib.util.find_spec("httptools") is None:
            print("| uvicorn httptools | not measured: httptools is not importable here | | | |")
            continue
        runs = measure(kind, args.file, args.runs)
        cpu = statistics.median(used for _, used in runs)
        wall = statistics.median(seconds for seconds, _ in runs)
        name = {"h11": "uvicorn h11", "hardened": "service (h11, fast path)", "httptools": "uvicorn httptools"}[kind]
        print(f"| {name} | {cpu:.2f} s | {cpu / (size / 1e9):.2f} s | {size / cpu / 1e9:.2f} GB/s | {wall:.2f} s |")


if __name__ == "__main__":
    main()
