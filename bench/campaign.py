"""Load and fault campaign against a live server (loopback only, bounded).

Phases, each against a real `python -m service` (sandbox on) started here:

1. mixed traffic at concurrency 50: valid uploads (each a new model), repeated
   uploads, malformed and truncated models, path imports, refused paths,
   unknown models and tensors, odd Range headers; every answer is checked
   against what that request must get (status, problem type, tensor bytes);
2. `kill -9` of the server under upload load, then a restart on the same
   store: every import answered 201 before the kill is still served with its
   bytes, no model folder is partial, and no temporary file is left;
3. a full store (a small tmpfs; needs root, else skipped with the reason):
   uploads until the store is full must get 507, never 500; after a DELETE
   imports work again, without a restart;
4. 70 slow clients (headers a byte at a time, bodies a byte at a time) while
   `/healthz` is polled and normal imports go on: `/healthz` p99, and every
   normal import answered.

Usage: python bench/campaign.py [--requests 1000] [--skip-full-store]
Prints one line of figures per phase; exits 1 if any answer was wrong.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import httpx
import numpy as np
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from service_bench import free_port, percentile  # noqa: E402

PROBLEM = "https://onnx-import.example/problems/"


def small_model(seed: int) -> tuple[bytes, bytes]:
    """A small model (new bytes per seed) and its W tensor's raw bytes."""
    weights = np.random.default_rng(seed).standard_normal((16, 16)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"])],
        f"m{seed}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [numpy_helper.from_array(weights, "W")],
    )
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    return data, weights.tobytes()


class Server:
    def __init__(self, store: Path, data_root: Path, *args: str) -> None:
        self.store, self.data_root, self.args = store, data_root, args
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = store.parent / f"service-{self.port}.log"

    def start(self) -> Server:
        command = [sys.executable, "-m", "service", "--port", str(self.port), "--store", str(self.store)]
        command += ["--data-root", str(self.data_root), *self.args]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the server did not start:\n{self.log.read_text()[-2000:]}")

    def kill_hard(self) -> None:
        """SIGKILL to the server and everything it started (fork server, workers)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(30)


class Tally:
    def __init__(self) -> None:
        self.kinds: Counter[str] = Counter()
        self.wrong: list[str] = []
        self.statuses: Counter[int] = Counter()

    def check(self, kind: str, ok: bool, detail: str) -> None:
        self.kinds[kind] += 1
        if not ok:
            self.wrong.append(f"{kind}: {detail[:300]}")


async def mixed_traffic(server: Server, requests: int, concurrency: int, tally: Tally) -> float:
    rng = random.Random(1)
    plan = [
        rng.choice(["upload", "upload", "repeat", "malformed", "truncated", "path", "refused", "unknown", "range"]) for _ in range(requests)
    ]
    repeat_model, repeat_w = small_model(999_999)
    truncated_source, _ = small_model(888_888)
    queue = list(enumerate(plan))

    async def one(client: httpx.AsyncClient, index: int, kind: str) -> None:
        if kind == "upload":
            model, w = small_model(index)
            answer = await client.post("/models", files={"model": (f"m{index}.onnx", model)})
            ok = answer.status_code == 201
            if ok:
                got = await client.get(answer.json()["tensors"][0]["href"])
                ok = got.content == w
            tally.check(kind, ok, f"{answer.status_code} {answer.text}")
        elif kind == "repeat":
            answer = await client.post("/models", files={"model": ("again.onnx", repeat_model)})
            ok = answer.status_code in (200, 201) and (await client.get(f"/models/{answer.json()['id']}/tensors/W")).content == repeat_w
            tally.check(kind, ok, f"{answer.status_code} {answer.text}")
        elif kind == "malformed":
            answer = await client.post("/models", files={"model": ("bad.onnx", b"\x0a\xff\xff\xff\xff" + os.urandom(20))})
            body = answer.json()
            tally.check(kind, answer.status_code == 422 and body.get("kind") in ("Malformed", "InvalidModel"), answer.text)
        elif kind == "truncated":
            cut = truncated_source[: rng.randrange(1, len(truncated_source) - 1)]
            answer = await client.post("/models", files={"model": ("cut.onnx", cut)})
            body = answer.json()
            tally.check(kind, answer.status_code in (201, 200, 422) and (answer.status_code != 422 or "offset" in body), answer.text)
        elif kind == "path":
            answer = await client.post("/models", json={"path": rng.choice(["add.onnx", "typed_fields.onnx", "external/model.onnx"])})
            tally.check(kind, answer.status_code in (200, 201), answer.text)
        elif kind == "refused":
            answer = await client.post("/models", json={"path": rng.choice(["../etc/passwd", "/etc/passwd", "%2e%2e/x", "missing.onnx"])})
            tally.check(kind, answer.status_code in (400, 403, 404) and answer.json()["type"].startswith(PROBLEM), answer.text)
        elif kind == "unknown":
            answer = await client.get(f"/models/{'0' * 64}/tensors/{quote('a/b', safe='')}")
            tally.check(kind, answer.status_code == 404, answer.text)
        else:
            added = await client.post("/models", json={"path": "add.onnx"})
            header = rng.choice(["bytes=²-", "bytes=" + "9" * 5000 + "-", "bytes=5-2", "bytes=-0", "bytes=0-1,3-4", "items=1-2"])
            answer = await client.get(f"/models/{added.json()['id']}/tensors/W", headers={b"Range": header.encode()})
            tally.check(kind, answer.status_code in (200, 206, 416), f"{header[:20]}: {answer.status_code}")

    async def client_loop(client: httpx.AsyncClient) -> None:
        while queue:
            index, kind = queue.pop()
            try:
                await one(client, index, kind)
            except (httpx.HTTPError, ValueError, KeyError) as error:
                tally.check(kind, False, repr(error))

    started = time.perf_counter()
    async with httpx.AsyncClient(base_url=server.url, timeout=120) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(concurrency)))
    return time.perf_counter() - started


async def uploads_until_killed(server: Server, kill_after: float) -> dict[str, bytes]:
    committed: dict[str, bytes] = {}
    stop = asyncio.Event()

    async def uploader(client: httpx.AsyncClient, first: int) -> None:
        seed = first
        while not stop.is_set():
            model, w = small_model(5_000_000 + seed)
            seed += 100
            try:
                answer = await client.post("/models", files={"model": ("k.onnx", model)})
            except httpx.HTTPError:
                return
            if answer.status_code == 201:
                committed[answer.json()["id"]] = w

    async def killer() -> None:
        await asyncio.sleep(kill_after)
        server.kill_hard()
        stop.set()

    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        await asyncio.gather(killer(), *(uploader(client, n) for n in range(20)))
    return committed


def slow_client(port: int, body: bool, stop: float) -> None:
    """Headers (or, if `body`, a body) a byte a second until `stop` or the server closes."""
    try:
        connection = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError:
        return
    head = b"POST /models HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: 100000\r\n\r\n"
    try:
        if body:
            connection.sendall(head)
            payload = b"--b\r\n" + b"x" * 100_000
        else:
            payload = head
        for byte in payload:
            if time.monotonic() > stop:
                break
            connection.sendall(bytes([byte]))
            time.sleep(1.0)
    except OSError:
        pass
    finally:
        connection.close()


async def slow_clients_phase(server: Server, clients: int, seconds: float) -> tuple[float, float, int, Counter[int]]:
    import threading

    stop = time.monotonic() + seconds
    threads = [threading.Thread(target=slow_client, args=(server.port, n % 2 == 1, stop), daemon=True) for n in range(clients)]
    for thread in threads:
        thread.start()
    health: list[float] = []
    imported = 0
    failed: Counter[int] = Counter()
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        seed = 7_000_000
        while time.monotonic() < stop:
            started = time.perf_counter()
            assert (await client.get("/healthz")).status_code == 200
            health.append(time.perf_counter() - started)
            if len(health) % 10 == 0:
                model, _ = small_model(seed)
                seed += 1
                answer = await client.post("/models", files={"model": ("n.onnx", model)})
                imported += answer.status_code == 201
                if answer.status_code != 201:
                    failed[answer.status_code] += 1
            await asyncio.sleep(0.02)
    for thread in threads:
        thread.join(5)
    return percentile(health, 0.99) * 1000, max(health) * 1000, imported, failed


def store_leftovers(store: Path) -> list[str]:
    """Partial model folders, and temporary files of processes that are gone."""
    problems = [str(folder) for folder in (store / "models").iterdir() if not (folder / "record.json").is_file()]
    live = {lock.stem for lock in (store / "tmp").glob("*.lock")}
    problems += [str(entry) for entry in (store / "tmp").iterdir() if entry.is_dir() and (entry.name not in live or any(entry.iterdir()))]
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--skip-full-store", action="store_true")
    args = parser.parse_args()
    wrong = 0
    with tempfile.TemporaryDirectory(prefix="campaign-") as temporary:
        base = Path(temporary)
        data_root = REPO / "testdata" / "samples"

        # 1. mixed traffic, concurrency 50
        server = Server(base / "store", data_root, "--queue", "64", "--max-receiving", "64").start()
        try:
            tally = Tally()
            wall = asyncio.run(mixed_traffic(server, args.requests, 50, tally))
            errors = server.log.read_text().count("Traceback")
            print(
                f"mixed traffic: {sum(tally.kinds.values())} requests at concurrency 50 in {wall:.1f} s "
                f"({sum(tally.kinds.values()) / wall:.0f}/s); {dict(sorted(tally.kinds.items()))}; "
                f"wrong answers {len(tally.wrong)}; tracebacks in the log {errors}"
            )
            for line in tally.wrong[:10]:
                print("  wrong:", line)
            wrong += len(tally.wrong) + errors

            # 2. kill -9 under load, restart on the same store
            committed = asyncio.run(uploads_until_killed(server, 3.0))
        finally:
            server.stop()
        server = Server(base / "store", data_root).start()
        try:
            with httpx.Client(base_url=server.url, timeout=30) as client:
                lost = [model_id for model_id, w in committed.items() if client.get(f"/models/{model_id}/tensors/W").content != w]
            leftovers = store_leftovers(base / "store")
            print(
                f"kill -9 under load: {len(committed)} imports answered 201 before the kill; after a restart on the same store "
                f"{len(committed) - len(lost)} served with their bytes, {len(lost)} lost; leftovers {len(leftovers)}"
            )
            wrong += len(lost) + len(leftovers)

            # 4. slow clients
            p99, worst, imported, failed = asyncio.run(slow_clients_phase(server, 70, 20.0))
            print(
                f"70 slow clients (35 on headers, 35 on bodies, a byte a second) for 20 s: /healthz p99 {p99:.1f} ms, "
                f"max {worst:.1f} ms; normal imports meanwhile {imported} answered 201, others {dict(failed)}"
            )
            wrong += sum(failed.values()) + (p99 > 100)
        finally:
            server.stop()

        # 3. a full store
        if args.skip_full_store:
            print("full store: skipped (--skip-full-store)")
        elif os.geteuid() != 0:
            print("full store: skipped (mounting a small tmpfs needs root)")
        else:
            wrong += full_store_phase(base)
    print("campaign:", "all answers as expected" if wrong == 0 else f"{wrong} problems")
    return 0 if wrong == 0 else 1


def fill_up(disk: Path) -> Path:
    filler = disk / "filler"
    with open(filler, "ab") as out:
        try:
            while True:
                out.write(b"\0" * (1 << 16))
                out.flush()
        except OSError:
            pass
    return filler


def full_store_phase(base: Path) -> int:
    disk = base / "small"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=12m", "tmpfs", str(disk)], check=True)
    try:
        server = Server(disk / "store", REPO / "testdata" / "samples", "--store-min-free", "1MiB").start()
        statuses: Counter[int] = Counter()
        try:
            with httpx.Client(base_url=server.url, timeout=60) as client:
                for seed in range(30):  # ~1 MB each into 12 MiB: the least recently used are evicted to keep 1 MiB free
                    statuses[client.post("/models", files={"model": (f"big{seed}.onnx", big_model(seed))}).status_code] += 1
                stored = len(client.get("/models", params={"limit": 1000}).json()["items"])
                filler = fill_up(disk)  # the file system full, models still stored: the next import evicts them to make room
                evicting = client.post("/models", json={"path": "add.onnx"}).status_code
                for item in client.get("/models", params={"limit": 1000}).json()["items"]:
                    client.delete(item["href"])
                filler.unlink()
                filler = fill_up(disk)  # full, and nothing left to evict
                full = [client.post("/models", json={"path": "typed_fields.onnx"}).status_code for _ in range(3)]
                full += [client.post("/models", files={"model": ("x.onnx", big_model(99))}).status_code for _ in range(3)]
                not_ready = client.get("/readyz").status_code
                filler.unlink()
                recovered = client.post("/models", files={"model": ("y.onnx", big_model(100))}).status_code
                leftovers = store_leftovers(disk / "store")
            print(
                f"full store (12 MiB tmpfs, --store-min-free 1MiB): 30 uploads of ~1 MB: {dict(statuses)}, {stored} kept "
                f"(the rest evicted); disk filled with models stored: import {evicting} (evicting); nothing left to evict: "
                f"answers {full}, /readyz {not_ready}; space back: upload {recovered}; leftovers {len(leftovers)}"
            )
            for leftover in leftovers[:5]:
                print("  leftover:", leftover)
            failures = 500 in statuses or evicting != 201 or any(code != 507 for code in full) or not_ready != 503
            return int(failures or recovered != 201 or bool(leftovers))
        finally:
            server.stop()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def big_model(seed: int) -> bytes:
    weights = np.random.default_rng(seed).standard_normal(250_000).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Identity", ["W"], ["y"])], "big", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(weights, "W")],
    )  # fmt: skip
    data: bytes = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]).SerializeToString()
    return data


if __name__ == "__main__":
    sys.exit(main())
