"""The service's own work per tensor GET (issue 55): CPU time, in process, on two trees.

A load generator on a shared 2-core machine measures the machine as much as
the service: this measures the front end's own CPU time per request
instead, which other processes disturb far less. For each tree (`--before`,
`--after`: checkouts, each run with its own `service/` on the path) and each
store (a local folder; the fleet store on a throwaway SeaweedFS and
PostgreSQL, tools/fleet_servers.py), a subprocess builds the app in process
(`create_app` with the tree's own in-process sandbox,
tests/service/unit/in_process.py), imports testdata/samples/add.onnx, warms
up with 200 GETs of its 24-byte tensor W, then times REQUESTS GETs five
times, each sent straight through the app's ASGI interface on the app's own
event loop (no HTTP client's work counted) (`time.process_time`: every thread of the process, the index's and
object storage's clients included; and the wall clock). Rounds alternate
between the trees, each going first in every other round. Reported: the median and the least microseconds per GET
of each tree and store (the least: the time least disturbed by other
processes), and after / before.

    .venv/bin/python bench/tensor_get_cpu_bench.py --before /tmp/before-tree --after . [--rounds 3] [--requests 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

from fleet_servers import FleetServers  # noqa: E402  # tools/, put on the path above

CHILD = r"""
import asyncio, json, os, sys, tempfile, time
from pathlib import Path
tree, requests, flags = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
sys.path[:0] = [tree, os.path.join(tree, "tests", "service", "unit")]
os.chdir(tree)
from fastapi.testclient import TestClient
from in_process import InProcessSandbox
from service.app import create_app
from service.settings import Settings
work = Path(tempfile.mkdtemp())
flags.setdefault("store", str(work / "store"))
settings = Settings(store_min_free=0, workers=1, cache_dir=work / "cache", **flags)
app = create_app(settings, InProcessSandbox(settings))
with TestClient(app) as client:
    posted = client.post("/models", files={"model": ("add.onnx", (Path(tree) / "testdata/samples/add.onnx").read_bytes())})
    assert posted.status_code in (200, 201), posted.text
    path = f"/models/{posted.json()['id']}/tensors/W"

    async def get() -> int:
        # One GET straight through the app's ASGI interface, on the portal's loop: no HTTP client's own work counted.
        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
                 "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"bench")], "client": ("127.0.0.1", 1), "server": ("bench", 80)}
        status = []
        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}
        async def send(message):
            if message["type"] == "http.response.start":
                status.append(message["status"])
        await app(scope, receive, send)
        return status[0]

    async def many(count: int) -> list[float]:
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(count):
            assert await get() == 200
        return [(time.process_time() - cpu) / count * 1e6, (time.perf_counter() - wall) / count * 1e6]

    client.portal.call(many, 200)
    times = [client.portal.call(many, requests) for _ in range(5)]
print(json.dumps(times))
"""


def run(tree: Path, requests: int, flags: dict[str, str], environ: dict[str, str]) -> list[tuple[float, float]]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(tree), str(requests), json.dumps(flags)],
        capture_output=True, text=True, timeout=900, env={**os.environ, **environ}, check=False,
    )  # fmt: skip
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr[-3000:]}")
    return [(float(cpu), float(wall)) for cpu, wall in json.loads(done.stdout.strip().splitlines()[-1])]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--after", type=Path, default=REPO)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=1000)
    arguments = parser.parse_args()
    trees = {"before": arguments.before.resolve(), "after": arguments.after.resolve()}
    figures: dict[tuple[str, str], list[tuple[float, float]]] = {}
    began = time.monotonic()
    with FleetServers() as fleet, tempfile.TemporaryDirectory():
        for round_number in range(arguments.rounds):
            # Each tree goes first in every other round: what the fleet's servers still do after a run falls on both.
            in_turn = list(trees.items())
            for name, tree in in_turn if round_number % 2 == 0 else in_turn[::-1]:
                for store in ("local", "fleet"):
                    flags = {"store": fleet.new_store_url(), "database": fleet.new_database()} if store == "fleet" else {}
                    measured = run(tree, arguments.requests, flags, dict(fleet.environ) if store == "fleet" else {})
                    figures.setdefault((name, store), []).extend(measured)
                    print(f"round {round_number + 1}, {name}, {store}: CPU µs/GET {sorted(round(cpu) for cpu, _ in measured)}", flush=True)
    print()
    print("| store | CPU µs/GET before: median (least) | after | after / before (least) | wall µs before | after | ratio |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for store in ("local", "fleet"):
        cpus = [[cpu for cpu, _ in figures[(name, store)]] for name in trees]
        walls = [[wall for _, wall in figures[(name, store)]] for name in trees]
        cpu, least = [statistics.median(each) for each in cpus], [min(each) for each in cpus]
        wall = [statistics.median(each) for each in walls]
        print(
            f"| {store} | {cpu[0]:.0f} ({least[0]:.0f}) | {cpu[1]:.0f} ({least[1]:.0f}) "
            f"| {cpu[1] / cpu[0]:.2f} ({least[1] / least[0]:.2f}) "
            f"| {wall[0]:.0f} | {wall[1]:.0f} | {wall[1] / wall[0]:.2f} |"
        )
    print(f"({time.monotonic() - began:.0f} s in all)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
