"""The SeaweedFS container's entry point (fleet/seaweedfs/Dockerfile, compose.fleet.yaml).

    python seaweedfs.py serve          # writes the S3 identity, then becomes `weed server ... -s3`
    python seaweedfs.py create-bucket  # waits for the S3 gateway, creates the bucket, checks a write; exits

`serve` writes the one S3 identity (keys from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY, allowed every action: the service's and the bucket's
creation) as weed's S3 configuration in /tmp, then executes `weed server` on
/data: master, volume server and filer on the container's loopback only, the
S3 gateway on every address at port 8333 (the compose network's). Buckets are
not created on upload (`-s3.autoCreateBucket=false`, as on AWS).

`create-bucket` (the one-shot s3-init service) is a client of AWS_ENDPOINT_URL
with the same keys: it creates BUCKET (its first argument, else S3_BUCKET),
accepting one that exists already, then PUTs and DELETEs a probe object, which
succeeds only once a volume server has joined; within CREATE_SECONDS, else exit
status 1. The requests are signed with AWS Signature Version 4 by the standard
library (as tools/fleet_servers.py does): the image needs no S3 library.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import os
import sys
import time
import urllib.parse
from datetime import UTC, datetime
from pathlib import Path

WEED = "/usr/local/bin/weed"
DATA = "/data"
S3_PORT = 8333
IDENTITY_FILE = Path("/tmp/s3.json")
CREATE_SECONDS = float(os.environ.get("S3_INIT_SECONDS", "120"))


def keys() -> tuple[str, str]:
    access, secret = os.environ.get("AWS_ACCESS_KEY_ID", ""), os.environ.get("AWS_SECRET_ACCESS_KEY", "")
    if not access or not secret:
        raise SystemExit("seaweedfs.py: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY must be set (the S3 identity's keys)")
    return access, secret


def serve() -> None:
    access, secret = keys()
    identity = {"name": "onnx", "credentials": [{"accessKey": access, "secretKey": secret}], "actions": ["Admin"]}
    IDENTITY_FILE.write_text(json.dumps({"identities": [identity]}))
    IDENTITY_FILE.chmod(0o600)
    command = [
        WEED, "server", f"-dir={DATA}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        "-master.telemetry=false", "-master.resumeState=false",
        f"-master.volumeSizeLimitMB={os.environ.get('WEED_VOLUME_SIZE_LIMIT_MB', '1024')}",
        "-volume.max=0", "-volume.preStopSeconds=0",
        "-filer",
        "-s3", "-s3.ip.bind=0.0.0.0", f"-s3.port={S3_PORT}", f"-s3.config={IDENTITY_FILE}",
        "-s3.autoCreateBucket=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
    ]  # fmt: skip
    sys.stdout.flush()
    os.execv(WEED, command)


def sigv4_headers(method: str, host: str, path: str, body: bytes, access: str, secret: str, region: str) -> dict[str, str]:
    """The headers of an S3 request (no query string) signed with Signature Version 4."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    headers = {"host": host, "x-amz-content-sha256": hashlib.sha256(body).hexdigest(), "x-amz-date": stamp}
    signed = ";".join(sorted(headers))
    lines = [f"{name}:{headers[name]}" for name in sorted(headers)]
    canonical = "\n".join([method, path, "", *lines, "", signed, headers["x-amz-content-sha256"]])
    scope = f"{stamp[:8]}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{stamp}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = f"AWS4{secret}".encode()
    for part in (stamp[:8], region, "s3", "aws4_request"):
        key = hmac.digest(key, part.encode(), "sha256")
    signature = hmac.new(key, to_sign.encode(), "sha256").hexdigest()
    headers["authorization"] = f"AWS4-HMAC-SHA256 Credential={access}/{scope}, SignedHeaders={signed}, Signature={signature}"
    return headers


def create_bucket(bucket: str) -> None:
    access, secret = keys()
    endpoint = urllib.parse.urlsplit(os.environ.get("AWS_ENDPOINT_URL", f"http://127.0.0.1:{S3_PORT}"))
    if endpoint.scheme != "http" or not endpoint.hostname:
        raise SystemExit(f"seaweedfs.py: AWS_ENDPOINT_URL must be http://HOST:PORT, not {endpoint.geturl()!r}")
    region = os.environ.get("AWS_REGION", "us-east-1")
    host = endpoint.netloc
    probe = f"/{bucket}/.s3-init-probe"
    # 409: the bucket is there already (a restart, or an attempt that timed out); the probe waits for a volume server.
    steps = [("PUT", f"/{bucket}", b"", {200, 409}), ("PUT", probe, b"ready", {200}), ("DELETE", probe, b"", {204})]
    deadline = time.monotonic() + CREATE_SECONDS
    last = "no answer"
    for method, path, body, wanted in steps:
        while True:
            try:
                connection = http.client.HTTPConnection(host, timeout=5)
                try:
                    connection.request(method, path, body=body, headers=sigv4_headers(method, host, path, body, access, secret, region))
                    response = connection.getresponse()
                    status, answer = response.status, response.read()
                finally:
                    connection.close()
                if status in wanted:
                    break
                last = f"{method} {path}: {status} {answer[:300]!r}"
            except OSError as error:
                last = f"{method} {path}: {error}"
            if time.monotonic() > deadline:
                print(f"seaweedfs.py: S3 at {endpoint.geturl()} not ready within {CREATE_SECONDS:.0f} s ({last})", file=sys.stderr)
                raise SystemExit(1)
            time.sleep(0.5)
    print(f"seaweedfs.py: bucket {bucket!r} ready at {endpoint.geturl()}")


def main(argv: list[str]) -> None:
    if argv[:1] == ["serve"] and len(argv) == 1:
        serve()
    elif argv[:1] == ["create-bucket"] and len(argv) <= 2:
        bucket = argv[1] if len(argv) == 2 else os.environ.get("S3_BUCKET", "")
        if not bucket:
            raise SystemExit("seaweedfs.py create-bucket: name the bucket (an argument, or S3_BUCKET)")
        create_bucket(bucket)
    else:
        raise SystemExit("usage: seaweedfs.py serve | seaweedfs.py create-bucket [BUCKET]")


if __name__ == "__main__":
    main(sys.argv[1:])
