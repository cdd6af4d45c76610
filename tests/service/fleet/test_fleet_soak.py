"""The kill -9 soak: an acknowledged import is never lost, whichever process of the fleet dies.

Three real replicas over one bucket and one database (the session's
`fleet_servers`), two front ends each. `ROUNDS` times, imports are posted to
every replica at once (distinct models, and one model posted to two replicas,
so some answers may be 200s of a content another request stored) and one process
is killed with SIGKILL at a random moment of them (a seeded random, printed:
a failure is replayed with `ONNX_SOAK_SEED`): each replica's front ends and its
supervisor in turn. A dead front end is replaced by its supervisor; a dead
supervisor takes its replica down, which is started again, as compose and
Kubernetes do. Round r kills victim (r + r // 3) % 3 of replica r % 3: the
first three rounds kill each kind of victim once, on three replicas; nine,
each victim of each replica. After each round every import answered 200 or 201 is read on
the other two replicas, its summary and its tensor's bytes; at the end every
one on every replica, one of them posted again to the two replicas that did not
acknowledge it is a 200 of the same id, and `gc --grace-seconds 0` removes none of them.
`ONNX_SOAK_ROUNDS` (3 by default; 9 for every victim of every replica, more
for a longer soak) sets the count.
"""

from __future__ import annotations

import concurrent.futures
import os
import random
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from support.service_harness import ServiceProcess, children_of
from support.small_models import weight_model
from test_fleet_replicas import Fleet, upload

ROUNDS = int(os.environ.get("ONNX_SOAK_ROUNDS", "3"))  # 3: each kind of victim once; 9: each victim of each replica
DISTINCT_PER_ROUND = 6
VALUES = 4096  # the weight's elements: a tensor of 16 KiB, read back byte for byte
KILL_WITHIN_SECONDS = 1.5
VICTIMS = ("front end 0", "front end 1", "supervisor")


def weight_bytes(seed: int) -> bytes:
    return np.full((VALUES,), seed, dtype=np.float32).tobytes()


def front_ends(replica: ServiceProcess) -> list[int]:
    """The replica's front-end processes (uvicorn's spawned children), in pid order."""
    assert replica.process is not None
    spawned = []
    for pid in children_of(replica.process.pid):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in command:
            spawned.append(pid)
    return sorted(spawned)


def wait_ready(replica: ServiceProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(replica.url + "/readyz", timeout=2).status_code == 200 and len(front_ends(replica)) == 2:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"replica {replica.url} did not come back:\n{replica.log.read_text()[-3000:]}")


def read_back(replica: ServiceProcess, model_id: str, seed: int) -> str | None:
    """Why the replica does not serve the acknowledged model whole, or None."""
    with replica.client() as client:
        try:
            summary = client.get(f"/models/{model_id}")
            if summary.status_code != 200 or summary.json().get("id") != model_id:
                return f"summary {summary.status_code} {summary.text[:300]}"
            tensor = client.get(f"/models/{model_id}/tensors/W")
        except httpx.HTTPError as error:
            return f"{type(error).__name__}: {error}\n{log_of(replica)}"
        if tensor.status_code != 200 or tensor.content != weight_bytes(seed):
            return f"tensor {tensor.status_code} ({len(tensor.content)} bytes) {tensor.text[:200] if tensor.status_code != 200 else ''}"
    return None


def log_of(replica: ServiceProcess) -> str:
    """What the replica logged of dying front ends and failures (a failure's evidence)."""
    marks = ("died", "hung", "ERROR", "Traceback", "Error", "Waiting for child")
    lines = [line for line in replica.log.read_text(errors="replace").splitlines() if any(mark in line for mark in marks)]
    return "\n".join(lines[-40:])


def kill(replica: ServiceProcess, victim: str) -> None:
    assert replica.process is not None
    if victim == "supervisor":
        os.kill(replica.process.pid, signal.SIGKILL)
        replica.process.wait(30)
        replica.process = None
        replica.start(timeout=60)  # its front ends died with it (the lifeline): started again, as an orchestrator does
    else:
        os.kill(front_ends(replica)[VICTIMS.index(victim)], signal.SIGKILL)
    wait_ready(replica)


def test_no_acknowledged_import_is_lost_whichever_process_is_killed(fleet_servers: Any, tmp_path: Path) -> None:
    seed = int(os.environ.get("ONNX_SOAK_SEED", time.time_ns() % 1_000_000))
    print(f"soak seed {seed} (ONNX_SOAK_SEED={seed} replays it)")
    chance = random.Random(seed)
    fleet = Fleet(fleet_servers, tmp_path, 3, "--http-workers", "2")
    acknowledged: dict[str, tuple[int, int]] = {}  # model id -> (its seed, the replica that answered)
    statuses: dict[int | None, int] = {}

    def read(model_id: str, index: int) -> str | None:
        return read_back(fleet.replicas[index], model_id, acknowledged[model_id][0])

    try:
        for replica in fleet.replicas:
            wait_ready(replica)
        with concurrent.futures.ThreadPoolExecutor(DISTINCT_PER_ROUND + 2) as pool:
            for round_number in range(ROUNDS):
                target = round_number % 3
                victim = VICTIMS[(round_number + round_number // 3) % len(VICTIMS)]
                seeds = [1000 + round_number * DISTINCT_PER_ROUND + index for index in range(DISTINCT_PER_ROUND)]
                posts = [(index % 3, model_seed) for index, model_seed in enumerate(seeds)]
                posts.append(((target + 1) % 3, seeds[target]))  # the victim's model, also to another replica
                posts.append((target, seeds[(target + 1) % 3 + 3]))  # another's, also to the victim

                def post(where: int, model_seed: int) -> tuple[int, int, httpx.Response | None]:
                    try:
                        answer = upload(fleet.replicas[where], weight_model(model_seed, VALUES), f"m{model_seed}.onnx")
                    except httpx.HTTPError:
                        answer = None  # the connection died with the victim: not acknowledged
                    return where, model_seed, answer

                chance.shuffle(posts)
                futures = [pool.submit(post, where, model_seed) for where, model_seed in posts]
                time.sleep(chance.uniform(0.0, KILL_WITHIN_SECONDS))
                kill(fleet.replicas[target], victim)
                this_round = []
                for future in futures:
                    where, model_seed, answer = future.result(timeout=120)
                    status = None if answer is None else answer.status_code
                    statuses[status] = statuses.get(status, 0) + 1
                    if status in (200, 201):
                        assert answer is not None
                        this_round.append(answer.json()["id"])
                        acknowledged[answer.json()["id"]] = (model_seed, where)
                print(f"round {round_number}: {victim} of replica {target} killed; {len(this_round)} acknowledged", flush=True)
                checks = [(model_id, other) for model_id in this_round for other in range(3) if other != acknowledged[model_id][1]]
                for (model_id, other), missing in zip(checks, pool.map(lambda check: read(*check), checks), strict=True):
                    assert missing is None, (
                        f"round {round_number} (seed {seed}, {victim} of replica {target} killed): model {model_id} "
                        f"acknowledged by replica {acknowledged[model_id][1]} is not served by replica {other}: {missing}"
                    )
            everywhere = [(model_id, index) for model_id in acknowledged for index in range(3)]
            unserved = [
                (check, why) for check, why in zip(everywhere, pool.map(lambda check: read(*check), everywhere), strict=True) if why
            ]
            assert not unserved, unserved[:5]
        assert statuses.get(201, 0) >= ROUNDS * DISTINCT_PER_ROUND // 2, statuses
        # A content stored through one replica is a 200 of the same id through the others (the rounds' own duplicates
        # race their twins, or die with the victim, so whether one of them answered 200 depends on timing).
        model_id, (model_seed, where) = next(iter(acknowledged.items()))
        for other in range(3):
            if other != where:
                again = upload(fleet.replicas[other], weight_model(model_seed, VALUES), f"m{model_seed}.onnx")
                assert (again.status_code, again.json()["id"]) == (200, model_id), again.text
        collected = fleet.gc(grace_seconds=0)
        assert collected.returncode == 0, collected.stderr
        store = fleet.inspect()
        try:
            assert [model_id for model_id in acknowledged if not store.summary(model_id)] == []  # FileNotFoundError if gone
        finally:
            store.close()
        print(f"soak: {ROUNDS} rounds, {len(acknowledged)} acknowledged imports, answers {statuses}")
    finally:
        fleet.stop()
