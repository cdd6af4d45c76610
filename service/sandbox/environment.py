"""The environment a worker starts with: none of the front end's secrets.

Owns `SECRET_VARIABLES` (what a worker must never hold: the object-storage
credentials, the database's password and URL) and `secrets_withheld`, a
block during which they are out of this process's environment: the fork
server is started inside one (`Sandbox.start`), so it and every worker it
forks begin without them (their /proc/PID/environ included). A model that
compromised the importer would find nothing to send back. The front end
reads what it needs of them before (`service.store.backends`: the S3
client's configuration, the database's password).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

SECRET_PREFIXES = ("AWS_", "PG")  # the AWS credentials and endpoint; libpq's PGPASSWORD, PGUSER, ...
# ONNX_FRONT_END_ARGV: the command line each front end parses again (service.server.front_ends), --database among it
SECRET_VARIABLES = ("ONNX_SERVICE_DATABASE", "ONNX_FRONT_END_ARGV")


def is_secret(name: str) -> bool:
    return name.startswith(SECRET_PREFIXES) or name in SECRET_VARIABLES


@contextlib.contextmanager
def secrets_withheld() -> Iterator[None]:
    """The secret variables out of `os.environ` (and the C environment) for the block."""
    withheld = {name: value for name, value in os.environ.items() if is_secret(name)}
    for name in withheld:
        del os.environ[name]
    try:
        yield
    finally:
        os.environ.update(withheld)
