"""A fleet's resumable upload in process (issue 38): its PATCHes and its import, against this tree's code.

On a throwaway SeaweedFS and PostgreSQL (tools/fleet_servers.py), one
replica's `ResumableUploads` (service.store.uploads, in parts): an upload of SIZE
random bytes is created, sent in PATCHES PATCHes of 1 MiB chunks (each
`append`, `consume`, `end`, as the route runs them), then imported
(`link_into`: the bytes fetched into a work folder, and their SHA-256).
Reported: the PATCHes' rate and the import's, in MB/s (10^6 bytes), and
`hashlib.sha256` over the same bytes in memory, the same run, for scale.
Run it on two trees (PYTHONPATH=<tree>) to compare them.

    PYTHONPATH=. .venv/bin/python bench/fleet_upload_bench.py [--mib 256] [--patches 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

from fleet_servers import FleetServers  # noqa: E402  # tools/, put on the path above

from service.settings import Settings  # noqa: E402
from service.store.backends import open_store, resumable_uploads_for  # noqa: E402

CHUNK = 1 << 20


def one_run(servers: FleetServers, data: bytes, patches: int, folder: Path) -> tuple[float, float]:
    """(seconds of the PATCHes, seconds of the import) of one upload of `data`."""
    settings = Settings(store=servers.new_store_url(), database=servers.new_database(), cache_dir=folder, store_min_free=0,
                        max_upload_total=1 << 40, max_upload=1 << 40)  # fmt: skip
    store = open_store(settings)
    store.open()
    try:
        uploads = resumable_uploads_for(settings, store)
        uploads.open()
        state = uploads.create("bench", len(data), "", "")
        began = time.perf_counter()
        step = -(-len(data) // patches)
        for start in range(0, len(data), step):
            appending = uploads.append("bench", state.upload_id, start)
            try:
                for offset in range(start, min(start + step, len(data)), CHUNK):
                    appending.consume(data[offset : min(offset + CHUNK, start + step, len(data))], None)
            finally:
                appending.end()
        sent = time.perf_counter() - began
        target = folder / f"import-{state.upload_id}"
        began = time.perf_counter()
        size, digest = uploads.link_into("bench", state.upload_id, target)
        imported = time.perf_counter() - began
        assert size == len(data) and digest == hashlib.sha256(data).hexdigest()
        target.unlink()
        uploads.remove("bench", state.upload_id)
        return sent, imported
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mib", type=int, default=256, help="the upload's size in MiB")
    parser.add_argument("--patches", type=int, default=4, help="PATCH requests it is sent in")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    data = os.urandom(args.mib << 20)
    began = time.perf_counter()
    hashlib.sha256(data).hexdigest()
    hashing = len(data) / (time.perf_counter() - began) / 1e6
    servers = FleetServers()
    for name, value in servers.environ.items():
        os.environ[name] = value
    try:
        with tempfile.TemporaryDirectory(prefix="fleet-upload-bench-") as scratch:
            runs = [one_run(servers, data, args.patches, Path(scratch)) for _ in range(args.runs)]
    finally:
        servers.close()
    sent = statistics.median(run[0] for run in runs)
    imported = statistics.median(run[1] for run in runs)
    print(f"tree: {REPO}")
    print(f"{args.mib} MiB in {args.patches} PATCHes, median of {args.runs}: PATCHes {len(data) / sent / 1e6:,.0f} MB/s ({sent:.2f} s), "
          f"import {len(data) / imported / 1e6:,.0f} MB/s ({imported:.2f} s); sha256 in memory {hashing:,.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
