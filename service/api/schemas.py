"""Pydantic models of every response, so /openapi.json documents them all.

Owns the response schemas: the model summary, the graph document, health and
readiness, and the RFC 9457 problem (with the members import errors add).
Routes serve stored JSON bytes as they are (no re-validation per request);
these models describe those bytes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator


class Problem(BaseModel):
    """An RFC 9457 problem (media type application/problem+json)."""

    model_config = ConfigDict(extra="allow")
    type: str = Field(examples=["https://onnx-import.example/problems/malformed"])
    title: str
    status: int
    detail: str = Field(description="bounded in size; never raw bytes")
    instance: str = Field(description="the request path")
    kind: str | None = Field(
        None, description="import errors: Malformed, InvalidModel, Unsupported, ExternalData, Io, ResourceLimit, WorkerCrashed"
    )
    offset: int | None = Field(None, description="import errors: byte offset from the start of the file")
    field_path: str | None = Field(None, description="import errors: e.g. ModelProto.graph.node[3].attribute[1].t")
    input: str | None = Field(None, description="import errors: the file the error is in")
    limit: str | None = Field(None, description="ResourceLimit: memory, cpu or time; 413: max_upload or max_upload_total")
    errors: list[dict[str, Any]] | None = Field(None, description="validation errors: where and what")


UploadId = Annotated[str, StringConstraints(pattern="^[0-9a-f]{32}$")]
Location = Annotated[str, StringConstraints(min_length=1, max_length=4096)]


class ImportRequest(BaseModel):
    """`POST /models` as JSON: a model under the data root, or finished resumable uploads."""

    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(None, description="a model file under the data root, relative (no '..', not absolute)", max_length=4096)
    upload: UploadId | None = Field(None, description="or: the id of a finished upload (POST /uploads) holding the model")
    external_data: dict[Location, UploadId] | None = Field(
        None, description="with upload: each external data location the model names -> the id of the finished upload holding it"
    )
    name: str | None = Field(
        None,
        description="the model's display name (its `input`) instead of the path or the upload's filename: 1 to 200 printable characters",
    )
    label: str | None = Field(None, description='a free short label, e.g. "v3 fp16": 1 to 100 printable characters')

    @model_validator(mode="after")
    def _one_source(self) -> ImportRequest:
        if (self.path is None) == (self.upload is None):
            raise ValueError("give exactly one of path and upload")
        if self.external_data is not None and self.upload is None:
            raise ValueError("external_data goes with upload, not path")
        return self


class ModelFile(BaseModel):
    size: int
    sha256: str


class Producer(BaseModel):
    name: str
    version: str


class Opset(BaseModel):
    domain: str
    version: int


class TypedValue(BaseModel):
    name: str
    type: dict[str, Any] | None = Field(description='e.g. {"kind": "tensor", "elem_type": "FLOAT", "shape": [1, "N", null]}')


class TensorLocation(BaseModel):
    model_config = ConfigDict(extra="allow")
    source: str = Field(description="raw_data, external, a typed field name (float_data, ...), string_data or none")
    file: str | None = None
    offset: int | None = None
    length: int | None = None


class InitializerSummary(BaseModel):
    name: str
    field_path: str
    elem_type: str
    dims: list[int]
    byte_length: int
    location: TensorLocation
    href: str = Field(description="GET it for the tensor's bytes (its real name, percent-encoded)")
    npy_href: str | None = Field(description="the tensor as a .npy file; null for the types with no .npy form")


class SparseInitializerSummary(BaseModel):
    name: str
    dims: list[int]
    values: InitializerSummary
    indices: InitializerSummary


class GraphSummary(BaseModel):
    name: str
    inputs: list[TypedValue]
    outputs: list[TypedValue]
    node_count: int
    op_types: dict[str, int]
    initializers: list[InitializerSummary] = Field(description="the first ones; all are in GET /models/{id}/tensors")
    sparse_initializers: list[SparseInitializerSummary]
    nodes_were_reordered: bool
    subgraph_count: int


class FunctionSummary(BaseModel):
    domain: str
    name: str
    overload: str
    inputs: list[str]
    outputs: list[str]
    node_count: int


class TensorEntry(BaseModel):
    name: str = Field(description="the tensor's ONNX name (any string; may be shared by several tensors)")
    alias: str = Field(description="a unique URL-safe name, also accepted in place of the name")
    field_path: str = Field(description="exact: GET /models/{id}/tensors/{name}?field_path=...")
    role: str = Field(description="initializer, sparse_values, sparse_indices or attribute")
    elem_type: str
    dims: list[int]
    byte_length: int
    source: str
    href: str = Field(description="the tensor's URL: its name percent-encoded, with ?field_path= when the name is shared")
    npy_href: str | None = Field(description="the tensor as a .npy file; null for the types with no .npy form (4-, 2- and 6-bit, STRING)")


class PageLinks(BaseModel):
    next: str | None = Field(description="the next page, or null after the last")


class DiagnosticEntry(BaseModel):
    stage: str = Field(default="schema", description="the check stage: schema, security, shape, runtime or smoke")
    severity: str = Field(description="error or warning")
    code: str = Field(description="stable: unknown-op, too-many-inputs, static-output-too-large, shape-inference-error, ...")
    message: str
    node_name: str | None
    op_type: str | None
    domain: str | None
    field_path: str = Field(description="the field at fault, or the node when something is missing")
    offset: int = Field(description="byte offset of that field's key in the model file")


class DiagnosticsSummary(BaseModel):
    errors: int
    warnings: int
    items: list[DiagnosticEntry] = Field(description="the first ones; all are in GET /models/{id}/diagnostics")


class CheckStatus(BaseModel):
    status: Literal["pass", "fail", "incomplete", "skipped"]
    errors: int
    warnings: int
    reason: str | None = Field(default=None, description="why a stage is incomplete or skipped")
    ran_at: str | None = Field(default=None, description="when this tenant's run of the stage ended (ISO 8601, UTC)")
    versions: dict[str, str] | None = Field(
        default=None, description="the code that ran it: onnx-import-service (schema, security), onnx (shape), onnxruntime (runtime, smoke)"
    )
    dims: dict[str, int] | None = Field(default=None, description="the smoke run's dimension bindings (?dim=)")


class DiagnosticPage(BaseModel):
    items: list[DiagnosticEntry]
    next_cursor: str | None
    links: PageLinks


class SummaryLinks(BaseModel):
    self: str
    graph: str
    tensors: str
    shapes: str | None = Field(None, description="the inferred shapes (summaries stored before them have none)")


class ModelSummary(BaseModel):
    id: str = Field(description="content-derived: SHA-256 over the model's bytes and its external files")
    input: str = Field(description="the name this tenant gave the model: the `name` it sent, else the file's name or path")
    label: str | None = Field(default=None, description="the label this tenant gave the model; null for none")
    model_file: ModelFile
    ir_version: int
    producer: Producer
    domain: str
    model_version: int
    opsets: list[Opset]
    graph: GraphSummary
    functions: list[FunctionSummary]
    metadata_props: dict[str, str]
    tensors: list[TensorEntry] = Field(description="the first tensors in file order; GET links.tensors pages through all")
    diagnostics: DiagnosticsSummary = Field(description="every check stage's findings: counts, and the first ones with their places")
    checks: dict[str, CheckStatus] = Field(
        default_factory=dict,
        description="each stage this tenant ran on the model (schema, security, shape, runtime, smoke), its latest run: status, counts, "
        "when and with what it ran; never another tenant's",
    )
    verdict: Literal["pass", "fail", "incomplete"] | None = Field(
        default=None, description="fail if any stage failed; else incomplete if any did not finish (fail closed); else pass"
    )
    counts: dict[str, int] = Field(description="the full length of every list, some of which are cut")
    truncated: list[str] = Field(description="the lists cut (by number of items or bytes)")
    links: SummaryLinks


class TensorPage(BaseModel):
    items: list[TensorEntry]
    next_cursor: str | None = Field(description="opaque; pass as ?cursor= for the next page")
    links: PageLinks


class ModelListItem(BaseModel):
    id: str
    input: str = Field(description="the name the caller gave the model: the `name` it sent, else the file's name or path")
    label: str | None = Field(description="the label the caller gave the model; null for none")
    created: str = Field(description="when it was committed to the store, RFC 3339 UTC")
    model_file: ModelFile
    tensor_count: int
    verdict: str | None = Field(description="the caller's verdict over the check stages it ran (pass, fail, incomplete); null before any")
    stages: dict[str, str] = Field(
        description="the stages that verdict covers, in the order they run, each with its status (schema, security, shape,"
        " runtime, smoke: those absent were not run); empty before any"
    )
    href: str


class ModelPage(BaseModel):
    items: list[ModelListItem] = Field(description="newest first")
    next_cursor: str | None
    links: PageLinks


class ModelDiffPage(BaseModel):
    format: str = Field(description="onnx-service-diff/1")
    a: dict[str, Any] = Field(description="the model compared from: id, node_count, initializer_count")
    b: dict[str, Any] = Field(description="the model compared to: id, node_count, initializer_count")
    identical: bool = Field(description="no change of opsets, inputs, outputs, nodes or initializers")
    opsets: list[dict[str, Any]] = Field(description="opsets added, removed or of another version: domain, change, a, b")
    domains: dict[str, list[str]] = Field(description="node domains added and removed")
    inputs: list[dict[str, Any]] = Field(description="graph inputs added, removed or of another type: name, change, a, b")
    outputs: list[dict[str, Any]] = Field(description="graph outputs added, removed or of another type: name, change, a, b")
    op_types: list[dict[str, Any]] = Field(description="op types whose count differs: op_type, a, b")
    counts: dict[str, dict[str, int]] = Field(description="node and initializer changes: added, removed, changed")
    tensor_bytes_compared: bool = Field(description="every initializer's bytes were compared by SHA-256")
    truncated: list[str] = Field(description="the lists above cut at 1,000 entries")
    changes: list[dict[str, Any]] = Field(
        description="this page of the changes, nodes then initializers: kind (node or initializer), change (added, removed"
        " or changed), name; a node's op_type, a_position and b_position (in each graph's resolved order) and changed"
        " fields; an initializer's elem_type, dims and sha256 in a and in b"
    )
    next_cursor: str | None
    links: PageLinks


class TensorRef(BaseModel):
    name: str
    field_path: str
    elem_type: str
    dims: list[int]
    href: str


class GraphValue(BaseModel):
    name: str
    kind: str
    type: dict[str, Any] | None
    producer: int | None = Field(description="position of the producing node in `nodes`")
    consumers: list[int]
    initializer: TensorRef | None = None


class GraphAttribute(BaseModel):
    name: str
    type: str
    value: Any = Field(None, description="JSON value; GRAPH attributes hold a ResolvedGraph; tensors are references")
    ref_attr_name: str | None = None


class GraphNode(BaseModel):
    position: int = Field(description="index in the resolved order")
    index: int = Field(description="index in the file")
    name: str
    op_type: str
    domain: str
    opset_version: int
    inputs: list[str | None]
    outputs: list[str | None]
    attributes: list[GraphAttribute]


class ResolvedGraph(BaseModel):
    name: str
    path: str
    inputs: list[str]
    outputs: list[str]
    captures: list[str]
    nodes_were_reordered: bool
    values: list[GraphValue]
    nodes: list[GraphNode]


class GraphDocument(BaseModel):
    format: str
    graph: ResolvedGraph
    functions: list[dict[str, Any]]


class InferredType(BaseModel):
    name: str
    type: dict[str, Any] = Field(description="as a declared value's type in the graph document: kind, elem_type, shape")


class ShapesDocument(BaseModel):
    format: str = Field(description="onnx-service-shapes/1")
    values: list[InferredType] = Field(description="the main graph's undeclared values the shape stage inferred, in graph order")


class Health(BaseModel):
    status: str
    importer_build: str = Field(description="the importer this service runs: compiled (mypyc) or pure (Python)")


class TenantPlaces(BaseModel):
    running: int = Field(description="its workers running now")
    waiting: int = Field(description="its imports waiting for a worker")
    receiving: int = Field(description="its uploads whose bodies are arriving")


class Readiness(BaseModel):
    status: str
    fork_server: bool
    store_writable: bool
    network_isolation: str = Field(description="namespace, user-namespace or unavailable")
    worker_sandbox: list[str] = Field(
        description="what confines an import worker, in this order: user-namespace, pid-namespace, ipc-namespace,"
        " mount-namespace, uts-namespace, cgroup-namespace, network-namespace, minimal-root, unprivileged,"
        " memory-cgroup, pids-cgroup, landlock, seccomp (empty: none of them)"
    )
    landlock_abi: int = Field(description="the Landlock ABI of the workers' file policy (0: none; the kernel offers no Landlock)")
    checked_seconds_ago: float = Field(description="age of the background check this answer reports (every few seconds)")
    imports_running: int
    imports_waiting: int
    import_capacity: int = Field(description="imports that may run or wait at once (workers + queue)")
    uploads_receiving: int = Field(description="uploads whose bodies are arriving (they queue once received)")
    max_receiving: int
    saturated: bool = Field(description="a new import would be refused now (503): the queue or the receiving places are full")
    tenant_import_places: int = Field(description="import places (running or waiting) one tenant may hold (--tenant-share)")
    tenant_receiving_places: int = Field(description="receiving places one tenant may hold (--tenant-share)")
    tenants_busy: int = Field(description="tenants holding an import or receiving place now (none is named)")
    yours: TenantPlaces | None = Field(None, description="with credentials: the caller's tenant's own places now")
    store_free_bytes: int = Field(description="free bytes on the store's file system (below --store-min-free: not ready)")
    worker_memory_budget_bytes: int = Field(
        description="memory the workers sized to a large model may reserve in all (--worker-memory-share of the machine's"
        " or the service's cgroup's memory; 0: no budget)"
    )
    worker_memory_reserved_bytes: int = Field(description="of that budget, what the sized workers running now reserve")
    signing_key: str | None = Field(
        description="SHA-256 (hex) of the DER SubjectPublicKeyInfo of the key attestations are signed with (--signing-key); "
        "null: none are signed"
    )
    verify_keys: list[str] = Field(
        description="the same fingerprints of the older public keys whose attestations still verify (--verify-keys: rotation)"
    )
