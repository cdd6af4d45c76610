"""The MLflow hook's pieces in process: the signature MLflow sends, the MLmodel
reader (the onnx flavour, the signature's inputs), the bindings the gate
gives, where a source may lead (MLflow's artifact proxy, or the service's own
bucket, here in memory), which files of a folder are checked, a version's
tags from its files' verdicts, and the kept write-backs
(tests/service/process/test_registry_mlflow.py runs them against a real
MLflow server; the shared delivery markers and the alias rule are
test_registry_shared_rows.py's)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import obstore
import pytest
from obstore.store import MemoryStore

from service.errors import ImportTooLarge
from service.registry.alias import AliasRule
from service.registry.bindings import gate_bindings, signature_bindings
from service.registry.deliveries import Deliveries
from service.registry.folders import BucketFolder, ObjectMissing
from service.registry.mlflow_api import MlflowApi, MlflowRefused, MlflowUnavailable, auth_headers, version_tag
from service.registry.mlmodel import MlmodelError, onnx_model_path, signature_inputs
from service.registry.pending import PendingWrites, WriteBack
from service.registry.signature import Unsigned, signature_of, verify_delivery
from service.registry.sources import MAX_MODEL_FILES, Refused, artifact_folder, confined, model_files
from service.registry.verdict import file_imported, file_not_imported, not_imported, version_tags, worst
from service.settings import Settings
from service.settings.kinds import SettingsError
from service.store.folder_root import FolderRoot
from service.store.s3.bucket_root import BucketRoot
from service.store.sql.registry_rows import RegistryRows
from service.store.sqlite.sqlite_index import SqliteIndex

SECRET = "s3cret"
NOW = 1_800_000_000.0


@pytest.fixture
def rows(tmp_path: Path) -> Iterator[RegistryRows]:
    """The gate's rows in an SQLite index of its own."""
    index = SqliteIndex(tmp_path / "index")
    index.open()
    yield index.registry_rows()
    index.close()


def _mlflow_signature(secret: str, delivery_id: str, timestamp: str, payload: str) -> str:
    """MLflow's own formula (mlflow/webhooks/delivery.py), written out."""
    digest = hmac.new(secret.encode(), f"{delivery_id}.{timestamp}.{payload}".encode(), hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def test_the_signature_is_mlflows_and_is_checked() -> None:
    body = json.dumps({"entity": "model_version", "action": "created", "data": {"name": "m", "version": "1"}})
    signature = signature_of(SECRET, "d1", str(int(NOW)), body.encode())
    assert signature == _mlflow_signature(SECRET, "d1", str(int(NOW)), body)
    verify_delivery(SECRET, "d1", str(int(NOW)), signature, body.encode(), NOW)
    cases = [
        ("other", "d1", str(int(NOW)), body.encode(), "does not match"),  # another secret
        (SECRET, "d2", str(int(NOW)), body.encode(), "does not match"),  # the id is signed
        (SECRET, "d1", str(int(NOW)), body.encode() + b" ", "does not match"),  # the body is signed
    ]
    for secret, delivery_id, timestamp, signed_body, said in cases:
        with pytest.raises(Unsigned, match=said):
            verify_delivery(secret, delivery_id, timestamp, signature_of(SECRET, "d1", str(int(NOW)), body.encode()), signed_body, NOW)
    stale = str(int(NOW) - 301)
    with pytest.raises(Unsigned, match="more than 300 s"):
        verify_delivery(SECRET, "d1", stale, signature_of(SECRET, "d1", stale, body.encode()), body.encode(), NOW)
    future = str(int(NOW) + 301)
    with pytest.raises(Unsigned, match="more than 300 s"):
        verify_delivery(SECRET, "d1", future, signature_of(SECRET, "d1", future, body.encode()), body.encode(), NOW)
    with pytest.raises(Unsigned, match="lacks X-MLflow-Signature"):
        verify_delivery(SECRET, "d1", str(int(NOW)), None, body.encode(), NOW)


MLMODEL = """artifact_path: mlflow-artifacts:/0/models/m-1/artifacts
flavors:
  onnx:
    code: null
    data: model.onnx
    onnx_version: 1.23.2
    providers:
    - CPUExecutionProvider
  python_function:
    data: other.onnx
    loader_module: mlflow.onnx
model_id: m-1
"""


def test_the_mlmodel_reader_takes_the_onnx_flavours_path_only() -> None:
    assert onnx_model_path(MLMODEL) == "model.onnx"
    assert onnx_model_path(MLMODEL.replace("data: model.onnx", "data: 'sub/model.onnx'")) == "sub/model.onnx"
    assert onnx_model_path("flavors:\n  sklearn:\n    data: model.pkl\n") is None
    assert onnx_model_path("data: top.onnx\nflavors:\n  python_function:\n    data: x.onnx\n") is None
    with pytest.raises(MlmodelError, match="not a plain scalar"):
        onnx_model_path("flavors:\n  onnx:\n    data: *anchor\n")
    with pytest.raises(MlmodelError, match="more than"):
        onnx_model_path("#" * (1 << 20))


# An MLmodel as mlflow.onnx.log_model writes it with a signature: PyYAML folds the long quoted JSON.
SIGNED = """flavors:
  onnx:
    data: model.onnx
signature:
  inputs: '[{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 16]},
    "name": "input_ids"}, {"type": "tensor", "tensor-spec": {"dtype": "int64", "shape":
    [-1, -1]}, "name": "mask"}, {"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [3]}}]'
  outputs: '[{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 2]}}]'
  params: null
"""


def test_the_gates_bindings_come_from_the_tag_the_setting_and_the_signature() -> None:
    inputs = signature_inputs(SIGNED)
    assert [spec.get("name") for spec in inputs] == ["input_ids", "mask", None]
    assert onnx_model_path(SIGNED) == "model.onnx"
    assert signature_bindings(inputs) == (("input_ids[1]", 16),)  # -1 is free; a spec without a name names no input
    assert signature_inputs("flavors:\n  onnx:\n    data: m.onnx\n") == []
    assert gate_bindings("", None, inputs) == (("input_ids[1]", 16),)
    assert gate_bindings("batch:4,input_ids[1]:8", None, inputs) == (("batch", 4), ("input_ids[1]", 8))  # the setting over the signature
    assert gate_bindings("batch:4,input_ids[1]:8", "batch:2", inputs) == (("batch", 2), ("input_ids[1]", 8))  # the tag over both
    with pytest.raises(Refused, match=r"onnx_import.dims: a dimension is bound as NAME:VALUE"):
        gate_bindings("", "batch=2", inputs)
    assert version_tag({"tags": [{"key": "onnx_import.dims", "value": "seq:9"}]}, "onnx_import.dims") == "seq:9"
    with pytest.raises(SettingsError, match="--mlflow-dims must be"):
        Settings(mlflow_dims="batch")
    assert Settings(mlflow_dims="batch:4, seq:16").mlflow_dims == "batch:4, seq:16"


def test_paths_stay_inside_the_versions_artifacts() -> None:
    assert confined("0/models/m-1/artifacts", "p") == "0/models/m-1/artifacts"
    for path in ("0/../1", "../x", "a//b", "./a", "a/%2e%2e/b", "a/%252e%252e/b", "/abs", "a\\..\\b"):
        with pytest.raises(Refused, match="leaves the version's artifacts"):
            confined(path, "p")
    listing = [{"path": "model.onnx", "is_dir": False}, {"path": "MLmodel", "is_dir": False}]
    assert model_files(None, listing) == ["model.onnx"]
    assert model_files("flavors:\n  onnx:\n    data: net.onnx\n", listing) == ["net.onnx"]
    with pytest.raises(Refused, match="leaves"):
        model_files("flavors:\n  onnx:\n    data: ../../1/secret.onnx\n", listing)
    with pytest.raises(Refused, match=r"no \.onnx file"):
        model_files(None, [{"path": "MLmodel", "is_dir": False}])


def test_every_onnx_file_of_a_folder_is_checked_unless_the_mlmodel_names_one() -> None:
    """A Hugging Face Optimum export: an encoder, a decoder and a decoder with past, each checked."""
    optimum = [{"path": f"0/r/artifacts/model/{name}", "is_dir": False} for name in
               ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx", "config.json", "model.onnx_data")]  # fmt: skip
    optimum.append({"path": "0/r/artifacts/model/onnx", "is_dir": True})
    assert model_files(None, optimum) == ["decoder_model.onnx", "decoder_with_past_model.onnx", "encoder_model.onnx"]
    assert model_files("flavors:\n  onnx:\n    data: encoder_model.onnx\n", optimum) == ["encoder_model.onnx"]
    many = [{"path": f"part{index:02d}.onnx", "is_dir": False} for index in range(MAX_MODEL_FILES + 1)]
    assert len(model_files(None, many[:MAX_MODEL_FILES])) == MAX_MODEL_FILES
    with pytest.raises(Refused, match=rf"{MAX_MODEL_FILES + 1} \.onnx files .* at most {MAX_MODEL_FILES} are checked"):
        model_files(None, many)


class _Api(MlflowApi):
    """MLflow's answers, without a server."""

    def __init__(self, runs: dict[str, str]) -> None:
        super().__init__("http://127.0.0.1:5000", environ={})
        self.runs = runs

    async def run_artifact_uri(self, run_id: str) -> str:
        return self.runs[run_id]


@pytest.mark.parametrize(
    ("source", "run_uri", "said"),
    [
        ("file:///etc/model", "", "is a local path"),
        ("/srv/models/m", "", "is a local path"),
        ("s3://bucket/m", "", "is in S3 outside the service's bucket"),
        ("https://elsewhere.example/m.onnx", "", "scheme 'https' is not fetched"),
        ("mlflow-artifacts://10.0.0.9:80/0/m", "", "another host"),
        ("runs:/r1/model", "file:///var/mlruns/0/r1/artifacts", "is a local path"),
        ("runs:/r1/../../other", "mlflow-artifacts:/0/r1/artifacts", "leaves the version's artifacts"),
    ],
)
def test_sources_are_refused_unless_they_lead_to_mlflows_artifact_proxy(source: str, run_uri: str, said: str) -> None:
    with pytest.raises(Refused, match=said):
        asyncio.run(artifact_folder(_Api({"r1": run_uri}), {"source": source}))


def test_sources_that_lead_to_the_proxy() -> None:
    api = _Api({"r1": "mlflow-artifacts:/0/r1/artifacts"})
    assert asyncio.run(artifact_folder(api, {"source": "runs:/r1/model"})).where == "0/r1/artifacts/model"
    assert asyncio.run(artifact_folder(api, {"source": "mlflow-artifacts:/0/r1/artifacts/m"})).where == "0/r1/artifacts/m"
    assert asyncio.run(artifact_folder(api, {"source": "mlflow-artifacts://127.0.0.1:5000/0/x"})).where == "0/x"


def _bucket_root() -> BucketRoot:
    """The data root s3://models/mlflow, its objects in memory."""
    root = BucketRoot.__new__(BucketRoot)
    root.url = "s3://models/mlflow"
    root.store = MemoryStore()  # type: ignore[assignment]  # obstore's in-memory store answers the calls an S3Store does
    obstore.put(root.store, "0/r1/artifacts/model/model.onnx", b"onnx bytes")
    obstore.put(root.store, "0/r1/artifacts/model/w/weights.bin", b"weights")
    return root


def test_s3_artifacts_are_read_only_below_the_services_own_bucket(tmp_path: Path) -> None:
    root = _bucket_root()
    for run_uri in ("s3://other/mlflow/0/r1/artifacts", "s3://models/elsewhere/0/r1/artifacts", "s3://models/mlflow/../x"):
        with pytest.raises(Refused, match=r"outside the service's bucket|leaves the version's artifacts"):
            asyncio.run(artifact_folder(_Api({"r1": run_uri}), {"source": "runs:/r1/model"}, root))
    with pytest.raises(Refused, match="outside the service's bucket"):  # no bucket of the service's: never S3
        asyncio.run(artifact_folder(_Api({"r1": "s3://models/mlflow/0/r1/artifacts"}), {"source": "runs:/r1/model"}))
    folder_root = FolderRoot(str(tmp_path))
    with pytest.raises(Refused, match="outside the service's bucket"):  # a data root folder: never S3 either
        asyncio.run(artifact_folder(_Api({"r1": "s3://models/mlflow/0/r1/artifacts"}), {"source": "runs:/r1/model"}, folder_root))
    folder = asyncio.run(artifact_folder(_Api({"r1": "s3://models/mlflow/0/r1/artifacts"}), {"source": "runs:/r1/model"}, root))
    assert isinstance(folder, BucketFolder) and folder.where == "s3://models/mlflow/0/r1/artifacts/model"
    listing = asyncio.run(folder.listing())
    assert {(entry["path"], entry["is_dir"]) for entry in listing} == {("model.onnx", False), ("w", True)}
    fetched = asyncio.run(folder.download("w/weights.bin", tmp_path / "weights.bin", 100))
    assert (tmp_path / "weights.bin").read_bytes() == b"weights" and fetched.sha256 == hashlib.sha256(b"weights").hexdigest()
    with pytest.raises(ObjectMissing):
        asyncio.run(folder.download("absent.bin", tmp_path / "absent.bin", 100))
    with pytest.raises(ImportTooLarge):
        asyncio.run(folder.download("model.onnx", tmp_path / "model.onnx", 5))


def test_mlflows_auth_conventions() -> None:
    assert auth_headers({"MLFLOW_TRACKING_TOKEN": "t"}) == {"Authorization": "Bearer t"}
    assert auth_headers({"MLFLOW_TRACKING_USERNAME": "u", "MLFLOW_TRACKING_PASSWORD": "p"}) == {"Authorization": "Basic dTpw"}
    assert auth_headers({}) == {}


def test_a_write_mlflow_does_not_take_is_kept_and_written_later(tmp_path: Path, rows: RegistryRows) -> None:
    pending = PendingWrites(tmp_path / "pending")
    rule = AliasRule(rows)
    write = WriteBack("m", "3", {"onnx_import.verdict": "pass", "onnx_import.checks": "schema=pass"}, "validated")
    pending.keep(write)
    pending.keep(write)  # the same version again: one entry
    assert len(pending.waiting()) == 1
    calls: list[tuple[str, ...]] = []

    class Down(MlflowApi):
        async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
            raise MlflowUnavailable("down")

    class Up(MlflowApi):
        async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
            calls.append(("tag", name, version, key, value))

        async def set_alias(self, name: str, alias: str, version: str) -> None:
            calls.append(("alias", name, alias, version))

        async def version_by_alias(self, name: str, alias: str) -> dict[str, Any]:
            raise MlflowRefused(404, "RESOURCE_DOES_NOT_EXIST")  # no version holds it yet

    assert asyncio.run(pending.drain(Down("http://127.0.0.1:1", environ={}), rule)) == 0
    assert len(pending.waiting()) == 1

    class Forbidden(MlflowApi):
        async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
            raise MlflowRefused(403, "PERMISSION_DENIED")

    assert asyncio.run(pending.drain(Forbidden("http://127.0.0.1:1", environ={}), rule)) == 0
    assert len(pending.waiting()) == 1  # the service's credentials can be fixed: kept
    assert asyncio.run(pending.drain(Up("http://127.0.0.1:1", environ={}), rule)) == 1
    assert pending.waiting() == []
    pending.keep(WriteBack("gone", "1", {"onnx_import.verdict": "pass"}))

    class Gone(MlflowApi):
        async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
            raise MlflowRefused(404, "RESOURCE_DOES_NOT_EXIST")

    assert asyncio.run(pending.drain(Gone("http://127.0.0.1:1", environ={}), rule)) == 0
    assert pending.waiting() == []  # the version deleted: nothing to tag any more
    assert calls == [  # the verdict last: whoever sees it sees the rest
        ("tag", "m", "3", "onnx_import.checks", "schema=pass"),
        ("alias", "m", "validated", "3"),
        ("tag", "m", "3", "onnx_import.alias", "moved here (no version held it)"),
        ("tag", "m", "3", "onnx_import.verdict", "pass"),
    ]


def _answering(*statuses: int) -> tuple[MlflowApi, list[str]]:
    """An MlflowApi whose calls get `statuses` in turn (then 200), and the paths it asked."""
    asked: list[str] = []
    left = list(statuses)

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        status = left.pop(0) if left else 200
        body = {"model_version": {"name": "m", "version": "1"}} if status == 200 else {"error_code": "X", "message": "no"}
        return httpx.Response(status, json=body)

    return MlflowApi("http://127.0.0.1:5000", environ={}, backoff=(0.0, 0.0, 0.0), transport=httpx.MockTransport(answer)), asked


def test_calls_mlflow_does_not_answer_are_retried_within_a_bound(caplog: pytest.LogCaptureFixture) -> None:
    api, asked = _answering(503, 429)
    assert asyncio.run(api.model_version("m", "1")) == {"name": "m", "version": "1"}
    assert len(asked) == 3 and caplog.text.count("; retry in") == 2  # each retry logged
    api, asked = _answering(503, 503, 503, 503, 503)
    with pytest.raises(MlflowUnavailable, match="4 attempts"):
        asyncio.run(api.model_version("m", "1"))
    assert len(asked) == 4  # the first and one per backoff step, no more
    api, asked = _answering(404)
    with pytest.raises(MlflowRefused, match="404: X no"):
        asyncio.run(api.model_version("m", "1"))
    assert len(asked) == 1  # an answer is not retried


def test_a_verdict_being_written_when_the_service_stops_is_kept(tmp_path: Path, rows: RegistryRows) -> None:
    """The hook's write of a verdict, cancelled while MLflow is retried (the service stopping), keeps it to write later."""
    from service.registry.hook import RegistryHook

    hook = RegistryHook.__new__(RegistryHook)
    hook.pending = PendingWrites(tmp_path / "pending")
    hook.alias_rule = AliasRule(rows)

    class Slow(MlflowApi):
        async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
            await asyncio.sleep(60)  # MLflow down, the client between two retries

    hook.api = Slow("http://127.0.0.1:1", environ={})

    async def stop_while_writing() -> None:
        task = asyncio.create_task(hook.write(WriteBack("m", "7", {"onnx_import.verdict": "fail"})))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(stop_while_writing())
    (kept,) = pending_files = hook.pending.waiting()
    assert json.loads(kept.read_text())["tags"] == {"onnx_import.verdict": "fail"}, pending_files


def test_a_summary_becomes_the_versions_tags() -> None:
    summary = {
        "verdict": "fail",
        "checks": {"schema": {"status": "pass"}, "security": {"status": "fail"}, "smoke": {"status": "skipped", "reason": "flagged"}},
        "diagnostics": {"items": [{"stage": "security", "severity": "error", "code": "range-too-large", "message": "17 GB"}]},
    }
    verdict, tags = version_tags([file_imported("model.onnx", json.dumps(summary).encode(), "abc")], lambda ids: "https://onnx.example/prefix/links/TOKEN")
    assert verdict == "fail"
    assert tags == {
        "onnx_import.verdict": "fail",
        "onnx_import.model_id": "abc",
        "onnx_import.report": "https://onnx.example/prefix/links/TOKEN",
        "onnx_import.files": '[{"file":"model.onnx","verdict":"fail","model_id":"abc"}]',
        "onnx_import.checks": "schema=pass,security=fail,smoke=skipped",
        "onnx_import.reason": "security failed: range-too-large 17 GB; smoke skipped: flagged",
    }
    passed = {"verdict": "pass", "checks": {"schema": {"status": "pass"}}}
    assert version_tags([file_imported("model.onnx", json.dumps(passed).encode(), "abc")], lambda ids: "/links/" + ",".join(ids))[1] == {
        "onnx_import.verdict": "pass", "onnx_import.model_id": "abc", "onnx_import.checks": "schema=pass",
        "onnx_import.report": "/links/abc",
        "onnx_import.files": '[{"file":"model.onnx","verdict":"pass","model_id":"abc"}]',
    }  # fmt: skip
    assert not_imported("refused", "x\x00" + "y" * 5000)["onnx_import.reason"].startswith("x\\x00yyy")
    assert len(not_imported("refused", "y" * 5000)["onnx_import.reason"]) == 1000


def test_a_version_of_several_files_takes_the_worst_verdict_and_reports_each() -> None:
    assert worst(["pass", "fail", "pass"]) == "fail"
    assert worst(["fail", "incomplete"]) == "incomplete"
    assert worst(["incomplete", "refused", "pass"]) == "refused"
    assert worst(["pass", "pass"]) == "pass"
    passed = {
        "verdict": "pass",
        "checks": {"schema": {"status": "pass"}, "smoke": {"status": "pass", "bindings": [{"batch": 1}, {"batch": 2}]}},
    }
    failed = {"verdict": "fail", "checks": {"schema": {"status": "fail"}}, "diagnostics": {"items": []}}
    files = [
        file_imported("decoder_model.onnx", json.dumps(passed).encode(), "d" * 64),
        file_imported("encoder_model.onnx", json.dumps(failed).encode(), "e" * 64),
        file_not_imported("extra.onnx", "refused", "ExternalData: w.bin is missing"),
    ]
    links: list[list[str]] = []

    def report_link(ids: list[str]) -> str:
        links.append(ids)
        return "https://onnx.example/links/TOKEN"

    verdict, tags = version_tags(files, report_link)
    assert verdict == "refused"
    assert tags["onnx_import.model_id"] == "d" * 64  # the first file's
    assert json.loads(tags["onnx_import.files"]) == [
        {"file": "decoder_model.onnx", "verdict": "pass", "model_id": "d" * 64},
        {"file": "encoder_model.onnx", "verdict": "fail", "model_id": "e" * 64},
        {"file": "extra.onnx", "verdict": "refused", "model_id": ""},
    ]
    assert tags["onnx_import.checks"] == (
        "decoder_model.onnx: schema=pass,smoke=pass; encoder_model.onnx: schema=fail; extra.onnx: refused"
    )
    assert tags["onnx_import.reason"] == "encoder_model.onnx: schema failed; extra.onnx: ExternalData: w.bin is missing"
    assert tags["onnx_import.report"] == "https://onnx.example/links/TOKEN"
    assert links == [["d" * 64, "e" * 64]]  # one link, to the report of every imported file
    assert json.loads(tags["onnx_import.bindings"]) == {"decoder_model.onnx": [{"batch": 1}, {"batch": 2}]}
    many = [file_imported(f"{'n' * 300}{index:02d}.onnx", json.dumps(passed).encode(), f"{index:064x}") for index in range(16)]
    many_tags = version_tags(many, lambda ids: "https://onnx.example/links/" + "T" * (40 * len(ids)))[1]
    assert all(len(value) <= 5000 for value in many_tags.values()), {key: len(value) for key, value in many_tags.items()}
    listed = json.loads(many_tags["onnx_import.files"])
    assert listed[-1].get("more", 0) + len(listed) - ("more" in listed[-1]) == 16


def test_a_validation_whose_process_died_gets_the_verdict_incomplete(tmp_path: Path, rows: RegistryRows) -> None:
    """A front end killed mid-validation leaves its marker; the next tick of any front end keeps the
    verdict incomplete for it, written only if the version has no verdict yet, and never over a kept one."""
    import subprocess

    from service.registry.hook import RegistryHook
    from service.registry.under_way import UnderWay

    under_way = UnderWay(tmp_path / "under-way")
    mine = under_way.begin("alive", "1")
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in ("died", "died-kept"):
        orphan = under_way.begin(name, "2")
        marker = json.loads(orphan.read_text())
        orphan.write_text(json.dumps({**marker, "pid": dead.pid}))
    hook = RegistryHook.__new__(RegistryHook)
    hook.under_way, hook.pending, hook.deliveries = under_way, PendingWrites(tmp_path / "pending"), Deliveries(rows)
    hook.alias_rule = AliasRule(rows)
    hook.pending.keep(WriteBack("died-kept", "2", {"onnx_import.verdict": "pass"}))  # its real verdict, kept before it died
    tagged: dict[str, list[dict[str, str]]] = {"died": [], "died-kept": []}
    written: list[tuple[str, str, str]] = []

    class Api(MlflowApi):
        async def model_version(self, name: str, version: str) -> dict[str, Any]:
            return {"tags": tagged[name]}

        async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
            written.append((name, key, value))

    hook.api = Api("http://127.0.0.1:1", environ={})
    asyncio.run(hook.tick())
    assert mine.exists() and sorted(path.name for path in under_way.folder.iterdir()) == [mine.name]
    assert ("died", "onnx_import.verdict", "incomplete") in written
    assert ("died-kept", "onnx_import.verdict", "pass") in written and ("died-kept", "onnx_import.verdict", "incomplete") not in written
    assert hook.pending.waiting() == []
    written.clear()
    hook.pending.keep(WriteBack("died", "2", {"onnx_import.verdict": "incomplete"}, unless_tagged=True))
    tagged["died"] = [{"key": "onnx_import.verdict", "value": "pass"}]
    asyncio.run(hook.tick())
    assert written == []  # a version with a verdict keeps it


def test_a_pass_whose_alias_cannot_be_claimed_now_is_kept(tmp_path: Path, rows: RegistryRows) -> None:
    """The index away (a fleet's database restarting): the verdict is kept, written with the alias once it answers."""
    from service.errors import StorageUnavailable
    from service.registry.hook import RegistryHook

    class Away(RegistryRows):
        def claim(self, key: str, holder: str, lease_seconds: float) -> bool:
            raise StorageUnavailable("the database does not answer")

    written: list[tuple[str, str]] = []

    class Api(MlflowApi):
        async def set_tag(self, name: str, version: str, key: str, value: str) -> None:
            written.append((key, value))

        async def version_by_alias(self, name: str, alias: str) -> dict[str, Any]:
            raise MlflowRefused(404, "RESOURCE_DOES_NOT_EXIST")

        async def set_alias(self, name: str, alias: str, version: str) -> None:
            written.append(("alias", version))

    hook = RegistryHook.__new__(RegistryHook)
    hook.pending, hook.api = PendingWrites(tmp_path / "pending"), Api("http://127.0.0.1:1", environ={})
    hook.alias_rule = AliasRule(Away(rows.database))
    asyncio.run(hook.write(WriteBack("m", "4", {"onnx_import.verdict": "pass"}, "validated")))
    assert len(hook.pending.waiting()) == 1 and ("onnx_import.verdict", "pass") not in written
    assert asyncio.run(hook.pending.drain(hook.api, AliasRule(rows))) == 1  # the index back
    assert written[-3:] == [("alias", "4"), ("onnx_import.alias", "moved here (no version held it)"), ("onnx_import.verdict", "pass")]
