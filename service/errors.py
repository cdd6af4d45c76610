"""The service's domain errors: what can go wrong, in words of the domain.

Raised below the HTTP layer (the import use case, the store, the sandbox,
path confinement, admission) and turned into RFC 9457 problems in one place,
`service.api.problems.DOMAIN_PROBLEMS`. Each carries a `detail` and, where a client needs it, the setting that stopped it (`limit`).
Nothing here knows HTTP.
"""

from __future__ import annotations

import errno

from service.sandbox.protocol import ImportFailure

MAX_DETAIL_CHARS = 500
MODEL_GONE = "the model was removed from the store meanwhile"  # NotFound's detail for a model removed while a request used it
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def is_full(error: OSError) -> bool:
    """The error says the file system (or the quota) is full: the one test of
    it, for the store, uploads and the worker's streams (the problem map answers 507)."""
    return error.errno in FULL_ERRNOS


def bounded(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    """Printable and at most `limit` characters (control characters escaped):
    a detail never echoes raw bytes."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[: limit * 2])
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DomainError(Exception):
    """A domain error; `detail` is shown to the client."""

    def __init__(self, detail: str, *, limit: str | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.limit = limit  # the setting that refused, if one did


class NotFound(DomainError):
    """No such model (or file) for this caller: missing, another tenant's, or removed meanwhile."""


class LinkRefused(DomainError):
    """A report link the service did not make as it stands: changed, cut, or signed by a key it no longer holds."""


class LinkExpired(DomainError):
    """A report link the service made, past its expiry."""


class DiffTooLarge(DomainError):
    """Two models whose graphs are too large to compare in the front end."""


class BadInput(DomainError):
    """The request's content is not usable as asked (an unused external part, say)."""


class PathRefused(DomainError):
    """A client-named path breaks the lexical rules (relative, no `..`, ...)."""


class PathForbidden(DomainError):
    """A client-named path resolves outside the data root, or not to a regular file."""


class StoreFull(DomainError):
    """The store cannot hold the model: its size cap, its file system full, or
    below the free-space floor with nothing left to evict."""


class ImportTooLarge(DomainError):
    """One import would add more bytes to the store than `--max-import-bytes`."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail, limit="max_import_bytes")


class UploadTooLarge(DomainError):
    """What an import is given (an upload, a fetched model or its external data)
    is larger than a limit (`limit`: max_upload, max_upload_total)."""

    def __init__(self, detail: str, *, limit: str) -> None:
        super().__init__(detail, limit=limit)


class TenantQuotaExceeded(DomainError):
    """The tenant's share of the store (`--tenant-max-bytes`, `--tenant-max-models`) is used up."""


class Overloaded(DomainError):
    """Every import place (or receiving place) is taken; `retry_after` seconds is a fair wait."""

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class StorageUnavailable(DomainError):
    """Object storage or the index's database does not answer (or answers with
    a server error, or refuses the service); `retry_after` seconds is a fair
    wait. Nothing was changed. `detail` is the client's (what is wrong, in
    kind); `operator` says it for the operator, naming what is at fault (the
    bucket, the access key id, the endpoint, the database and user: `/readyz`
    and the log), and is `detail` when the two are the same."""

    def __init__(self, detail: str, retry_after: int = 5, *, operator: str = "") -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.operator = operator or detail


class ModelSourceChanged(DomainError):
    """A file of the model is not the one recorded at import."""


class TensorSourceChanged(DomainError):
    """The file holding a tensor is not the one recorded at import."""


class TensorSourceGone(DomainError):
    """The file holding a tensor no longer exists."""


class ImportFailed(DomainError):
    """The worker refused the model (as the importer reported it), ran out of
    a resource (`limit`: memory, cpu, time), or died."""

    def __init__(self, failure: ImportFailure, *, limit: str | None = None) -> None:
        super().__init__(failure.message, limit=limit)
        self.failure = failure


class UploadBusy(DomainError):
    """Another request (in any front-end process) is writing this resumable upload now."""


class UploadOffsetMismatch(DomainError):
    """A PATCH's Upload-Offset is not the number of bytes the upload holds (`offset`)."""

    def __init__(self, detail: str, offset: int) -> None:
        super().__init__(detail)
        self.offset = offset


class UploadIncomplete(DomainError):
    """An import names a resumable upload that holds fewer bytes than its declared length."""

    def __init__(self, detail: str, upload_id: str, offset: int) -> None:
        super().__init__(detail)
        self.upload_id = upload_id
        self.offset = offset


class TooManyUploads(DomainError):
    """The tenant has `--max-open-uploads` resumable uploads open already."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail, limit="max_open_uploads")
