"""The messages between the front end and an import worker, as typed classes.

Owns `WorkerJob` (what the front end asks; pickled to the forked worker) and
`WorkerHeader` (the worker's first frame, JSON, bounded in size). After an
`ok` header come the byte streams the header announces in `streams`, in order,
each as frames of at most `CHUNK_BYTES`:

- task "import": the catalogue database, then the converted tensor bytes;
- task "graph": the graph document (JSON), gzip-compressed (a graph
  document is JSON that repeats itself: level 1 keeps a twentieth to a
  third of it, at hundreds of MB/s);
- task "diff": two graph documents compared (`DiffInputs`): the head, the
  changes (a JSON object a line) and their index (`service.tasks.compare`);
- task "probe": nothing (the worker only reports its isolation).

A "checks" worker (the stages that need onnx or onnxruntime) sends instead one
`StageReport` frame per stage as it ends, then an `ok` header with no streams:
a worker that dies midway has still delivered the stages it finished. A
"signature" worker (the `signature` stage, on the model's folder) answers the same way.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from importer.limits import MAX_TENSOR_BYTES
from service.checks.outcome import (
    DEFAULT_SECOND_DIM,
    MAX_FINDINGS_PER_STAGE,
    BindingSource,
    Finding,
    Stage,
    StageResult,
    Status,
    Weights,
)
from service.settings import WORKER_ID

CHUNK_BYTES = 1 << 20
MAX_HEADER_BYTES = 16 << 20  # the summary is bounded; this bounds a broken worker
MAX_INFERRED = 100_000  # types a `shape` report carries (service.checks.stages.inferred_types)
MAX_INFERRED_BYTES = 8 << 20  # and their JSON text's length, at most
MAX_SMOKE_RUNS = 2  # the runs a smoke report lists the bindings of (at 1, then at the second binding)
IMPORT_STREAMS = ("catalog", "converted")
GRAPH_STREAMS = ("graph",)
GRAPH_COMPRESSION = 1  # zlib's level for the graph document
GZIP_WBITS = 31  # zlib's window bits for the gzip format (RFC 1952)
GZIP_MAGIC = b"\x1f\x8b"  # a graph document that starts so is gzip-compressed (one kept by earlier releases is plain JSON)
DIFF_STREAMS = ("head", "changes", "index")
SHA256_OR_NONE = "^([0-9a-f]{64})?$"  # a digest a stage report carries, in hex, or none
CHANGED = "changed"  # ImportFailure.reason: the model file is not the one the front end checked

Task = Literal["import", "graph", "probe", "externals", "checks", "diff", "signature"]


@dataclass(frozen=True, slots=True)
class DiffInputs:
    """Task "diff": the second document (the first is the job's `model`), both models' ids and opsets."""

    other: str  # the second graph document's file name inside the job's directory
    a_id: str
    b_id: str
    a_opsets: tuple[tuple[str, int], ...] = ()  # (domain, version)
    b_opsets: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class WorkerJob:
    task: Task
    memory: int  # RLIMIT_DATA, bytes
    cpu_seconds: int
    max_external_files: int
    directory: str = ""  # the model's folder, an absolute path
    model: str = ""  # model file name inside `directory`
    display_name: str = ""  # the name the client knows the model by
    external_dir: str | None = None  # an absolute path; default: the model's folder
    model_id: str = ""  # task "graph": the id its tensor references point into
    diff: DiffInputs | None = None  # task "diff": what it compares
    summary_items: int = 100  # task "import": tensors listed in the summary
    allow_hard_links: bool = False  # accept files with several hard links
    max_tensor_bytes: int = MAX_TENSOR_BYTES  # the largest tensor in external data (--max-tensor-bytes)
    expected_model: tuple[int, int] | None = None  # (device, inode) the front end resolved the model path to
    hash_sources: bool = False  # report the SHA-256 of each file read (an upload's were hashed as they arrived)
    bind_for_runtime: bool = False  # task "checks": bind the model file (and `mapped_files`) for onnxruntime to open (bound_files)
    mapped_files: tuple[str, ...] = ()  # task "checks": the external locations to bind beside it
    checks: tuple[Stage, ...] = ("schema",)  # the stages asked for (service.checks.outcome.STAGES); each worker runs its own
    dims: tuple[tuple[str, int], ...] = ()  # the smoke run's bindings of symbolic dimensions (the request's: strict)
    soft_dims: tuple[tuple[str, int], ...] = ()  # a registry's bindings: used where the model has a free place for them
    smoke_second_dim: int = DEFAULT_SECOND_DIM  # the smoke run's second binding of the dimensions left unbound (--smoke-second-dim)
    max_static_output: int = 1 << 30  # the security stage's bound (--max-static-output)
    max_inlined_nodes: int = 1_000_000  # the nodes calls of local functions may expand to (--max-inlined-nodes)
    max_loop_trips: int = 1_000_000  # the security stage's bound on a Loop's constant trip count (--max-loop-trips)
    smoke_cpu_seconds: float = 3.0  # the smoke run's own CPU budget, below the worker's limits (--smoke-cpu-seconds)
    worker_uid: int = WORKER_ID  # the identity a worker started as root takes once its inputs are open
    worker_gid: int = WORKER_ID
    cgroups: tuple[tuple[str, str], ...] = ()  # the worker's own cgroups (service.sandbox.cgroups): (controller, its cgroup.procs)
    # task "signature": the files of the model's folder, each as (its name in the signed folder, its path below `directory`)
    folder_files: tuple[tuple[str, str], ...] = ()
    signed_model: str = ""  # task "signature": the model's name in the signed folder: a signature that leaves it out fails
    trusted_signers: str = ""  # task "signature": the PEM public keys and certificates of --trusted-signers (not secret)
    model_bytes: int = 0  # the model file and its external data (staged sizes): what sizes a check worker's memory
    asked_at: float = 0.0  # time.monotonic() when the front end asked for the worker: its profile's "fork" starts there

    def __post_init__(self) -> None:
        # The worker resolves nothing against its current directory.
        for name, path in (("directory", self.directory), ("external_dir", self.external_dir)):
            if path and not os.path.isabs(path):
                raise ValueError(f"WorkerJob.{name} must be an absolute path, not {path!r}")


class ImportFailure(BaseModel):
    """The importer's error, as the worker reports it (no server paths)."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    message: str
    input: str
    offset: int | None = None
    field_path: str | None = None
    reason: str | None = None  # the importer's reason token (not-found, hard-linked), or "changed"


class SourceReport(BaseModel):
    """A file the worker read: its identity from the descriptor it read, and the
    SHA-256 of the bytes it read. The front end records these; it never looks
    at the path again."""

    model_config = ConfigDict(extra="forbid")
    key: str  # "model", or the external data location (normalized)
    path: str  # the path opened, every link resolved
    device: int
    inode: int
    size: int
    mtime_ns: int
    sha256: str  # "" unless the job asked for hashes


class StageReport(BaseModel):
    """One stage's outcome as a worker sends it: its status, counts and
    findings (at most MAX_FINDINGS_PER_STAGE; an import worker sends none,
    since its findings are in the catalogue it sends)."""

    model_config = ConfigDict(extra="forbid")
    stage: Stage
    status: Status
    reason: str = ""
    errors: int = Field(default=0, ge=0)
    warnings: int = Field(default=0, ge=0)
    seconds: float = 0.0
    findings: list[dict[str, Any]] = Field(default_factory=list, max_length=MAX_FINDINGS_PER_STAGE)
    inferred: str = Field(default="", max_length=MAX_INFERRED_BYTES)  # `shape`: JSON text, kept and served as it is
    bindings: list[dict[str, int]] = Field(default_factory=list, max_length=MAX_SMOKE_RUNS)  # `smoke`: each run's dimensions
    binding_sources: dict[str, BindingSource] = Field(default_factory=dict)  # `smoke`: where each binding came from
    weights: Weights = ""  # `runtime`: "mapped" or "handed over" (StageResult.weights)
    signature_sha256: str = Field(default="", pattern=SHA256_OR_NONE)  # `signature`: the model.sig checked
    signer_fingerprint: str = Field(default="", pattern=SHA256_OR_NONE)  # `signature`: the key that verified it

    @classmethod
    def of(cls, result: StageResult, with_findings: bool = True) -> StageReport:
        findings = [finding.as_dict() for finding in result.findings] if with_findings else []
        return cls(
            stage=result.stage,
            status=result.status,
            reason=result.reason,
            errors=result.errors,
            warnings=result.warnings,
            seconds=round(result.seconds, 6),
            findings=findings,
            inferred=result.inferred if with_findings else "",
            bindings=result.bindings,
            binding_sources=result.binding_sources,
            weights=result.weights,
            signature_sha256=result.signature_sha256,
            signer_fingerprint=result.signer_fingerprint,
        )

    def result(self) -> StageResult:
        """The stage's result; a finding of another stage than the report's is refused."""
        findings = [Finding.from_dict(item) for item in self.findings]
        if any(finding.stage != self.stage for finding in findings):
            raise ValueError(f"a {self.stage} report holds another stage's finding")
        return StageResult(
            self.stage, self.status, findings, self.reason, self.errors, self.warnings, self.seconds, self.inferred,
            bindings=self.bindings, binding_sources=self.binding_sources, weights=self.weights,
            signature_sha256=self.signature_sha256, signer_fingerprint=self.signer_fingerprint,
        )  # fmt: skip


class WorkerHeader(BaseModel):
    model_config = ConfigDict(extra="forbid")
    status: Literal["ok", "error", "resource_limit", "probe"]
    isolation: str = "unknown"
    error: ImportFailure | None = None
    limit: str | None = None
    summary: dict[str, Any] | None = None  # task import: the bounded summary, without the id and links
    tensor_count: int = 0
    external_files: list[str] = Field(default_factory=list, description="external locations the tensors use")
    sources: list[SourceReport] = Field(default_factory=list, description="task import: the model file and the external files read")
    streams: list[int] = Field(default_factory=list, description="byte lengths of the streams that follow")
    checks: list[StageReport] = Field(default_factory=list, description="task import: its stages (their findings are in the catalogue)")
    steps: dict[str, float] = Field(default_factory=dict, description="the worker's profile: each step's seconds, in order")

    def profile(self) -> str:
        """The steps as a log shows them: `fork 0.012, open 0.000, walls 0.021, ...`."""
        return ", ".join(f"{step} {seconds:.3f}" for step, seconds in self.steps.items())
