"""The records the store's index keeps: one per stored model, one per tenant
holding it.

Owns `StoredRecord` and `SourceFile` (what the front end needs of a model
besides the summary and the catalogue, small whatever the model's size;
written once at commit, read with one small parse) and `TenantRecord` (a
tenant holds a model: the name and the label it gave it, and when). The
record names the files a tensor's bytes live in, by the catalogue's file
keys ("model", an external location, "converted"), with the identity each
had at import, which serving checks before reading a byte.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

RECORD_FORMAT = "onnx-service-record/2"


class SourceFile(BaseModel):
    """A file holding tensor bytes: in the model's store folder (`in_store`,
    `path` relative to it) or under the data root (`path` relative to it). An
    object of a data root in a bucket has no mtime or inode (0): its ETag
    (and version, where the bucket keeps them) and SHA-256 say which it is."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str
    in_store: bool
    size: int
    mtime_ns: int
    inode: int
    etag: str = ""
    version: str = ""
    sha256: str = ""


class StoredRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    format: str = RECORD_FORMAT
    id: str
    input: str  # the name the importing client gave the model
    created_ns: int
    model_size: int
    model_sha256: str
    tensor_count: int
    files: dict[str, SourceFile]
    # Where the content backend put the model's blobs (a remote backend's
    # generation, "model-id/hex"); empty for the local ones: the id itself.
    place: str = ""


class TenantRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tenant: str
    input: str  # the name this tenant gave the model
    created_ns: int
    # The label this tenant gave it ("" for none). Kept in the holding's own
    # column, never in this record's JSON, which a release before labels
    # reads with extra="forbid" (a fleet's replicas upgrade one by one).
    label: str = Field(default="", exclude=True)
