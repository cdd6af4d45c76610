"""Reads racing removals, against a real server: a graph, a tensor or a
summary GET of a model that a DELETE or an eviction removes meanwhile is
answered whole (200, every byte the Content-Length promises as sent, the JSON or the
tensor's bytes as stored) or as a problem (404 not-found, 410 for a tensor
whose object went), never a 500 and never a cut body.

Small models are imported, deleted and imported again in a loop into a store
whose cap (`--store-max-bytes`) holds about a third of them, so imports
evict too; half the DELETEs are followed at once by the same model's import
(the same id, a new copy). Readers ask for every model whether it is stored
or not, until READS are answered or SECONDS pass. On the local
store and, on the fleet store ([fleet]), on S3 and PostgreSQL. The server's log
is kept: a failure shows the tracebacks of its 500s.

Why a process: what is proven is on the wire: a body as long as its Content-
Length, never cut, while DELETEs and evictions remove the files being sent
(sendfile on a socket); and the server's log is read for the tracebacks of its
500s.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest
from support.service_harness import ServiceProcess, copy_samples, model_id_of, serving
from support.small_models import weight_model

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)

MODELS = 14
# float32s of each model's weight: 64 KiB (read at once) for odd seeds, 384 KiB
# (streamed) for even ones, so the cap of 1 MiB holds about a third of the models
VALUES = {1: 16384, 0: 98304}
CAP = "1MiB"
READS = 5_000  # racing GETs on each store: the suite runs this module on both, 10,000 in all
LEAST_READS = 1_000  # a machine too busy for this many in SECONDS raced too little to tell
READERS = {"graph": 2, "tensor": 4, "summary": 4}  # a graph GET may wait for a render: fewer of them
SECONDS = 40.0  # the bound (2 cores shared with other test runs gave 3,600 to 4,700 reads in it)
PROBLEMS = "https://onnx-import.example/problems/"
ALLOWED_PROBLEMS = {404: "not-found", 410: "tensor-source-gone"}


@dataclass
class Model:
    seed: int
    data: bytes
    id: str
    weight: bytes  # W's raw bytes, as the tensor GET answers them


@dataclass
class Tally:
    answers: Counter[tuple[str, int]] = field(default_factory=Counter)  # (kind, status) -> count
    broken: list[str] = field(default_factory=list)  # what no client may be answered
    churn: Counter[str] = field(default_factory=Counter)


def models() -> list[Model]:
    made = []
    for seed in range(1, MODELS + 1):
        values = VALUES[seed % 2]
        data = weight_model(seed, values)
        made.append(Model(seed, data, model_id_of(data, {}), np.full((values,), seed, dtype="<f4").tobytes()))
    return made


def judged(kind: str, model: Model, response: httpx.Response) -> str | None:
    """What is wrong with an answer, or None if a client may be given it."""
    status = response.status_code
    if status in ALLOWED_PROBLEMS:
        if not response.headers.get("content-type", "").startswith("application/problem+json"):
            return f"{status} not a problem: {response.headers.get('content-type')}"
        slug = str(response.json().get("type", "")).removeprefix(PROBLEMS)
        return None if slug == ALLOWED_PROBLEMS[status] and (status == 404 or kind == "tensor") else f"{status} {slug}"
    if status != 200:
        return f"{status}: {response.text[:300]}"
    promised = response.headers.get("content-length")
    if promised is None or int(promised) != response.num_bytes_downloaded:  # as sent (a graph document: gzip)
        return f"200 with {response.num_bytes_downloaded} bytes, Content-Length {promised}"
    if kind == "tensor":
        return None if response.content == model.weight else "200 with other bytes than the weight's"
    try:
        document = response.json()
    except ValueError as error:
        return f"200 whose JSON does not parse: {error}"
    if kind == "summary" and document.get("id") != model.id:
        return f"200 summary of {document.get('id')}"
    if kind == "graph" and set(document) != {"format", "graph", "functions"}:
        return f"200 graph with {sorted(document)}"
    return None


def read(server: ServiceProcess, kind: str, every: list[Model], tally: Tally, left: list[int], stop: float) -> None:
    path = {"graph": "/models/{}/graph", "tensor": "/models/{}/tensors/W", "summary": "/models/{}"}[kind]
    with server.client() as client:
        while left[0] > 0 and time.monotonic() < stop:
            left[0] -= 1
            model = random.choice(every)
            try:
                response = client.get(path.format(model.id))
            except httpx.HTTPError as error:  # a connection cut mid-body
                tally.broken.append(f"{kind}: {type(error).__name__}: {error}")
                continue
            tally.answers[(kind, response.status_code)] += 1
            wrong = judged(kind, model, response)
            if wrong is not None:
                tally.broken.append(f"{kind} {model.id[:12]}: {wrong}")


def churn(server: ServiceProcess, every: list[Model], tally: Tally, left: list[int], stop: float) -> None:
    """Imports (each may evict) and DELETEs, half of them followed by the same
    model's import at once (the same id, a new copy), until the readers are done."""
    with server.client() as client:
        while left[0] > 0 and time.monotonic() < stop:
            model = random.choice(every)
            if random.random() < 0.3:
                status = client.delete(f"/models/{model.id}").status_code
                tally.churn[f"delete {status}"] += 1
                if status >= 500 or random.random() < 0.5:
                    continue
            status = client.post("/models", files={"model": ("m.onnx", model.data)}).status_code
            tally.churn[f"import {status}"] += 1
            if status >= 500:
                tally.broken.append(f"churn answered {status}")


def race(server: ServiceProcess, every: list[Model]) -> Tally:
    tally, left = Tally(), [READS]
    with server.client() as client:
        for model in every[: MODELS // 2]:
            client.post("/models", files={"model": ("m.onnx", model.data)})
    stop = time.monotonic() + SECONDS
    threads = [
        threading.Thread(target=read, args=(server, kind, every, tally, left, stop))
        for kind, count in READERS.items()
        for _ in range(count)
    ]
    threads += [threading.Thread(target=churn, args=(server, every, tally, left, stop)) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally


def server_errors(log: Path) -> str:
    """The log's unexpected errors, each with its traceback (the first few)."""
    lines = log.read_text(errors="replace").splitlines()
    starts = [index for index, line in enumerate(lines) if "unexpected error" in line or "Traceback" in line]
    return "\n".join("\n".join(lines[start : start + 40]) for start in starts[:3])


def test_reads_racing_delete_and_eviction_answer_whole_or_gone(tmp_path: Path) -> None:
    every = models()
    with serving(
        tmp_path / "store", copy_samples(tmp_path / "root"), "--store-max-bytes", CAP, "--workers", "2", "--default-checks", "schema"
    ) as server:
        started = time.monotonic()
        tally = race(server, every)
        seconds = time.monotonic() - started
        log = server.log
    done = sum(tally.answers.values())
    evictions = log.read_text(errors="replace").count("service.store: evicted")  # the store logs each eviction
    report = f"{done} reads in {seconds:.1f} s: {sorted(tally.answers.items())}; churn {sorted(tally.churn.items())}, {evictions} evictions"
    assert not tally.broken, f"{report}\n{tally.broken[:10]}\n{server_errors(log)}"
    assert done >= LEAST_READS, report
    for kind in READERS:  # the race was run: each kind answered both whole and gone
        assert tally.answers[(kind, 200)] and tally.answers[(kind, 404)] + tally.answers[(kind, 410)], report
    # Removals raced the reads: deletes and evictions (under load a delete may meet a model evicted
    # a moment before, and rightly answer 404: each delete sent counts, whichever removal won).
    assert tally.churn["import 201"] and tally.churn["delete 204"] + tally.churn["delete 404"] and evictions, report
    print(report)
