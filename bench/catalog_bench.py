"""Service benchmark for per-request work that must not grow with the model.

Against the real server (`python -m service`, sandbox on), on loopback:

1. A model of N one-element initializers with exporter-style names
   (`/model.12/Constant_3_output_0`, `onnx::Split_138`, ...), uploaded; then
   40 concurrent clients fetch 400 random tensors by their real names,
   percent-encoded. Measured: the front end's peak RSS growth (VmHWM during
   the workload minus VmRSS before it; the fork server and workers are other
   processes), `/healthz` latency polled every 20 ms throughout (p99, max),
   the size of `GET /models/{id}`, the POST's time, the GETs' latency under
   the 40 clients and one GET's own latency (200 sequential GETs: p50).
   N = 200,000 and 500,000.
2. POST of the 200,000-node model (`bench/make_models.py`: .cache/bench/nodes.onnx)
   by path, against `onnx.load` + `onnx.checker.check_model` in a fresh
   process, side by side in the same run (median of 3 each).

Usage: python bench/catalog_bench.py [--sizes 200000,500000] [--runs 3]
Bounds (issue 8): RSS growth <= 100 MB, /healthz p99 <= 100 ms, summary <= 2 MB,
tensor GET p50 <= 10 ms; node-heavy POST <= 2.0x onnx.load + check_model.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from service_bench import free_port, percentile  # noqa: E402

CLIENTS = 40
FETCHES = 400
HEALTH_PERIOD = 0.02


def exporter_name(index: int) -> str:
    kind = index % 4
    if kind == 0:
        return f"onnx::Split_{index}"
    if kind == 1:
        return f"/model.{index % 97}/Constant_{index}_output_0"
    if kind == 2:
        return f"model.layers.{index % 61}.mlp.w{index}"
    return f"/encoder/layer.{index % 13}/attention/Mul_{index}:0"


def initializer_model(count: int) -> tuple[bytes, list[str]]:
    names = [exporter_name(index) for index in range(count)]
    value = np.array([1.0], dtype=np.float32).tobytes()
    initializers = [helper.make_tensor(name, TensorProto.FLOAT, [1], value, raw=True) for name in names]
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "initializers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    data: bytes = model.SerializeToString()
    return data, names


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(field)


def reset_peak(pid: int) -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


class Server:
    def __init__(self, folder: Path, data_root: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (folder / "service.log").open("wb")
        command = [
            sys.executable,
            "-m",
            "service",
            "--port",
            str(self.port),
            "--store",
            str(folder / "store"),
            "--data-root",
            str(data_root),
            "--http-workers",
            "1",  # one front end: its memory is the figure
        ]
        self.process = subprocess.Popen(command, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz").status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError("the server did not start")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


async def health_poller(url: str, stop: asyncio.Event, latencies: list[float]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        while not stop.is_set():
            start = time.perf_counter()
            response = await client.get("/healthz")
            latencies.append(time.perf_counter() - start)
            assert response.status_code == 200
            await asyncio.sleep(HEALTH_PERIOD)


async def initializer_workload(server: Server, model: bytes, names: list[str]) -> dict[str, float]:
    stop = asyncio.Event()
    health: list[float] = []
    poller = asyncio.create_task(health_poller(server.url, stop, health))
    async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
        start = time.perf_counter()
        response = await client.post("/models", files={"model": ("initializers.onnx", model)})
        post_seconds = time.perf_counter() - start
        assert response.status_code == 201, response.text[:500]
        model_id = response.json()["id"]
        summary_bytes = len((await client.get(f"/models/{model_id}")).content)
        picks = random.Random(0).sample(range(len(names)), FETCHES)
        queue = list(picks)
        fetches: list[float] = []

        async def fetcher() -> None:
            while queue:
                index = queue.pop()
                started = time.perf_counter()
                got = await client.get(f"/models/{model_id}/tensors/{quote(names[index], safe='')}")
                fetches.append(time.perf_counter() - started)
                assert got.status_code == 200 and got.content == np.array([1.0], np.float32).tobytes(), got.text[:300]

        start = time.perf_counter()
        await asyncio.gather(*(fetcher() for _ in range(CLIENTS)))
        fetch_wall = time.perf_counter() - start
        alone: list[float] = []  # one client, one request at a time: the GET's own latency
        for index in picks[:200]:
            started = time.perf_counter()
            got = await client.get(f"/models/{model_id}/tensors/{quote(names[index], safe='')}")
            alone.append(time.perf_counter() - started)
            assert got.status_code == 200
    stop.set()
    await poller
    return {
        "post_s": post_seconds,
        "summary_kb": summary_bytes / 1000,
        "get_p50_ms": percentile(fetches, 0.5) * 1000,
        "get_p99_ms": percentile(fetches, 0.99) * 1000,
        "gets_wall_s": fetch_wall,
        "alone_p50_ms": percentile(alone, 0.5) * 1000,
        "health_p99_ms": percentile(health, 0.99) * 1000,
        "health_max_ms": max(health) * 1000,
        "health_samples": len(health),
    }


def reference_seconds(model: Path) -> float:
    """onnx.load + check_model in a fresh process: its whole wall time."""
    code = "import onnx, sys; m = onnx.load(sys.argv[1]); onnx.checker.check_model(m)"
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(model)], check=True)
    return time.perf_counter() - start


def reference_startup_seconds() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import onnx, onnx.checker"], check=True)
    return time.perf_counter() - start


def node_model_comparison(server: Server, data_root: Path, runs: int) -> None:
    model = data_root / "nodes.onnx"
    posts, references, startups = [], [], []
    with httpx.Client(base_url=server.url, timeout=600) as client:
        for _ in range(runs):
            start = time.perf_counter()
            response = client.post("/models", json={"path": model.name})
            posts.append(time.perf_counter() - start)
            assert response.status_code == 201, response.text[:300]
            client.delete(f"/models/{response.json()['id']}")  # so that the next POST imports and commits again
            references.append(reference_seconds(model))
            startups.append(reference_startup_seconds())
    post, reference, startup = statistics.median(posts), statistics.median(references), statistics.median(startups)
    print(
        f"POST of the 200,000-node model: median {post:.2f} s; onnx.load + check_model in a fresh process: "
        f"{reference:.2f} s ({reference - startup:.2f} s net of its {startup:.2f} s start-up); "
        f"ratio {post / reference:.2f} (bound 2.0), {post / (reference - startup):.2f} net of start-up"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="200000,500000")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    nodes = REPO / ".cache" / "bench" / "nodes.onnx"
    folder = Path(tempfile.mkdtemp(prefix="catalog-bench-"))
    try:
        data_root = folder / "root"
        data_root.mkdir()
        if nodes.exists():
            shutil.copy(nodes, data_root / "nodes.onnx")
        server = Server(folder, data_root)
        try:
            with httpx.Client(base_url=server.url) as client:  # warm up the routes and the worker path
                warm, _ = initializer_model(10)
                client.post("/models", files={"model": ("warm.onnx", warm)})
            for size in [int(s) for s in args.sizes.split(",") if s]:
                model, names = initializer_model(size)
                rss_before = status_kib(server.process.pid, "VmRSS")
                reset_peak(server.process.pid)
                figures = asyncio.run(initializer_workload(server, model, names))
                growth = (status_kib(server.process.pid, "VmHWM") - rss_before) / 1024
                print(
                    f"{size:,} initializers ({len(model) / 1e6:.1f} MB upload): front-end peak RSS growth {growth:.0f} MB; "
                    f"/healthz p99 {figures['health_p99_ms']:.1f} ms, max {figures['health_max_ms']:.1f} ms "
                    f"({figures['health_samples']:.0f} samples); GET /models/{{id}} {figures['summary_kb']:.0f} kB; "
                    f"POST {figures['post_s']:.2f} s; {FETCHES} GETs by name from {CLIENTS} clients in {figures['gets_wall_s']:.2f} s, "
                    f"p50 {figures['get_p50_ms']:.1f} ms, p99 {figures['get_p99_ms']:.1f} ms; "
                    f"one GET at a time: p50 {figures['alone_p50_ms']:.1f} ms"
                )
            if nodes.exists():
                node_model_comparison(server, data_root, args.runs)
            else:
                print("no .cache/bench/nodes.onnx: run bench/make_models.py for the node-heavy comparison")
        finally:
            server.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
