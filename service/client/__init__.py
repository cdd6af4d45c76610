"""A Python client of the service, on httpx: `Client` and its async twin
`AsyncClient`; `python -m service.client` is its command line.

    from service.client import Client, ServiceError

    with Client("http://127.0.0.1:8000", token=None) as client:
        summary = client.import_file("model.onnx", external_data=["weights.bin"])
        weights = client.tensor(summary["id"], "W")          # a numpy.ndarray
        for entry in client.tensors(summary["id"]):          # every tensor, paged
            ...

Every error answer raises `ServiceError` (status, kind, detail, offset,
field_path, and the whole problem); what the client itself refuses to act on
is a `ClientRefusal`, a subclass: `CrossOriginURL` (a URL handed out on
another origin than the client's: nothing is sent there) and
`ResumeBoundExceeded` (a resumable upload past its bound on bytes and
requests). Imports take `checks=` and `dim=`, and `recheck` runs check
stages again on a stored model. A 503, a connection that could not be
made and, for idempotent requests, a reset one are retried with a bounded
backoff (`Retry`, `service.client.retry`; each retry told to `on_retry=`). Uploads above `resumable_above` bytes
are resumable (tus 1.0: `service.client.resumable`), also by a later process
(`service.client.resume_store`); `progress=` reports bytes moved.

May import: httpx, numpy, anyio, tqdm (only to draw a bar) and the project's
importer (only for `--external-data-dir`), nothing else of `service`: the
client speaks to the service over HTTP only, and ships to users who run no
service.
"""

from __future__ import annotations

from service.client._common import ClientRefusal, CrossOriginURL, ResumeBoundExceeded, ServiceError
from service.client.aio import AsyncClient
from service.client.retry import Retry, RetryNote
from service.client.sync import Client

__all__ = ["AsyncClient", "Client", "ClientRefusal", "CrossOriginURL", "ResumeBoundExceeded", "Retry", "RetryNote", "ServiceError"]
