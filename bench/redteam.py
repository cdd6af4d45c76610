"""Red-team campaign: every attack of issue 19 (1 to 14), of issue 35 (15
to 20: tenants and clients) and of issue 54 (21 to 25: fair admission, clients
that leave, diffs, endless loops, registry locations), against live servers.

Starts its own servers (`python -m service`, sandbox on; loopback, free ports,
temporary stores; at most three at once: the one most attacks share and
those of attacks that need settings, a port or a store of their own) with an API-key
file of two tenants (alice, bob: import, read, delete) and an operator key
(metrics), runs each attack, each bounded in time, and prints one
line per attack (or per worker wall): HELD or BROKE, its name, and the figure
or answer that decided it (ERROR: the attack itself could not run). Nothing
leaves 127.0.0.1. Attack 14 (the explorer's hex view) is browser-only: see
tests/e2e/test_explorer_browser.py.

Usage: python bench/redteam.py [--only 2,7,13]
Exits 1 if any attack broke (or could not run).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import io
import json
import logging
import multiprocessing
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tools"))
sys.path.insert(0, str(REPO))
from campaign import Server, big_model, small_model  # noqa: E402
from graph_timing import chain_model, first_graph_trials  # noqa: E402
from service_bench import percentile  # noqa: E402

from service.access.keys import new_key  # noqa: E402

Headers = dict[str, str]
METHOD_LABELS = {"GET", "HEAD", "POST", "DELETE", "OPTIONS", "other"}
STATUS_LINE = re.compile(rb"HTTP/1\.[01] (\d{3}) ")
NUL_NAMES = {"a\x00b": 1.0, "ab": 2.0, "\ufffd": 3.0}  # what `%FF` decoded to, and a name holding NUL


def names_model() -> bytes:
    initializers = [numpy_helper.from_array(np.full([2], value, dtype=np.float32), name) for name, value in NUL_NAMES.items()]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Sum", list(NUL_NAMES), ["y"])], "names", [], [y], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    return data


def raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[int, bytes]:
    """`data` sent in one sendall; the status and all received until the server closes (0: no status line)."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as connection:
        connection.sendall(data)
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := connection.recv(65536):
                received += chunk
    match = STATUS_LINE.match(received)
    return (int(match.group(1)) if match else 0), received


def raw_get(port: int, target: str, headers: Headers, method: str = "GET") -> int:
    fields = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    return raw(port, f"{method} {target} HTTP/1.1\r\nHost: x\r\n{fields}Connection: close\r\n\r\n".encode())[0]


def forged(*position: object) -> str:
    """A cursor as service/api/paging.py encodes one (base64url of a JSON list), holding anything."""
    return base64.urlsafe_b64encode(json.dumps(list(position)).encode()).decode().rstrip("=")


class Team:
    """The keys, the data root, the servers started (stopped at the end) and the verdicts."""

    def __init__(self, base: Path, servers: contextlib.ExitStack) -> None:
        self.base, self.servers = base, servers
        self.root = base / "root"
        shutil.copytree(REPO / "testdata" / "samples", self.root)
        (self.root / "names.onnx").write_bytes(names_model())
        tables, secrets = [], {}
        for tenant, scopes in (("alice", ["import", "read", "delete"]), ("bob", ["import", "read", "delete"]), ("ops", ["metrics"])):
            secrets[tenant], table = new_key(tenant, scopes)
            tables.append(table)
        self.keys = base / "keys.toml"
        self.keys.write_text("\n".join(tables))
        self.alice, self.bob, self.ops = ({"Authorization": f"Bearer {secrets[name]}"} for name in ("alice", "bob", "ops"))
        self.started = 0
        self._main: Server | None = None
        self.verdicts: Counter[str] = Counter()

    def server(self, *args: str, store: Path | None = None, keys: Path | None = None) -> Server:
        self.started += 1
        store = store or self.base / f"store-{self.started}"
        server = Server(store, self.root, "--api-keys", str(keys or self.keys), *args)
        self.servers.callback(server.stop)  # also if it never becomes ready
        return server.start()

    @property
    def main(self) -> Server:
        """The server most attacks share (default settings), started on first use."""
        if self._main is None:
            self._main = self.server()
        return self._main

    def client(self, server: Server | None = None) -> httpx.Client:
        return httpx.Client(base_url=(server or self.main).url, timeout=120, trust_env=False)  # no proxy: loopback only

    def report(self, verdict: str | bool, label: str, detail: str) -> None:
        word = verdict if isinstance(verdict, str) else "HELD" if verdict else "BROKE"
        self.verdicts[word] += 1
        print(f"{word:5} {label}: {detail}", flush=True)


def upload(client: httpx.Client, headers: Headers, name: str, data: bytes) -> httpx.Response:
    return client.post("/models", files={"model": (name, data)}, headers=headers)


# -- the attacks, in the order

ATTACKS: list[tuple[int, str, Callable[[Team, str], None]]] = []


def attack(number: int, name: str) -> Callable[[Callable[[Team, str], None]], Callable[[Team, str], None]]:
    def register(run: Callable[[Team, str], None]) -> Callable[[Team, str], None]:
        ATTACKS.append((number, name, run))
        return run

    return register


@attack(1, "worker's walls")
def worker_walls(team: Team, label: str) -> None:
    folder = team.base / "worker-attacks"
    folder.mkdir()
    folder.chmod(0o777)  # the control runs as anyone (tests/support/worker_attacks.py)
    environment = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, str(REPO / "tests" / "support" / "worker_attacks.py"), str(folder)]
    ran = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment, cwd="/")
    if ran.returncode != 0:
        team.report("ERROR", label, f"tests/support/worker_attacks.py exited {ran.returncode}: {ran.stderr.strip()[-300:]}")
        return
    outcomes: dict[str, dict[str, str]] = json.loads(ran.stdout.strip().splitlines()[-1])
    print(f"      {label}: the worker's isolation: {outcomes.pop('sandbox')['isolation']}")
    for name, outcome in outcomes.items():
        team.report(outcome["confined"] != "done", f"{label}: {name}", f"{outcome['confined']} (without walls: {outcome['control']})")


@attack(2, "/metrics needs the metrics scope")
def metrics_scope(team: Team, label: str) -> None:
    with team.client() as client:
        none, bob, ops = (client.get("/metrics", headers=headers).status_code for headers in ({}, team.bob, team.ops))
    team.report(none in (401, 403) and bob in (401, 403) and ops == 200, label, f"no key {none}, bob's key {bob}, operator key {ops}")


@attack(3, "made-up methods grow /metrics")
def method_label(team: Team, label: str) -> None:
    with team.client() as client:
        before = client.get("/metrics", headers=team.ops).text
        statuses = Counter(raw_get(team.main.port, "/healthz", {}, method=f"FOO{n}X{n * 7919 % 10007}") for n in range(2000))
        after = client.get("/metrics", headers=team.ops).text
    labels = set(re.findall(r'method="([^"]*)"', after))
    grown = len(after) - len(before)
    strays = sorted(labels - METHOD_LABELS)
    shown = f"{sorted(labels)}" if not strays else f"{len(labels)} values, {len(strays)} made up ({', '.join(strays[:3])}, ...)"
    team.report(
        not strays and grown < 10_000, label, f"2,000 made-up methods (answers {dict(statuses)}): labels {shown}; /metrics grew {grown:,} B"
    )


@attack(4, "a failed graph render shows bob only his own file name")
def render_names(team: Team, label: str) -> None:
    data = chain_model(10, seed=4)
    with team.client() as client:
        first = upload(client, team.alice, "alice-confidential-Q3-merger.onnx", data)
        second = upload(client, team.bob, "bob.onnx", data)
        model_id = first.json()["id"]
        assert second.json()["id"] == model_id, (first.text, second.text)
        stored = next((team.main.store / "models" / model_id).glob("*/files/model.onnx"))  # models/<id>/<generation>/files/
        before = stored.stat()
        stored.write_bytes(b"\xff" * before.st_size)  # damaged in place: same size, the times restored
        os.utime(stored, ns=(before.st_atime_ns, before.st_mtime_ns))
        refused = client.get(f"/models/{model_id}/graph", headers=team.bob)
    shown = refused.json().get("input") if refused.headers.get("content-type", "").endswith("json") else None
    team.report("alice" not in refused.text, label, f"bob's GET /graph: {refused.status_code}, input {shown!r}")


@attack(5, "graph-cache timing")
def cache_timing(team: Team, label: str) -> None:
    with team.client() as client:
        trials = first_graph_trials(client, team.alice, team.bob, trials=8, seed=500)
    after = statistics.median(trial.first_seconds for trial in trials if trial.viewed_before) * 1000
    alone = statistics.median(trial.first_seconds for trial in trials if not trial.viewed_before) * 1000
    team.report(
        after / alone > 0.6,
        label,
        f"bob's first GET /graph (3,001 nodes, 8 each): {after:.1f} ms after alice, {alone:.1f} ms alone ({after / alone:.2f})",
    )


def flood(url: str, path: str, stop: Any, answered: Any) -> None:
    """16 threads looping GET `path` until `stop` is set (run in a child process: its GIL is not the timer's)."""

    def loop() -> None:
        with httpx.Client(base_url=url, timeout=30, trust_env=False) as client:
            while not stop.is_set():
                with contextlib.suppress(httpx.HTTPError):
                    client.get(path)
                    with answered.get_lock():
                        answered.value += 1

    threads = [threading.Thread(target=loop) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


@attack(6, "/readyz costs no fork or store write")
def readyz_cost(team: Team, label: str) -> None:
    seed = iter(range(600_000, 700_000))

    def import_p50(client: httpx.Client) -> float:
        times = []
        for _ in range(10):
            number = next(seed)
            (team.root / f"ready-{number}.onnx").write_bytes(small_model(number)[0])  # add.onnx-like, new bytes each
            started = time.perf_counter()
            response = client.post("/models", json={"path": f"ready-{number}.onnx"}, headers=team.alice)
            assert response.status_code == 201, response.text[:300]
            times.append(time.perf_counter() - started)
        return percentile(times, 0.5)

    def flooded(client: httpx.Client, path: str) -> tuple[float, float]:
        """The import p50 while 16 threads loop on `path` (for 3 s at least), and their answers a second."""
        context = multiprocessing.get_context("fork")
        stop, answered = context.Event(), context.Value("l", 0)
        process = context.Process(target=flood, args=(team.main.url, path, stop, answered))
        process.start()
        began = time.monotonic()
        time.sleep(0.3)  # the flood under way
        p50 = import_p50(client)
        time.sleep(max(0.0, 3.0 - (time.monotonic() - began)))
        stop.set()
        process.join(30)
        return p50, answered.value / (time.monotonic() - began)

    with team.client() as client:
        idle = import_p50(client)
        ready, ready_rate = flooded(client, "/readyz")
        health, health_rate = flooded(client, "/healthz")
    # An unbounded flood of any route takes these 2 cores from the import; what the issue asks is that
    # /readyz cost no more than /healthz (no fork, no store write per call): held when the /readyz flood
    # slows the import at most 1.5x what the same /healthz flood does, and answers at least half as fast.
    # (Before the background check: 8.4x at 104 answers/s.)
    team.report(
        ready / health <= 1.5 and ready_rate >= health_rate / 2,
        label,
        f"path import p50 {idle * 1000:.1f} ms idle; under 16 /readyz loops ({ready_rate:.0f} answers/s) {ready / idle:.1f}x, "
        f"under 16 /healthz loops ({health_rate:.0f}/s) {health / idle:.1f}x: /readyz {ready / health:.2f}x /healthz's (bound 1.5)",
    )


@attack(7, "forged cursors")
def cursors(team: Team, label: str) -> None:
    with team.client() as client:
        model_id = client.post("/models", json={"path": "add.onnx"}, headers=team.alice).json()["id"]
        answers: Counter[int | str] = Counter()
        for listing in ("tensors", "diagnostics"):
            tokens = [forged(listing, value) for value in (2**63, 2**64, -1, "garbage")] + ["garbage", forged("models", 1), "!!~~"]
            for token in tokens:
                try:
                    answers[client.get(f"/models/{model_id}/{listing}", params={"cursor": token}, headers=team.alice).status_code] += 1
                except httpx.HTTPError as error:
                    answers[type(error).__name__] += 1  # the connection cut
    team.report(set(answers) == {400}, label, f"2**63, 2**64, -1 and garbage on /tensors and /diagnostics: {dict(answers)}")


@attack(8, "GET /graph racing DELETE and re-import")
def graph_race(team: Team, label: str) -> None:
    data = chain_model(2000, seed=8)
    seen: Counter[int] = Counter()
    broken: list[str] = []
    stop = time.monotonic() + 5.0
    with team.client() as client:
        model_id = upload(client, team.alice, "race.onnx", data).json()["id"]

        def read() -> None:
            with team.client() as reader:
                while time.monotonic() < stop:
                    try:
                        response = reader.get(f"/models/{model_id}/graph", headers=team.alice)
                        seen[response.status_code] += 1
                        if response.status_code == 200:
                            response.json()  # the whole body
                    except (httpx.HTTPError, ValueError) as error:
                        broken.append(f"{type(error).__name__}: {error}"[:120])

        readers = [threading.Thread(target=read) for _ in range(3)]
        for thread in readers:
            thread.start()
        rounds = 0
        while time.monotonic() < stop:
            client.delete(f"/models/{model_id}", headers=team.alice)
            upload(client, team.alice, "race.onnx", data)
            rounds += 1
            time.sleep(0.01 * (rounds % 6))  # 0 to 50 ms served between rounds: 200s as well as 404s
        for thread in readers:
            thread.join()
    detail = f"5 s, 3 readers, {rounds} delete+import rounds: answers {dict(seen)}; cut or unparsable bodies {len(broken)}"
    team.report(500 not in seen and not broken, label, detail + (f" ({broken[0]})" if broken else ""))


@attack(9, "per-tenant bounds")
def tenant_bounds(team: Team, label: str) -> None:
    server = team.server("--store-max-bytes", "3300000")
    with team.client(server) as client:
        alices = upload(client, team.alice, "a.onnx", big_model(9_000)).json()["id"]
        bobs = [upload(client, team.bob, f"b{seed}.onnx", big_model(9_001 + seed)).status_code for seed in range(4)]
        kept = client.get(f"/models/{alices}", headers=team.alice).status_code
    server.stop()
    team.report(kept == 200, f"{label}: eviction", f"--store-max-bytes 3300000, alice 1 MB then bob 4 x 1 MB {bobs}: alice's model {kept}")
    server = team.server("--tenant-max-models", "2")
    with team.client(server) as client:
        answers = [upload(client, team.bob, f"q{seed}.onnx", small_model(9_100 + seed)[0]) for seed in range(3)]
    server.stop()
    kind = answers[-1].json().get("type", "") if answers[-1].status_code >= 400 else ""
    held = answers[-1].status_code == 507 and kind.endswith("/tenant-quota-exceeded")
    team.report(
        held,
        f"{label}: --tenant-max-models 2",
        f"bob's three imports {[answer.status_code for answer in answers]}, the third's type {kind!r}",
    )


@attack(10, "deleted catalogues stay open")
def open_catalogues(team: Team, label: str) -> None:
    store = team.base / "shared-store"
    first, second = team.server(store=store), team.server(store=store)
    with team.client(first) as client:
        model_id = client.post("/models", json={"path": "add.onnx"}, headers=team.alice).json()["id"]
        other = client.post("/models", json={"path": "typed_fields.onnx"}, headers=team.alice).json()["id"]
        served = client.get(f"/models/{model_id}/tensors/W", headers=team.alice).status_code  # its catalogue open in `first`
    with team.client(second) as client:
        deleted = client.delete(f"/models/{model_id}", headers=team.alice).status_code
    time.sleep(1.5)
    with team.client(first) as client:
        client.get(f"/models/{other}/tensors", params={"limit": 1}, headers=team.alice)
    assert first.process is not None
    pid = first.process.pid
    held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    stale = [target for target in held if "catalog.sqlite" in target and "(deleted)" in target]
    first.stop()
    second.stop()
    team.report(not stale, label, f"tensor served {served}, deleted by the other server {deleted}; catalogues held deleted: {len(stale)}")


@attack(11, "SIGHUP with an empty key file")
def empty_key_file(team: Team, label: str) -> None:
    keys = team.base / "keys-sighup.toml"
    shutil.copyfile(team.keys, keys)
    server = team.server(keys=keys)
    assert server.process is not None
    keys.write_text("")
    logged = len(server.log.read_text())
    os.kill(server.process.pid, signal.SIGHUP)
    time.sleep(1.0)
    with team.client(server) as client:
        answer = client.get("/models", headers=team.alice).status_code
    warnings = [line for line in server.log.read_text()[logged:].splitlines() if "WARNING" in line]
    server.stop()
    said = warnings[0][warnings[0].index("WARNING") :][:110] + "..." if warnings else "no WARNING in the log"
    team.report(answer == 200 and bool(warnings), label, f"alice's key afterwards {answer}; {said}")


@attack(12, "undecodable and NUL names")
def names(team: Team, label: str) -> None:
    with team.client() as client:
        model_id = client.post("/models", json={"path": "names.onnx"}, headers=team.alice).json()["id"]
        prefixed = client.get(f"/models/{model_id}/tensors", params={"prefix": "a\x00"}, headers=team.alice)
    invalid = raw_get(team.main.port, f"/models/{model_id}/tensors/%FF", team.alice)
    team.report(invalid == 400, f"{label}: GET .../tensors/%FF", f"{invalid}")
    found = sorted(item["name"] for item in prefixed.json()["items"]) if prefixed.status_code == 200 else None
    held = prefixed.status_code == 400 or found == ["a\x00b"]
    team.report(held, f"{label}: prefix 'a\\x00'", f"{prefixed.status_code}" + (f", names {found!r}" if found is not None else ""))


@attack(13, "API document, HEAD, big heads")
def protocol(team: Team, label: str) -> None:
    with team.client() as client:
        document = client.get("/openapi.json").json()
        head = client.head("/metrics", headers=team.ops).status_code
    ids = [operation["operationId"] for path in document["paths"].values() for operation in path.values() if "operationId" in operation]
    repeated = sorted(name for name, count in Counter(ids).items() if count > 1)
    team.report(not repeated, f"{label}: operationIds", f"{len(ids)} operations, repeated {repeated[:4]}")
    team.report(head == 200, f"{label}: HEAD /metrics (operator key)", str(head))
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20480 + b"\r\n\r\n"
    status = raw(team.main.port, big)[0]
    team.report(status == 431, f"{label}: a 20 KiB head in one sendall", str(status))


@attack(14, "explorer hex view for long or control-character names")
def explorer(team: Team, label: str) -> None:
    print(f"SEE   {label}: tests/e2e/test_explorer_browser.py (browser-only; not run here)")


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found.extend(int(child) for child in (task / "children").read_text().split())
    return found + [grandchild for child in found for grandchild in _descendants(child)]


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
    except OSError:
        return False


@attack(15, "reservations cannot evict")
def reservations(team: Team, label: str) -> None:
    server = team.server()  # default settings: --tenant-max-reserved 25%
    tus = {"Tus-Resumable": "1.0.0"}
    with team.client(server) as client:
        bobs = [upload(client, team.bob, f"r{seed}.onnx", small_model(15_000 + seed)[0]).json()["id"] for seed in range(2)]
        reserved, refusal = 0, None
        for _ in range(32):  # alice reserves 1 GiB at a time, sending nothing, until refused
            response = client.post("/uploads", headers={**tus, **team.alice, "Upload-Length": str(1 << 30)})
            if response.status_code != 201:
                refusal = response
                break
            reserved += 1
        created = client.post("/uploads", headers={**tus, **team.bob, "Upload-Length": str(1 << 20)}).status_code
        imported = upload(client, team.bob, "r2.onnx", small_model(15_002)[0])
        bobs.append(imported.json().get("id", ""))
        kept = [client.get(f"/models/{model_id}", headers=team.bob).status_code for model_id in bobs]
    server.stop()
    body = refusal.json() if refusal is not None else {}
    team.report(
        refusal is not None and refusal.status_code == 507 and body.get("limit") == "tenant_max_reserved",
        f"{label}: alice's reservations",
        f"{reserved} GiB reserved, then {refusal.status_code if refusal is not None else 'never refused'} {body.get('limit')}",
    )
    team.report(
        created == 201 and imported.status_code == 201 and kept == [200, 200, 200],
        f"{label}: bob after them",
        f"his 1 MiB upload {created}, his import {imported.status_code}, his three models {kept}",
    )


@attack(16, "checks are each tenant's own")
def tenant_checks(team: Team, label: str) -> None:
    data = small_model(16_000)[0]
    every = "schema,security,shape,runtime,smoke"
    with team.client() as client:
        alice = client.post(f"/models?checks={every}", files={"model": ("a.onnx", data)}, headers=team.alice)
        bob = client.post("/models?checks=schema", files={"model": ("b.onnx", data)}, headers=team.bob)
        model_id = bob.json()["id"]
        seen = set(client.get(f"/models/{model_id}", headers=team.bob).json()["checks"])
        again = client.post("/models?checks=runtime,smoke", files={"model": ("b.onnx", data)}, headers=team.bob)
        rechecked = client.post(f"/models/{model_id}/checks?checks=shape", headers=team.bob)
    own = alice.status_code == bob.status_code == 201 and seen == {"schema"}
    team.report(own, f"{label}: bob's view", f"alice ran {every}, bob schema: bob sees {sorted(seen)}")
    ran = set(again.json().get("checks", {})) if again.status_code == 200 else set()
    team.report(
        {"runtime", "smoke"} <= ran, f"{label}: re-POST", f"bob asks runtime,smoke again: {again.status_code}, checks {sorted(ran)}"
    )
    after = set(rechecked.json().get("checks", {})) if rechecked.status_code == 200 else set()
    team.report("shape" in after, f"{label}: POST /checks", f"checks=shape: {rechecked.status_code}, checks {sorted(after)}")


@attack(17, "one service per port")
def one_service_per_port(team: Team, label: str) -> None:
    first = team.server("--http-workers", "2")  # the default is the CPU count: two front ends on this port
    assert first.process is not None
    refusals = []
    for http_workers in ("1", "2"):
        command = [sys.executable, "-m", "service", "--port", str(first.port), "--http-workers", http_workers]
        command += ["--store", str(team.base / f"second-store-{http_workers}"), "--data-root", str(team.root), "--api-keys", str(team.keys)]
        second = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
        refusals.append((http_workers, second.returncode, second.stderr.strip().splitlines()[-1:] or ["(nothing)"]))
    answered_by_first = 0
    for number in range(20):
        request_id = f"redteam-17-{number}"
        if httpx.get(f"{first.url}/healthz", headers={"X-Request-ID": request_id}, timeout=10).status_code == 200:
            time.sleep(0.05)  # its log line
            answered_by_first += f" {request_id} GET /healthz 200 " in first.log.read_text()
    refused = all(code != 0 and "in use" in said[0] for _, code, said in refusals)
    said = "; ".join(f"--http-workers {workers}: exit {code}, {said[0][:90]!r}" for workers, code, said in refusals)
    answers = f"{answered_by_first}/20 GETs answered by the first"
    team.report(refused and answered_by_first == 20, f"{label}: a second service", f"{said}; {answers}")
    processes = _descendants(first.process.pid)
    os.kill(first.process.pid, signal.SIGKILL)  # the supervisor alone
    first.process.wait()
    killed, free_after = time.monotonic(), None
    while free_after is None and time.monotonic() - killed < 10:
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(("127.0.0.1", first.port))
                free_after = time.monotonic() - killed
            except OSError:
                time.sleep(0.02)
    time.sleep(2.0)
    left = [pid for pid in processes if _running(pid)]
    freed = f"free {free_after:.2f} s after" if free_after is not None else "still held 10 s after"
    team.report(
        free_after is not None and free_after < 2.0 and not left,
        f"{label}: kill -9 of the supervisor",
        f"the port {freed}; of its {len(processes)} processes, {len(left)} still running 2 s later",
    )


def fanout_model(depth: int) -> bytes:
    """Issue 35: functions f0 (one Relu) to f{depth}, each calling the previous twice; the graph calls f{depth} once."""
    opsets = [helper.make_opsetid("", 21), helper.make_opsetid("fanout", 1)]
    functions = [helper.make_function("fanout", "f0", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])], opsets[:1])]
    for k in range(1, depth + 1):
        twice = [helper.make_node(f"f{k - 1}", [a], [b], domain="fanout") for a, b in (("x", "t"), ("t", "y"))]
        functions.append(helper.make_function("fanout", f"f{k}", ["x"], ["y"], twice, opsets))
    value = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]) for name in ("x", "y")]
    graph = helper.make_graph([helper.make_node(f"f{depth}", ["x"], ["y"], domain="fanout")], "fanout", value[:1], value[1:])
    model = helper.make_model(graph, opset_imports=opsets, functions=functions)
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    return data


@attack(18, "function fan-out")
def function_fanout(team: Team, label: str) -> None:
    data = fanout_model(40)
    with team.client() as client:
        started = time.monotonic()
        response = upload(client, team.alice, "fanout.onnx", data)  # the default checks: schema, shape, security
        seconds = time.monotonic() - started
    summary = response.json() if response.status_code in (200, 201) else {}
    statuses = {stage: entry["status"] for stage, entry in summary.get("checks", {}).items()}
    held = summary.get("verdict") == "fail" and statuses.get("security") == "fail" and statuses.get("shape") == "skipped" and seconds < 5
    team.report(held, label, f"{len(data):,} B, 2^40 nodes once inlined: {response.status_code} in {seconds:.1f} s, "
                f"verdict {summary.get('verdict')}, stages {statuses}")  # fmt: skip


def training_model(location: str) -> bytes:
    """Issue 35: an initializer of training_info[0].initialization whose external data is at `location`."""
    weight = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[4], data_location=TensorProto.EXTERNAL)
    weight.external_data.add(key="location", value=location)
    training = onnx.TrainingInfoProto()
    declared = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])
    training.initialization.CopyFrom(helper.make_graph([], "init", [], [declared], [weight]))
    value = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [4]) for name in ("x", "y")]
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", value[:1], value[1:]),
                              opset_imports=[helper.make_opsetid("", 21)])  # fmt: skip
    model.ir_version = 10
    model.training_info.append(training)
    data: bytes = model.SerializeToString()
    return data


@attack(19, "training_info locations")
def training_locations(team: Team, label: str) -> None:
    place = "ModelProto.training_info[0].initialization.initializer[0]"
    folder = team.root / "training"
    folder.mkdir(exist_ok=True)
    (folder / "model.onnx").write_bytes(training_model("w.bin"))
    (folder / "w.bin").symlink_to("/etc/passwd")
    with team.client() as client:
        answers = {location: upload(client, team.alice, "training.onnx", training_model(location)) for location in
                   ("/etc/passwd", "../../../../etc/passwd")}  # fmt: skip
        answers["w.bin -> /etc/passwd (a link, imported by path)"] = client.post(
            "/models", json={"path": "training/model.onnx"}, headers=team.alice
        )
    for what, response in answers.items():
        body = response.json() if response.headers.get("content-type", "").endswith("json") else {}
        held = response.status_code == 422 and body.get("kind") == "ExternalData" and body.get("field_path") == place
        team.report(held, f"{label}: {what}", f"{response.status_code} {body.get('kind')} at {body.get('field_path')}")


@attack(20, "client origin and resume loop")
def client_origin(team: Team, label: str) -> None:
    """The Python client against a hostile tus service of the loopback
    (tests/support/hostile_tus.py): a Location on another port, and an offset
    going forward, then back, forever."""
    sys.path.insert(0, str(REPO / "tests"))
    from support.hostile_tus import HostileTus, Mode

    from service.client import Client, ClientRefusal, CrossOriginURL, ResumeBoundExceeded, Retry

    model = team.base / "client-attack" / "model.onnx"
    model.parent.mkdir()
    model.write_bytes(os.urandom(4 << 20))
    quick = Retry(attempts=0, backoff=0.01)
    modes: list[Mode] = ["elsewhere", "seesaw"]
    for mode in modes:
        store = team.base / "client-attack" / f"resume-{mode}"
        started = time.monotonic()
        with HostileTus(mode) as hostile, Client(hostile.url, token="redteam-token", retry=quick, resume_store=store) as client:
            try:
                client.import_file(model, resumable=True)
                error: Exception | None = None
            except (ClientRefusal, httpx.HTTPError) as refused:
                error = refused
            took = time.monotonic() - started
            time.sleep(0.2)
        kept = len(list(store.iterdir())) if store.exists() else 0
        if mode == "elsewhere":
            held = isinstance(error, CrossOriginURL) and hostile.elsewhere.connections == 0 and kept == 0
            detail = f"{type(error).__name__}; connections to the other port {hostile.elsewhere.connections}, resume entries {kept}"
            team.report(held, f"{label}: Location on another port", detail)
        else:
            held = isinstance(error, ResumeBoundExceeded) and hostile.received <= 2 * (4 << 20) + (128 << 20) and took < 30
            detail = f"{type(error).__name__} after {hostile.patches()} PATCHes, {hostile.received:,} bytes of a 4 MiB file, {took:.1f} s"
            team.report(held, f"{label}: offset forward, then back", detail)


# -- issue 54: one import pipeline, fair to every tenant (21 to 25). Each against a server of its own with the
# default settings (--workers = the CPU count, --queue 64, --tenant-share 50%).


def loop_model(hidden: bool = False, seed: int = 0) -> bytes:
    """A Loop of 10^15 trips that nothing ends sooner: its condition a constant True its body passes on (Identity
    cond_in -> cond_out), scalar body v_out = v_in + 1 (tests/support/loop_models.py). Plain: M an int64 initializer
    (282 bytes; the security stage sees it: loop-trip-count). `hidden`: M = Cast(Mul(Constant 1e7, Constant 1e8 + 8 seed))
    computed in float, which the size estimate does not fold (it folds integers): only the smoke run's CPU budget
    stops it. `seed` makes other bytes (another model; float32 holds 1e8 + 8k exactly)."""
    sys.path.insert(0, str(REPO / "tests"))
    from support.loop_models import constant_loop, graph_of_loop, loop_body, loop_node

    if not hidden:
        model = constant_loop()
        model.graph.name = f"loop{seed}" if seed else model.graph.name
    else:
        factors = [helper.make_node("Constant", [], [name], value=helper.make_tensor(name, TensorProto.FLOAT, [], [value]))
                   for name, value in (("a", 1e7), ("b", 1e8 + 8 * seed))]  # fmt: skip
        trips = [helper.make_node("Mul", ["a", "b"], ["m_float"]), helper.make_node("Cast", ["m_float"], ["M"], to=TensorProto.INT64)]
        model = graph_of_loop([*factors, *trips, loop_node(loop_body())], [helper.make_tensor("cond", TensorProto.BOOL, [], [True])])
    data: bytes = model.SerializeToString()
    return data


def readiness(client: httpx.Client, headers: Headers | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = client.get("/readyz", headers=headers or {}).json()
    return answer


def front_ends(server: Server) -> list[int]:
    """The pids of the server's front ends (the supervisor's spawned children)."""
    assert server.process is not None
    found = []
    for task in Path(f"/proc/{server.process.pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                with contextlib.suppress(OSError):
                    if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                        found.append(int(child))
    return sorted(found)


def halt(server: Server) -> None:
    """Stop `server`; one still running 30 s after SIGTERM (requests it waits for) is killed, with its processes."""
    try:
        server.stop()
    except subprocess.TimeoutExpired:
        server.kill_hard()


def store_bytes(folder: Path) -> int:
    return sum(entry.stat().st_size for entry in folder.rglob("*") if entry.is_file() and not entry.is_symlink())


class Asker:
    """One of alice's clients: a request sent at once, then again after each 503's Retry-After, until `gives_up`
    (monotonic; its connection then closed, as a client that stops waiting does)."""

    def __init__(self, gives_up: float) -> None:
        self.gives_up = gives_up
        self.first: int | str | None = None  # the first answer's status
        self.retry_afters: list[int] = []
        self.refused_at: float | None = None  # the first 503
        self.admitted_after: float | None = None  # from the first 503 to sending the retry that was not refused
        self.answered: int | str | None = None  # how it ended: a status, or "gave up"
        self.answered_after: float | None = None  # from the first 503 to that answer

    def run(self, url: str, send: Callable[[httpx.Client, float], httpx.Response], start: threading.Barrier) -> None:
        with httpx.Client(base_url=url, trust_env=False) as client:
            start.wait()
            while (left := self.gives_up - time.monotonic()) > 0:
                sent = time.monotonic()
                try:
                    response = send(client, left)
                    status: int | str = response.status_code
                except httpx.TimeoutException:
                    status = "gave up"
                except httpx.HTTPError as error:
                    status = type(error).__name__
                self.first = status if self.first is None else self.first
                if status != 503:
                    admitted = status != "gave up" or time.monotonic() - sent > 1.0  # a 503 takes milliseconds
                    if self.refused_at is not None and admitted:
                        self.admitted_after = sent - self.refused_at
                        self.answered_after = time.monotonic() - self.refused_at
                    self.answered = status
                    return
                self.refused_at = self.refused_at or time.monotonic()
                wait = int(response.headers.get("retry-after", "1"))
                self.retry_afters.append(wait)
                time.sleep(max(0.0, min(wait, self.gives_up - time.monotonic())))
            self.answered = self.answered or "gave up"


def askers_at_once(url: str, askers: list[Asker], sends: list[Callable[[httpx.Client, float], httpx.Response]]) -> list[threading.Thread]:
    """Every asker's first request sent together (a barrier); the threads, started."""
    start = threading.Barrier(len(askers) + 1)
    threads = [threading.Thread(target=asker.run, args=(url, send, start)) for asker, send in zip(askers, sends, strict=True)]
    for thread in threads:
        thread.start()
    start.wait()
    return threads


def bob_imports(team: Team, server: Server, first_seed: int, going: Callable[[], bool], waits: list[tuple[float, int | str]]) -> None:
    """Bob posts distinct small models (the default checks), one after another, while `going()`: each wait and answer."""
    with team.client(server) as client:
        seed = first_seed
        while going():
            started = time.monotonic()
            try:
                status: int | str = upload(client, team.bob, f"b{seed}.onnx", small_model(seed)[0]).status_code
            except httpx.HTTPError as error:
                status = type(error).__name__
            waits.append((time.monotonic() - started, status))
            seed += 1


def seconds_of(values: list[float]) -> str:
    if not values:
        return "none"
    return f"p50 {statistics.median(values):.1f} s, p90 {percentile(values, 0.9):.1f} s, max {max(values):.1f} s"


def loop_rechecks_against_bob(team: Team, label: str, hidden: bool) -> None:
    server = team.server()
    data = loop_model(hidden)
    with team.client(server) as client:
        ready = readiness(client)
        capacity = ready["import_capacity"]
        share = ready.get("tenant_import_places", capacity)  # (a service before issue 54 has no share)
        model_id = upload(client, team.alice, "loop.onnx", data).json()["id"]
    window = 40.0
    gives_up = time.monotonic() + 1.0 + window  # alice's clients stop waiting when bob's 40 s are over

    def recheck(client: httpx.Client, left: float) -> httpx.Response:
        return client.post(f"/models/{model_id}/checks", params={"checks": "smoke"}, headers=team.alice, timeout=left)

    askers = [Asker(gives_up) for _ in range(capacity)]  # as many as --workers + --queue
    threads = askers_at_once(server.url, askers, [recheck] * capacity)
    time.sleep(1.0)
    waits: list[tuple[float, int | str]] = []

    def going() -> bool:
        return time.monotonic() < gives_up

    bobs = [threading.Thread(target=bob_imports, args=(team, server, 21_000_000 + 100_000 * k, going, waits)) for k in range(2)]
    for thread in bobs:
        thread.start()
    for thread in bobs + threads:
        thread.join(120)
    halt(server)
    kind = "M computed in float, only the smoke budget stops it" if hidden else "M a constant: security's loop-trip-count"
    refused = [asker for asker in askers if asker.first == 503]
    firsts = Counter(str(asker.first) for asker in askers)
    ok = [seconds for seconds, status in waits if status == 201]
    others = Counter(str(status) for _, status in waits if status != 201)
    median = statistics.median(seconds for seconds, _ in waits) if waits else float("inf")
    held = len(ok) >= 0.8 * len(waits) > 0 and median <= 5.0
    team.report(
        held,
        f"{label}: {kind}",
        f"alice's {capacity} POST /checks?checks=smoke at once ({len(data)} B model; her share {share} places): first answers "
        f"{dict(firsts)}; bob's imports over {window:.0f} s, 2 clients: {len(ok)}/{len(waits)} 201 {dict(others) or ''}, "
        f"wait {seconds_of([seconds for seconds, _ in waits])}",
    )
    afters = sorted({wait for asker in refused for wait in asker.retry_afters[:1]})
    later = Counter(wait for asker in refused for wait in asker.retry_afters[1:])
    admitted = [asker.admitted_after for asker in refused if asker.admitted_after is not None]
    answered = [asker.answered_after for asker in refused if asker.answered == 200 and asker.answered_after is not None]
    print(
        f"      {label}: {kind}: Retry-After of the {len(refused)} first 503s {afters} s, of the {sum(later.values())} "
        f"retries refused again {dict(sorted(later.items()))}; following them, a retry admitted after {seconds_of(admitted)} "
        f"({len(admitted)} of {len(refused)} within the {window:.0f} s), answered 200 after {seconds_of(answered)}; alice's "
        f"answers in all {dict(Counter(str(asker.answered) for asker in askers))}",
        flush=True,
    )


@attack(21, "Loop rechecks against bob's imports")
def loop_rechecks(team: Team, label: str) -> None:
    for hidden in (False, True):
        try:
            loop_rechecks_against_bob(team, label, hidden)
        except Exception as error:
            team.report("ERROR", f"{label}: {'hidden' if hidden else 'constant'} trip count", f"{type(error).__name__}: {str(error)[:300]}")


@attack(22, "clients gone")
def clients_gone(team: Team, label: str) -> None:
    server = team.server()
    with team.client(server) as client:
        capacity = readiness(client)["import_capacity"]
        model_id = upload(client, team.alice, "loop.onnx", loop_model(hidden=True)).json()["id"]
    began = time.monotonic()
    gives_up = [began + 10.0 + 20.0 * index / (capacity - 1) for index in range(capacity)]  # 10 to 30 s

    def recheck(client: httpx.Client, left: float) -> httpx.Response:
        return client.post(f"/models/{model_id}/checks", params={"checks": "smoke"}, headers=team.alice, timeout=left)

    def uploader(seed: int) -> Callable[[httpx.Client, float], httpx.Response]:
        def send(client: httpx.Client, left: float) -> httpx.Response:
            files = {"model": (f"loop{seed}.onnx", loop_model(hidden=True, seed=seed))}
            return client.post("/models", params={"checks": "smoke"}, files=files, headers=team.alice, timeout=left)

        return send

    askers = [Asker(when) for when in gives_up]
    sends = [recheck if index % 2 == 0 else uploader(index) for index in range(capacity)]  # rechecks and uploads by turns
    threads = askers_at_once(server.url, askers, sends)
    seen: list[tuple[float, int, int]] = []  # (seconds since the start, running, waiting)
    with team.client(server) as client:
        for thread in threads:
            while thread.is_alive():
                ready = readiness(client)
                seen.append((time.monotonic() - began, ready["imports_running"], ready["imports_waiting"]))
                thread.join(0.5)
        gone = time.monotonic()
        while time.monotonic() < gone + 10.0:
            time.sleep(0.5)
            ready = readiness(client)
            seen.append((time.monotonic() - began, ready["imports_running"], ready["imports_waiting"]))
    halt(server)
    gone_answers = len(re.findall(r" POST \S+ 499 ", server.log.read_text()))
    most = max(seen, key=lambda item: item[2])
    before = [item for item in seen if item[0] <= 10.0][-1]
    leaving = [item for item in seen if item[0] <= gone - began][-1]
    running, waiting = seen[-1][1], seen[-1][2]
    team.report(
        waiting <= 2,
        label,
        f"alice's {capacity} requests at once ({capacity // 2} rechecks, {capacity - capacity // 2} uploads, checks=smoke, "
        f"a Loop only the smoke budget stops), following Retry-After, given up 10 to 30 s after: at {before[0]:.0f} s "
        f"{before[1]} running, {before[2]} waiting (most {most[2]} at {most[0]:.0f} s); the last gone at {gone - began:.0f} s "
        f"({leaving[1]} running, {leaving[2]} waiting), "
        f"10 s later {running} running, {waiting} waiting; alice's answers {dict(Counter(str(asker.answered) for asker in askers))}, "
        f"the log's 499s {gone_answers}",
    )


def packed_models(count: int, items: int = 350_000) -> list[bytes]:
    """`count` models of an Identity whose TENSORS attribute holds `items` empty float tensors (6 bytes each): in
    model k, tensor `items - 1 - k` holds one element instead (so each differs from the others, past what the graph
    document lists and the catalogue holds)."""
    node = helper.make_node("Identity", ["x"], ["y"], name="packer")
    tensors = [onnx.TensorProto(data_type=TensorProto.FLOAT, dims=[0]) for _ in range(items)]
    node.attribute.append(helper.make_attribute("pack", tensors, attr_type=onnx.AttributeProto.TENSORS))
    value = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1]) for name in ("x", "y")]
    graph = helper.make_graph([node], "packed", value[:1], value[1:], [numpy_helper.from_array(np.zeros(3, np.float32), "W")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    made = []
    for k in range(count):
        changed = model.graph.node[0].attribute[0].tensors[items - 1 - k]
        changed.dims[0], changed.float_data[:] = 1, [1.0]
        made.append(model.SerializeToString())
        changed.dims[0], changed.float_data[:] = 0, []
    return made


@attack(23, "diffs of 350,000-tensor attributes")
def big_diffs(team: Team, label: str) -> None:
    server = team.server()
    models = packed_models(3)
    with team.client(server) as client:
        imported = [upload(client, team.alice, f"packed{k}.onnx", data) for k, data in enumerate(models)]
        ids = [answer.json()["id"] for answer in imported]
        bobs = upload(client, team.bob, "b.onnx", small_model(23_000)[0]).json()["id"]
    fronts = front_ends(server)
    logged = len(server.log.read_text())
    stop = threading.Event()
    gets: list[float] = []
    failed_gets: Counter[str] = Counter()
    waits: list[tuple[float, int | str]] = []

    def fetch() -> None:
        with team.client(server) as reader:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    status = reader.get(f"/models/{bobs}/tensors/W", headers=team.bob).status_code
                except httpx.HTTPError as error:
                    failed_gets[type(error).__name__] += 1
                    continue
                if status == 200:
                    gets.append(time.monotonic() - started)
                else:
                    failed_gets[str(status)] += 1
                time.sleep(0.02)

    readers = [threading.Thread(target=fetch) for _ in range(4)]
    importer = threading.Thread(target=bob_imports, args=(team, server, 23_100_000, lambda: not stop.is_set(), waits))
    for thread in readers:
        thread.start()
    pairs = [(a, b) for a in range(3) for b in range(3) if a != b]
    pairs += pairs[:2]  # 8: two asked twice at once (merged)
    diffs: list[tuple[int | str, float, int]] = []

    def compare(a: int, b: int) -> None:
        started = time.monotonic()
        with team.client(server) as client:
            try:
                answer = client.get(f"/models/{ids[a]}/diff/{ids[b]}", headers=team.alice, timeout=170)
                changes = len(answer.json().get("changes", [])) if answer.status_code == 200 else -1
                diffs.append((answer.status_code, time.monotonic() - started, changes))
            except httpx.HTTPError as error:
                diffs.append((type(error).__name__, time.monotonic() - started, -1))

    importer.start()
    time.sleep(1.0)
    comparing = [threading.Thread(target=compare, args=pair) for pair in pairs]
    began = time.monotonic()
    for thread in comparing:
        thread.start()
    for thread in comparing:
        thread.join(180)
    took = time.monotonic() - began
    time.sleep(1.0)
    stop.set()
    for thread in [*readers, importer]:
        thread.join(60)
    after = front_ends(server)
    said = server.log.read_text()[logged:]
    replaced = said.count("died: replaced")
    compared = said.count("INFO service: diff of ")  # a worker's end, one line each
    halt(server)
    answers = Counter(str(status) for status, _, _ in diffs)
    listed = sorted({count for *_, count in diffs})
    bob_ok = sum(status == 201 for _, status in waits)
    p90 = percentile(gets, 0.9) if gets else float("inf")
    held = after == fronts and not replaced and p90 <= 1.0 and bob_ok == len(waits) > 0 and not failed_gets
    team.report(
        held,
        label,
        f"3 models of {len(models[0]):,} B ({[answer.status_code for answer in imported]}); alice's 8 diffs at once: {dict(answers)} "
        f"in {took:.1f} s (each {seconds_of([seconds for _, seconds, _ in diffs])}; changes listed {listed}; diff workers {compared}); "
        f"front ends {fronts} before, {after} after, 'died: replaced' {replaced}; "
        f"bob's tensor GETs (4 connections) {len(gets)}: p50 {statistics.median(gets or [0]) * 1000:.0f} ms, "
        f"p90 {p90 * 1000:.0f} ms, max {max(gets or [0]) * 1000:.0f} ms {dict(failed_gets) or ''}; bob's imports {bob_ok}/{len(waits)} 201",
    )


@attack(24, "Loop import with every stage")
def loop_every_stage(team: Team, label: str) -> None:
    every = "schema,security,shape,runtime,smoke"
    with team.client() as client:
        for hidden in (False, True):
            data = loop_model(hidden, seed=24 if hidden else 0)
            started = time.monotonic()
            answer = client.post("/models", params={"checks": every}, files={"model": ("loop.onnx", data)}, headers=team.bob)
            seconds = time.monotonic() - started
            summary = answer.json() if answer.status_code in (200, 201) else {}
            stages = {stage: entry["status"] for stage, entry in summary.get("checks", {}).items()}
            codes: list[str] = []
            if summary:
                found = client.get(f"/models/{summary['id']}/diagnostics", headers=team.bob, params={"limit": 100}).json()
                codes = sorted(
                    {item["code"] for item in found.get("items", found.get("diagnostics", [])) if item.get("stage") == "security"}
                )
            if hidden:
                kind = f"M computed ({len(data)} B)"
                held = seconds <= 20 and summary.get("verdict") in ("fail", "incomplete") and stages.get("smoke") == "incomplete"
            else:
                kind = f"M constant ({len(data)} B)"
                held = seconds <= 20 and summary.get("verdict") == "fail" and "loop-trip-count" in codes
            team.report(held, f"{label}: {kind}", f"{answer.status_code} in {seconds:.1f} s, verdict {summary.get('verdict')}, "
                        f"stages {stages}, security's codes {codes}")  # fmt: skip


def spelled_locations(name: str, count: int) -> list[str]:
    """`count` percent-encoded spellings of `name` (never `name` itself): wwwwwww.bi%6E, wwwwwww.b%69n, ..."""
    found = []
    for mask in range(1, 1 << len(name)):
        found.append("".join(f"%{ord(char):02X}" if mask >> (len(name) - 1 - at) & 1 else char for at, char in enumerate(name)))
        if len(found) == count:
            break
    return found


def spelled_model(locations: list[str], size: int) -> bytes:
    """One float initializer per location, each all `size` bytes of its external file, summed."""
    weights = []
    for number, location in enumerate(locations):
        weight = TensorProto(name=f"w{number}", data_type=TensorProto.FLOAT, dims=[size // 4], data_location=TensorProto.EXTERNAL)
        for key, value in (("location", location), ("offset", "0"), ("length", str(size))):
            weight.external_data.add(key=key, value=value)
        weights.append(weight)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [size // 4])
    graph = helper.make_graph([helper.make_node("Sum", [weight.name for weight in weights], ["y"])], "spelled", [], [y], weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    return data


@attack(25, "percent-encoded registry locations")
def registry_spellings(team: Team, label: str) -> None:
    try:
        import mlflow

        sys.path.insert(0, str(REPO / "tests"))
        from support.mlflow_server import MlflowServer
    except ImportError as error:
        team.report("ERROR", label, f"mlflow cannot run here: {error}")
        return
    folder = team.base / "mlflow"
    folder.mkdir()
    registry = MlflowServer(folder)
    try:
        registry.start(timeout=150)
    except RuntimeError as error:
        registry.stop()
        team.report("ERROR", label, f"mlflow server could not be started: {str(error)[:300]}")
        return
    team.servers.callback(registry.stop)
    secret = team.base / "mlflow-secret"
    secret.write_text("redteam-webhook-secret\n")
    server = team.server("--mlflow-url", registry.url, "--mlflow-webhook-secret-file", str(secret))
    name, size = "wwwwwww.bin", 1 << 20
    locations = spelled_locations(name, 200)
    artifacts = team.base / "spelled"
    artifacts.mkdir()
    (artifacts / "model.onnx").write_bytes(spelled_model(locations, size))
    (artifacts / name).write_bytes(os.urandom(size))
    stored_before = store_bytes(server.store)
    client = mlflow.MlflowClient(tracking_uri=registry.url, registry_uri=registry.url)
    client.create_webhook("onnx-import", server.url + "/hooks/mlflow", events=["model_version.created"], secret="redteam-webhook-secret")
    time.sleep(1.5)  # MLflow's list of webhooks is cached 1 s (tests/support/mlflow_server.py)
    default = client.get_experiment_by_name("Default")
    assert default is not None
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    with contextlib.redirect_stdout(io.StringIO()):  # the client's links to the run, printed when it ends
        run = client.create_run(default.experiment_id)
        client.log_artifacts(run.info.run_id, str(artifacts), artifact_path="model")
        client.set_terminated(run.info.run_id)
        client.create_registered_model("spelled")
        version = str(client.create_model_version("spelled", f"runs:/{run.info.run_id}/model", run_id=run.info.run_id).version)
    deadline, tags = time.monotonic() + 120, {}
    while time.monotonic() < deadline and "onnx_import.verdict" not in tags:
        time.sleep(0.5)
        tags = client.get_model_version("spelled", version).tags
    time.sleep(1.0)
    grown = store_bytes(server.store) - stored_before
    fetches = Counter(re.findall(r'"GET /api/2\.0/mlflow-artifacts/artifacts/\S*w{3}\S* HTTP/1\.1" (\d{3})', registry.log.read_text()))
    fetched = sum(count for status, count in fetches.items() if status == "200")
    staged = re.findall(r"fetched through MLflow: (\d+) files, (\d+) bytes", server.log.read_text())
    said = ", ".join(f"{files} files, {int(size) / 1e6:.1f} MB" for files, size in staged) or "nothing"
    halt(server)
    registry.stop()
    verdict = tags.get("onnx_import.verdict", "none in 120 s")
    held = (fetched <= 1 or verdict == "refused") and grown < 200 * size // 10
    team.report(
        held,
        label,
        f"200 locations ({locations[0]}, {locations[1]}, ..., {locations[-1]}) beside the real {size >> 20} MiB {name}: verdict "
        f"{verdict} ({tags.get('onnx_import.reason', '')[:140]!r}); GETs of the artifact's spellings from MLflow {dict(fetches)}; "
        f"staged {said}; the store grew {grown / 1e6:.2f} MB",
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", help="attack numbers to run, comma-separated (default: all)")
    args = parser.parse_args()
    chosen = {int(number) for number in args.only.split(",")} if args.only else {number for number, _, _ in ATTACKS}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="redteam-") as temporary, contextlib.ExitStack() as servers:
        team = Team(Path(temporary), servers)
        for number, name, run in ATTACKS:
            if number in chosen:
                try:
                    run(team, f"{number:2}. {name}")
                except Exception as error:  # the attack could not run: say so, and go on
                    team.report("ERROR", f"{number:2}. {name}", f"{type(error).__name__}: {str(error)[:300]}")
        tracebacks = sum(log.read_text().count("Traceback") for log in Path(temporary).glob("service-*.log"))
        servers.close()
    verdicts = ", ".join(f"{count} {word}" for word, count in sorted(team.verdicts.items()))
    print(f"redteam: {verdicts}; {team.started} servers; tracebacks in their logs {tracebacks}; {time.monotonic() - started:.0f} s")
    return 1 if team.verdicts["BROKE"] or team.verdicts["ERROR"] else 0


if __name__ == "__main__":
    sys.exit(main())
