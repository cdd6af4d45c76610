"""A fleet store's start-up, eviction and scrape as the index grows (issue 37).

Starts a throwaway SeaweedFS (S3) and PostgreSQL on 127.0.0.1
(tools/fleet_servers.py). For each size N, a fresh database and bucket
prefix: the schema made by a store's open, then N models written straight
into the index with COPY (each 2,000 bytes, last used in order, held by one
of TENANTS tenants in turn, its place "id/generation"), and with --objects
one small object per model in the bucket (what a start that lists the bucket
would walk). Then, each the median of --repeats:

(a) start-up: `Store.open()` of a new store object, as a replica opens it
    (connections, schema check, garbage collection);
(b) eviction: a commit of a new ~10 KB model by tenant t0 into a store whose
    cap (--store-max-bytes) is exactly full, so that it must evict about
    six of t0's least recently used models (t0 holds one model in
    TENANTS); with --caps also --tenant-max-bytes (every tenant within it),
    so that the holders met are counted; the time of the whole commit, of
    the eviction plan alone (`Store._eviction_plan` under the lock), and of
    the index's byte total (`usage()`) that the plan reads;
(c) the scrape's store gauges: `model_count()` and `usage()`.

It prints a table and the ratio of the largest N to the smallest.

Usage: python bench/fleet_scale_bench.py [--sizes 1000,100000] [--repeats 3]
       [--objects] [--caps] [--tree CHECKOUT]
(--tree: measure the store code of another checkout, e.g. a `git worktree`
of an older commit; the data is written the same way.)
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TENANTS = 10
MODEL_BYTES = 2000  # N x 2,000 bytes: the store cap, at least 1 MiB
NEW_MODEL_BYTES = 10_000


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,100000", help="comma-separated model counts")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--objects", action="store_true", help="one object per model in the bucket")
    parser.add_argument("--caps", action="store_true", help="per-tenant caps set (--tenant-max-bytes)")
    parser.add_argument("--tree", type=Path, help="the checkout whose service/ to measure")
    return parser.parse_args()


def model_id(number: int) -> str:
    return hashlib.sha256(f"scale {number}".encode()).hexdigest()


def fill_index(database: str, count: int) -> list[str]:
    """N models and their holdings, written with COPY; their places."""
    import psycopg

    from service.store.postgres.postgres_index import tenant_key
    from service.store.records import SourceFile, StoredRecord, TenantRecord

    item = SourceFile(path="files/model.onnx", in_store=True, size=MODEL_BYTES, mtime_ns=1, inode=1)
    template = StoredRecord(
        id="@ID@",
        input="m.onnx",
        created_ns=1,
        model_size=MODEL_BYTES,
        model_sha256="@ID@",
        tensor_count=0,
        files={"model": item},
        place="@PLACE@",
    ).model_dump_json()
    keys = [tenant_key(f"t{number}") for number in range(TENANTS)]
    holdings = [TenantRecord(tenant=f"t{number}", input="m.onnx", created_ns=1).model_dump_json() for number in range(TENANTS)]
    places, start = [], time.time_ns() - count * 1000
    with psycopg.connect(database, autocommit=True) as connection, connection.cursor() as cursor:
        # The totals' trigger (migration 4) updates its one row per model: within one COPY that
        # is quadratic (each update finds the row's newest version), so it is off while the
        # table is filled, and the totals are counted once after (a store's commits insert one row each).
        cursor.execute("ALTER TABLE onnx_models DISABLE TRIGGER USER")
        with cursor.copy("COPY onnx_models (id, record, size, last_use_ns, place) FROM STDIN") as copy:
            for number in range(count):
                identity = model_id(number)
                place = f"{identity}/{number:016x}"
                places.append(place)
                copy.write_row(
                    (identity, template.replace("@ID@", identity).replace("@PLACE@", place), MODEL_BYTES, start + number * 1000, place)
                )
        with cursor.copy("COPY onnx_holdings (tenant_key, model_id, holding, created_ns) FROM STDIN") as copy:
            for number in range(count):
                copy.write_row((keys[number % TENANTS], model_id(number), holdings[number % TENANTS], start + number * 1000))
        cursor.execute("ALTER TABLE onnx_models ENABLE TRIGGER USER")
        if cursor.execute("SELECT to_regclass('onnx_totals')").fetchone() not in (None, (None,)):  # the store code measured has them
            cursor.execute("UPDATE onnx_totals SET (bytes, models) = (SELECT COALESCE(SUM(size), 0), count(*) FROM onnx_models)")
        cursor.execute("VACUUM ANALYZE onnx_models")  # as autovacuum would leave them
        cursor.execute("VACUUM ANALYZE onnx_holdings")
    return places


def fill_bucket(store_url: str, places: list[str]) -> None:
    import obstore

    from service.store.s3.objects import connect

    bucket, _, prefix = store_url.removeprefix("s3://").partition("/")
    store = connect(bucket, prefix)

    def put(place: str) -> None:
        obstore.put(store, f"models/{place}/summary.json", io.BytesIO(b"{}"))

    with ThreadPoolExecutor(32) as pool:
        list(pool.map(put, places))


def median_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def measure(count: int, fleet: Any, options: argparse.Namespace, folder: Path) -> dict[str, float]:
    from service.settings import Settings
    from service.store.backends import open_store
    from service.store.records import SourceFile, StoredRecord, TenantRecord

    store_url, database = fleet.new_store_url(), fleet.new_database()
    caps: dict[str, Any] = {"tenant_max_bytes": count * MODEL_BYTES // TENANTS + 10 * NEW_MODEL_BYTES} if options.caps else {}  # all within
    settings = Settings(
        store=store_url,
        database=database,
        cache_dir=folder / f"cache-{count}",
        store_min_free=0,
        store_max_bytes=count * MODEL_BYTES,
        **caps,
    )
    first = open_store(settings)
    first.open()  # makes the schema
    first.close()
    started = time.perf_counter()
    places = fill_index(database, count)
    if options.objects:
        fill_bucket(store_url, places)
    print(f"  {count:,} models written in {time.perf_counter() - started:.1f} s", file=sys.stderr)

    def start() -> None:
        store = open_store(settings)
        store.open()
        store.close()

    figures = {"start": median_ms(start, options.repeats)}
    store = open_store(settings)
    store.open()
    try:
        commits, plans = [], []
        for repeat in range(options.repeats):
            content = f"new model {repeat} ".encode() * (NEW_MODEL_BYTES // 16)
            identity = hashlib.sha256(content).hexdigest()
            with store.work_folder() as work:
                work.files.mkdir()
                work.upload_model.write_bytes(content)
                info = os.stat(work.upload_model)
                item = SourceFile(path="files/model.onnx", in_store=True, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino)
                record = StoredRecord(
                    id=identity, input="new.onnx", created_ns=time.time_ns(), model_size=len(content),
                    model_sha256=identity, tensor_count=0, files={"model": item},
                )  # fmt: skip
                with store.index.locked():
                    planned = time.perf_counter()
                    plan = store._eviction_plan("t0", keep=identity, adding=NEW_MODEL_BYTES + 600)
                    plans.append((time.perf_counter() - planned) * 1000)
                assert plan, "the store is not full: the commit would evict nothing"
                before = store.model_count()
                owner = TenantRecord(tenant="t0", input="new.onnx", created_ns=time.time_ns())
                started = time.perf_counter()
                store.commit(work, identity, record, b"{}", owner)
                commits.append((time.perf_counter() - started) * 1000)
                assert store.model_count() < before + 1, "the commit evicted nothing"
        figures["commit"] = statistics.median(commits)
        figures["plan"] = statistics.median(plans)
        figures["usage"] = median_ms(store.usage, options.repeats)  # the plan's part that reads the whole table
        figures["gauges"] = median_ms(lambda: (store.model_count(), store.usage()), options.repeats)
    finally:
        store.close()
    return figures


def main() -> int:
    options = arguments()
    tree = options.tree.resolve() if options.tree else REPO
    sys.path[:0] = [str(tree), str(REPO / "tools")]
    from fleet_servers import FleetServers

    import service

    print(f"service from {Path(service.__file__).parent}", file=sys.stderr)
    sizes = [int(size) for size in options.sizes.split(",")]
    rows = {}
    with FleetServers() as fleet, tempfile.TemporaryDirectory(prefix="fleet-scale-") as folder:
        for name, value in fleet.environ.items():
            os.environ[name] = value
        for count in sizes:
            rows[count] = measure(count, fleet, options, Path(folder))
            print(f"  {count:,}: " + ", ".join(f"{name} {value:.1f} ms" for name, value in rows[count].items()), file=sys.stderr)
    names = ("start", "commit", "plan", "usage", "gauges")
    print("| models | (a) start-up | (b) commit that evicts | its eviction plan | of which usage() | (c) scrape gauges |")
    print("| --- | --- | --- | --- | --- | --- |")
    for count, figures in rows.items():
        print(f"| {count:,} | " + " | ".join(f"{figures[name]:.1f} ms" for name in names) + " |")
    if len(sizes) > 1:
        low, high = rows[sizes[0]], rows[sizes[-1]]
        ratios = ", ".join(f"{name} {high[name] / low[name]:.2f}" for name in names)
        print(f"ratio {sizes[-1]:,} / {sizes[0]:,}: {ratios}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
