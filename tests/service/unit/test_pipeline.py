"""The import pipeline (`service.imports.pipeline`) without HTTP: a source
in, an `Imported` result or a typed error out; the in-process sandbox and
a temporary store (`--store-backend memory`). Also the one map from those errors to problems."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote, unquote

import pytest
from in_process import InProcessSandbox, import_parts

from service import errors
from service.api.problems import DOMAIN_PROBLEMS, PROBLEMS, domain_problem
from service.checks.outcome import parse_checks
from service.checks.requested import CheckRequest
from service.imports import pipeline
from service.imports.answers import Imported
from service.imports.graph_render import graph_document
from service.imports.parts import ImportParts
from service.imports.sources import under_data_root
from service.imports.sources.multipart import MultipartUpload
from service.sandbox.protocol import ImportFailure
from service.sandbox.supervisor import WorkerOutcome
from service.store.byte_source import ByteSource, FileSource
from service.store.data_root import Entry, FetchedObject
from service.store.records import SourceFile

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "testdata" / "samples"
T = TypeVar("T")


def run(imports: ImportParts, work: Callable[[ImportParts], Awaitable[T]]) -> T:
    return asyncio.run(work(imports))  # type: ignore[arg-type]


@pytest.fixture
def imports(tmp_path: Path) -> ImportParts:
    return import_parts(tmp_path)


BOUNDARY = b"test-boundary"


def multipart(*parts: tuple[str, bytes]) -> MultipartUpload:
    """An upload as the HTTP layer hands it over: a multipart body's chunks (the model first, then its external data)."""
    body = bytearray()
    for index, (name, data) in enumerate(parts):
        field = "model" if index == 0 else "external_data"
        body += b"--" + BOUNDARY + b"\r\n"
        body += f'Content-Disposition: form-data; name="{field}"; filename="{name}"\r\n\r\n'.encode()
        body += data + b"\r\n"
    body += b"--" + BOUNDARY + b"--\r\n"

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1000):
            yield bytes(body[start : start + 1000])

    return MultipartUpload(chunks(), BOUNDARY)


def upload(imports: ImportParts, tenant: str, *parts: tuple[str, bytes]) -> Imported:
    return run(imports, lambda s: pipeline.run(s, multipart(*parts), tenant))


def from_root(imports: ImportParts, tenant: str, path: str, checks: CheckRequest | None = None) -> Imported:
    return run(imports, lambda s: pipeline.run(s, under_data_root(s.data_root, path, False), tenant, checks))


def test_a_path_import_is_created_once_per_tenant(imports: ImportParts) -> None:
    first = from_root(imports, "alice", "add.onnx")
    assert isinstance(first, Imported) and first.created
    assert b'"input":"add.onnx"' in first.summary
    again = from_root(imports, "alice", "add.onnx")
    assert (again.model_id, again.created) == (first.model_id, False)
    other = from_root(imports, "bob", "./add.onnx")
    assert (other.model_id, other.created) == (first.model_id, True)
    assert b'"input":"./add.onnx"' in other.summary  # bob's own name, never alice's
    assert imports.store.model_count() == 1


@pytest.mark.parametrize("kind", ["upload", "path"])
def test_a_model_deleted_while_imported_again_is_imported_anew(imports: ImportParts, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    """The tenant's own model, imported again, is deleted (or evicted) between the
    import's seeing it held and its reading the stored summary: the import
    stores it anew (201), it never answers 404 for a model it was given."""
    data = (SAMPLES / "add.onnx").read_bytes()

    def again() -> Imported:
        if kind == "upload":
            return upload(imports, "alice", ("add.onnx", data))
        return from_root(imports, "alice", "add.onnx")

    first = again()
    summary = imports.store.summary

    def deleted_first(model_id: str) -> bytes:
        imports.store.release("alice", model_id)  # another request's DELETE, just before the read
        monkeypatch.setattr(imports.store, "summary", summary)
        return summary(model_id)

    monkeypatch.setattr(imports.store, "summary", deleted_first)
    second = again()
    assert (second.model_id, second.created) == (first.model_id, True)
    assert imports.store.visible("alice", first.model_id) and imports.store.summary(first.model_id)


def test_an_upload_with_its_external_data_is_stored(imports: ImportParts) -> None:
    folder = SAMPLES / "external"
    parts = [("model.onnx", (folder / "model.onnx").read_bytes())]
    parts += [(name, (folder / name).read_bytes()) for name in ("weights.bin", "more/bias.bin")]
    imported = upload(imports, "alice", *parts)
    assert imported.created
    record = imports.store.read_record(imported.model_id)
    assert record is not None and set(record.files) >= {"model", "weights.bin", "more/bias.bin"}
    assert all(item.in_store for item in record.files.values())


def test_an_unused_external_part_is_refused(imports: ImportParts) -> None:
    parts = [("add.onnx", (SAMPLES / "add.onnx").read_bytes()), ("stray.bin", b"\0" * 8)]
    with pytest.raises(errors.BadInput, match="not used by any tensor"):
        upload(imports, "alice", *parts)
    assert imports.store.model_count() == 0


def test_the_importers_refusal_is_a_typed_error_naming_the_place(imports: ImportParts) -> None:
    with pytest.raises(errors.ImportFailed) as refused:
        upload(imports, "alice", ("bad.onnx", b"\x0a\xff\xff\xff\xff\x0f"))
    assert refused.value.failure.kind == "Malformed" and refused.value.failure.input == "bad.onnx"
    assert refused.value.failure.offset is not None
    assert domain_problem(refused.value).problem.status == 422


def test_a_path_outside_the_data_root_is_refused_before_any_worker(imports: ImportParts) -> None:
    with pytest.raises(errors.PathRefused):
        from_root(imports, "alice", "../outside.onnx")
    assert isinstance(imports.sandbox, InProcessSandbox) and imports.sandbox.jobs == []


@pytest.mark.parametrize(
    ("outcome", "raised", "status"),
    [
        (WorkerOutcome("resource_limit", limit="memory", detail="out of memory"), errors.ImportFailed, 422),
        (WorkerOutcome("crashed", detail="killed by SIGSEGV"), errors.ImportFailed, 500),
        (WorkerOutcome("store_full", detail="full"), errors.StoreFull, 507),
        (WorkerOutcome("too_large", detail="too many bytes"), errors.ImportTooLarge, 413),
        (WorkerOutcome("error", error=ImportFailure(kind="Unsupported", message="x", input="m")), errors.ImportFailed, 422),
    ],
)
def test_how_a_worker_ended_is_a_typed_error(outcome: WorkerOutcome, raised: type[Exception], status: int) -> None:
    with pytest.raises(raised) as caught:
        outcome.result("m.onnx")
    assert isinstance(caught.value, errors.DomainError)
    assert domain_problem(caught.value).problem.status == status


def test_every_domain_error_has_its_problem() -> None:
    kinds = {cls for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, errors.DomainError)}
    assert kinds - {errors.DomainError, errors.ImportFailed} == set(DOMAIN_PROBLEMS)
    assert set(DOMAIN_PROBLEMS.values()) <= set(PROBLEMS)
    overloaded = domain_problem(errors.Overloaded("busy", retry_after=7))
    assert overloaded.problem.status == 503 and overloaded.headers["Retry-After"] == "7"
    quota = domain_problem(errors.TenantQuotaExceeded("full", limit="tenant_max_models"))
    assert quota.extensions["limit"] == "tenant_max_models"


class FlatFolderRoot:
    """A data root of another layout, as a backend added later would be (this
    class is all it takes): every key one file in one folder, named by its key
    percent-encoded, its ETag the file's size and mtime."""

    local_reads = False
    local_folder = None

    def __init__(self, folder: Path) -> None:
        self.folder, self.url = folder, f"flat://{folder}"

    def file(self, key: str) -> Path:
        return self.folder / quote(key, safe="")

    def etag(self, key: str) -> str:
        info = self.file(key).stat()
        return f"{info.st_size}-{info.st_mtime_ns}"

    def open(self, item: SourceFile) -> ByteSource:
        if not self.file(item.path).is_file():
            raise errors.TensorSourceGone(item.path)
        if self.etag(item.path) != item.etag:
            raise errors.TensorSourceChanged(item.path)
        return FileSource(os.open(self.file(item.path), os.O_RDONLY))

    def fetch(self, key: str, target: Path, max_bytes: int, expected: SourceFile | None = None) -> FetchedObject:
        if not self.file(key).is_file():
            raise errors.NotFound(key)
        etag, data = self.etag(key), self.file(key).read_bytes()
        if expected is not None and expected.etag != etag:
            raise errors.ModelSourceChanged(key)
        if len(data) > max_bytes:
            raise errors.ImportTooLarge(key)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        return FetchedObject(key, etag, "", len(data), hashlib.sha256(data).hexdigest())

    def list(self, prefix: str) -> list[Entry]:
        keys = [unquote(path.name) for path in self.folder.iterdir()]
        return [Entry(key.rpartition("/")[2], False, self.file(key).stat().st_size) for key in keys if key.rpartition("/")[0] == prefix]

    def close(self) -> None:
        pass


def test_a_data_root_of_another_kind_serves_imports_renders_and_tensors_through_the_interface(imports: ImportParts, tmp_path: Path) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    for name in ("model.onnx", "weights.bin", "more/bias.bin"):
        shutil.copy(SAMPLES / "external" / name, flat / quote(f"external/{name}", safe=""))
    root = FlatFolderRoot(flat)
    imports = dataclasses.replace(imports, data_root=root)
    imported = from_root(imports, "alice", "external/model.onnx")
    assert imported.created
    record = imports.store.read_record(imported.model_id)
    assert record is not None and {item.path for item in record.files.values()} >= {"external/weights.bin", "external/more/bias.bin"}
    weights = record.files["weights.bin"]
    source = root.open(weights)
    try:
        assert source.read(0, weights.size) == (SAMPLES / "external" / "weights.bin").read_bytes()
    finally:
        source.close()
    os.close(run(imports, lambda s: graph_document(s, imported.model_id, "alice")))  # its worker reads fetched copies
    assert imports.store.graph_rendered("alice", imported.model_id)
    assert from_root(imports, "bob", "external/model.onnx").model_id == imported.model_id
    root.file("external/weights.bin").write_bytes(b"\0" * weights.size)  # another file now: the record's no longer
    with pytest.raises(errors.TensorSourceChanged):
        root.open(weights)
    with pytest.raises(errors.ModelSourceChanged):
        run(imports, lambda s: graph_document(s, imported.model_id, "bob"))


def test_each_stage_keeps_the_time_its_worker_measured(imports: ImportParts) -> None:
    """The summary's `checks.NAME.seconds` is the stage's own time as its worker
    reported it (it read 0.0 for every stage while the results went through the summary)."""
    asked = CheckRequest(parse_checks("runtime"))  # an onnxruntime session: milliseconds, never 0.000
    imported = from_root(imports, "alice", "add.onnx", asked)
    checks = json.loads(imported.summary)["checks"]
    assert set(checks) == {"runtime"} and checks["runtime"]["seconds"] > 0
    assert json.loads(imports.store.summary(imported.model_id))["checks"]["runtime"]["seconds"] == checks["runtime"]["seconds"]
