"""Service benchmark (issue 4): the sandbox's cost, measured.

- POST /models of a small model (about 10 KB) with the sandbox on: p50, p99
  and requests per second, from a load generator process on the same
  machine; every request sends a different model (a content-derived id would
  otherwise answer repeats without a worker). Sequential (one client) and
  concurrent (CONCURRENCY clients).
- The same import done in-process (importer.load_model), so the sandbox's
  cost is a ratio.
- GET of a 100 MB tensor: throughput, and the server's peak RSS (VmHWM)
  before and after, to show memory stays flat.

Usage: python bench/service_bench.py [--requests N] [--concurrency C]
Targets on 2 cores: p50 <= 25 ms, >= 40 requests/s, download >= 1 GB/s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent


def small_model(seed: int) -> bytes:
    """A ~10 KB model; `seed` makes its bytes (and so its id) unique."""
    weights = np.random.default_rng(seed).standard_normal((48, 48)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        f"small-{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 48])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 48])],
        [numpy_helper.from_array(weights, "w")],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    return data


def big_tensor_model(folder: Path) -> None:
    weights = np.random.default_rng(0).standard_normal(25_000_000).astype(np.float32)  # 100 MB
    graph = helper.make_graph(
        [helper.make_node("Identity", ["big"], ["y"])], "big", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "big")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    onnx.save(model, folder / "big.onnx", save_as_external_data=True, location="big.bin", size_threshold=0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def post_all(url: str, models: list[bytes], concurrency: int) -> tuple[list[float], float]:
    latencies: list[float] = []
    queue = list(models)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while queue:
            model = queue.pop()
            start = time.perf_counter()
            response = await client.post("/models", files={"model": ("m.onnx", model)})
            latencies.append(time.perf_counter() - start)
            if response.status_code != 201:
                raise SystemExit(f"unexpected {response.status_code}: {response.text[:300]}")

    start = time.perf_counter()
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
    return latencies, time.perf_counter() - start


def load_generator(url: str, first_seed: int, count: int, concurrency: int) -> None:
    """Runs in its own process (see main): prints latencies in ms, then the wall time."""
    models = [small_model(seed) for seed in range(first_seed, first_seed + count)]
    latencies, wall = asyncio.run(post_all(url, models, concurrency))
    print(" ".join(f"{value * 1000:.3f}" for value in latencies))
    print(f"{wall:.6f}")


def run_load(url: str, first_seed: int, count: int, concurrency: int) -> tuple[list[float], float]:
    command = [sys.executable, __file__, "--load-generator", url, str(first_seed), str(count), str(concurrency)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout.splitlines()
    return [float(v) for v in output[0].split()], float(output[1])


def in_process_import_ms(folder: Path, count: int) -> float:
    from importer import load_model

    times = []
    for seed in range(count):
        path = folder / f"inproc-{seed}.onnx"
        path.write_bytes(small_model(10_000_000 + seed))
        start = time.perf_counter()
        load_model(path).close()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--load-generator", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.load_generator:
        url, first, count, concurrency = args.load_generator
        load_generator(url, int(first), int(count), int(concurrency))
        return
    folder = Path(tempfile.mkdtemp(prefix="service-bench-"))
    try:
        (folder / "root").mkdir()
        big_tensor_model(folder / "root")
        port = free_port()
        log = (folder / "service.log").open("wb")
        server = subprocess.Popen(
            [sys.executable, "-m", "service", "--port", str(port), "--store", str(folder / "store"), "--data-root", str(folder / "root"),
             "--http-workers", "1"],  # one front end: its memory is the figure
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(f"{url}/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.2)
            run_load(url, 0, 20, 1)  # warm-up
            print(f"machine: {os.cpu_count()} cores; {args.requests} distinct ~{len(small_model(0)) // 1000} KB models per run")
            inproc = in_process_import_ms(folder, 50)
            print(f"in-process import (importer.load_model): median {inproc:.2f} ms")
            for concurrency in (1, args.concurrency):
                latencies, wall = run_load(url, 1_000 * concurrency, args.requests, concurrency)
                p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
                print(
                    f"POST /models, {concurrency} client(s): p50 {p50:.1f} ms, p99 {p99:.1f} ms, {len(latencies) / wall:.1f} requests/s; "
                    f"p50 / in-process = {p50 / inproc:.1f}"
                )
            with httpx.Client(base_url=url, timeout=120) as client:
                model_id = client.post("/models", json={"path": "big.onnx"}).json()["id"]
                before = peak_rss_mb(server.pid)
                start, received = time.perf_counter(), 0
                with client.stream("GET", f"/models/{model_id}/tensors/big") as response:
                    for chunk in response.iter_raw(1 << 20):
                        received += len(chunk)
                seconds = time.perf_counter() - start
                after = peak_rss_mb(server.pid)
            print(
                f"GET 100 MB tensor (httpx client): {received / seconds / 1e9:.2f} GB/s ({seconds * 1000:.0f} ms); "
                f"server peak RSS {before:.0f} MB before, {after:.0f} MB after"
            )
            if shutil.which("curl"):  # a client in C, so that the figure is the server's
                speeds = []
                for _ in range(3):
                    result = subprocess.run(
                        ["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}", f"{url}/models/{model_id}/tensors/big"],
                        check=True, capture_output=True, text=True,
                    )  # fmt: skip
                    speeds.append(float(result.stdout) / 1e9)
                median_speed = statistics.median(speeds)
                print(f"GET 100 MB tensor (curl): median {median_speed:.2f} GB/s; server peak RSS {peak_rss_mb(server.pid):.0f} MB")
        finally:
            server.terminate()
            server.wait(timeout=30)
            log.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
