"""The name and the label a client gives an import, and what the list says of
a verdict, in the test process over ASGI (support.asgi_service, its workers
real), with API keys for two tenants: an upload's `name` and `label` form
fields (a JSON import's members) are the summary's and the listing's `input`
and `label`; each tenant sees its own for the same bytes; a value too long,
empty, with a hidden character, sent twice or as a file is a 400 naming the
rule, and nothing is stored; the same tenant importing the bytes again with
a name or label renames its holding; each listing entry names the stages
its verdict covers. On the local store, then on a fleet store (the label's
column on SQLite and PostgreSQL)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from graph_timing import chain_model
from support.api_keys import key_file
from support.asgi_service import AsgiService, serving_over_asgi
from support.service_harness import assert_problem, copy_samples
from support.tus_uploads import TUS, patch

pytestmark = pytest.mark.both_stores

EVERY_STAGE = "schema,security,shape,runtime,smoke"


@dataclass
class Tenants:
    server: AsgiService
    alice: dict[str, str]
    bob: dict[str, str]


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Iterator[Tenants]:
    base = tmp_path_factory.mktemp("names")
    secrets = key_file(base / "keys.toml", {"alice": ("alice", ["import", "read", "delete"]), "bob": ("bob", ["import", "read"])})
    with serving_over_asgi(base / "store", copy_samples(base / "root"), "--api-keys", str(base / "keys.toml")) as server:
        yield Tenants(server, *({"Authorization": f"Bearer {secrets[role]}"} for role in ("alice", "bob")))


def upload(client: httpx.Client, headers: dict[str, str], data: bytes, query: str = "", **fields: str) -> httpx.Response:
    return client.post(f"/models{query}", files={"model": ("model.onnx", data)}, data=fields, headers=headers)


def listed(client: httpx.Client, headers: dict[str, str], model_id: str) -> dict[str, Any]:
    items: list[dict[str, Any]] = client.get("/models", headers=headers).json()["items"]
    return next(item for item in items if item["id"] == model_id)


def test_an_uploads_name_and_label_are_its_tenants_own(tenants: Tenants) -> None:
    data = chain_model(4, seed=501)
    with tenants.server.client() as client:
        alice = upload(client, tenants.alice, data, name="resnet-50", label="v3 fp16")
        bob = upload(client, tenants.bob, data, name="Bob's ÿ model", label="prod")
        assert alice.status_code == bob.status_code == 201, (alice.text, bob.text)
        model_id = alice.json()["id"]
        assert bob.json()["id"] == model_id
        assert (alice.json()["input"], alice.json()["label"]) == ("resnet-50", "v3 fp16")
        for headers, name, label in ((tenants.alice, "resnet-50", "v3 fp16"), (tenants.bob, "Bob's ÿ model", "prod")):
            summary = client.get(f"/models/{model_id}", headers=headers).json()
            assert (summary["input"], summary["label"]) == (name, label)
            item = listed(client, headers, model_id)
            assert (item["input"], item["label"]) == (name, label)
            assert "resnet" not in str(item) or headers is tenants.alice


def test_without_a_name_the_files_name_stands_and_the_label_is_null(tenants: Tenants) -> None:
    with tenants.server.client() as client:
        answer = client.post("/models", files={"model": ("mine.onnx", chain_model(3, seed=502))}, headers=tenants.alice)
        assert answer.status_code == 201, answer.text
        assert (answer.json()["input"], answer.json()["label"]) == ("mine.onnx", None)
        item = listed(client, tenants.alice, answer.json()["id"])
        assert (item["input"], item["label"]) == ("mine.onnx", None)


def test_importing_again_with_a_name_or_label_renames_the_holding(tenants: Tenants) -> None:
    data = chain_model(3, seed=503)
    with tenants.server.client() as client:
        first = upload(client, tenants.alice, data, name="first", label="draft")
        assert first.status_code == 201, first.text
        model_id = first.json()["id"]
        relabelled = upload(client, tenants.alice, data, label="final")  # the name stays
        assert relabelled.status_code == 200 and relabelled.json()["label"] == "final", relabelled.text
        item = listed(client, tenants.alice, model_id)
        assert (item["input"], item["label"]) == ("first", "final")
        renamed = upload(client, tenants.alice, data, query="?checks=schema,runtime", name="second")  # a worker runs: the other path
        assert renamed.status_code == 200, renamed.text
        assert (
            listed(client, tenants.alice, model_id)["input"],
            client.get(f"/models/{model_id}", headers=tenants.alice).json()["label"],
        ) == (
            "second",
            "final",
        )


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"name": "n" * 201}, "the name has 201 characters, more than 200"),
        ({"label": "l" * 101}, "the label has 101 characters, more than 100"),
        ({"label": "v3\nfp16"}, "the label holds the character U+000A, which is not printable"),
        ({"name": "a\u202egnp.onnx"}, "the name holds the character U+202E, which is not printable"),
        ({"name": "   "}, "the name is empty"),
    ],
)
def test_a_name_or_label_that_breaks_a_rule_is_a_400_naming_it(tenants: Tenants, fields: dict[str, str], said: str) -> None:
    data = chain_model(3, seed=504)
    with tenants.server.client() as client:
        refused = upload(client, tenants.alice, data, **fields)
        assert_problem(refused, 400)
        assert said in refused.json()["detail"]
        as_json = client.post("/models", json={"path": "add.onnx", **fields}, headers=tenants.alice)
        assert_problem(as_json, 400)
        assert said in as_json.json()["detail"]
        inputs = [item["input"] for item in client.get("/models", headers=tenants.alice).json()["items"]]
    assert all(fields.get("name", "-") != name for name in inputs)


def test_a_name_sent_twice_or_as_a_file_is_refused(tenants: Tenants) -> None:
    data = chain_model(3, seed=505)
    with tenants.server.client() as client:
        twice = client.post(
            "/models", files=[("model", ("m.onnx", data)), ("name", (None, "a")), ("name", (None, "b"))], headers=tenants.alice
        )
        assert_problem(twice, 400)
        assert "more than one 'name' field" in twice.json()["detail"]
        as_file = client.post("/models", files=[("model", ("m.onnx", data)), ("label", ("label.txt", b"v3"))], headers=tenants.alice)
        assert_problem(as_file, 400)
        assert "the 'label' field is text, not a file" in as_file.json()["detail"]
        huge = client.post("/models", files=[("model", ("m.onnx", data)), ("name", (None, "n" * 100_000))], headers=tenants.alice)
        assert_problem(huge, 400)
        assert "the name has more than 800 bytes" in huge.json()["detail"]


def test_a_json_import_takes_a_name_and_label(tenants: Tenants) -> None:
    with tenants.server.client() as client:
        answer = client.post(
            "/models", json={"path": "if_subgraph.onnx", "name": "models:/branchy/7", "label": "from the root"}, headers=tenants.bob
        )
        assert answer.status_code in (200, 201), answer.text
        assert (answer.json()["input"], answer.json()["label"]) == ("models:/branchy/7", "from the root")
        item = listed(client, tenants.bob, answer.json()["id"])
        assert (item["input"], item["label"]) == ("models:/branchy/7", "from the root")


def created(client: httpx.Client, headers: dict[str, str], data: bytes, **metadata: str) -> str:
    """A resumable upload holding `data`, with `metadata` (beside its filename); its id."""
    pairs = {"filename": "model.onnx", **metadata}
    header = ",".join(f"{key} {base64.b64encode(value.encode()).decode()}" for key, value in pairs.items())
    answer = client.post("/uploads", headers={**TUS, **headers, "Upload-Length": str(len(data)), "Upload-Metadata": header})
    assert answer.status_code == 201, answer.text
    url = answer.headers["location"]
    assert patch(client, url, 0, data, headers).status_code == 204
    return str(url.rsplit("/", 1)[1])


def test_a_resumable_uploads_metadata_names_and_labels_the_model(tenants: Tenants) -> None:
    """Its `name` and `label` metadata, unless the import request gives its own."""
    with tenants.server.client() as client:
        upload_id = created(client, tenants.alice, chain_model(3, seed=510), name="from metadata", label="tus")
        answer = client.post("/models", json={"upload": upload_id}, headers=tenants.alice)
        assert answer.status_code == 201, answer.text
        item = listed(client, tenants.alice, answer.json()["id"])
        assert (item["input"], item["label"]) == ("from metadata", "tus")
        upload_id = created(client, tenants.alice, chain_model(3, seed=511), name="from metadata", label="tus")
        answer = client.post("/models", json={"upload": upload_id, "label": "the request's"}, headers=tenants.alice)
        assert answer.status_code == 201, answer.text
        item = listed(client, tenants.alice, answer.json()["id"])
        assert (item["input"], item["label"]) == ("from metadata", "the request's")


def test_a_resumable_uploads_metadata_label_that_breaks_a_rule_is_a_400_at_creation(tenants: Tenants) -> None:
    header = "filename " + base64.b64encode(b"m.onnx").decode() + ",label " + base64.b64encode(b"v3\x1bfp16").decode()
    with tenants.server.client() as client:
        refused = client.post("/uploads", headers={**TUS, **tenants.alice, "Upload-Length": "10", "Upload-Metadata": header})
    assert_problem(refused, 400)
    assert "the label holds the character U+001B, which is not printable" in refused.json()["detail"]


def test_a_path_imports_name_is_its_path(tenants: Tenants) -> None:
    """A source other than an upload (a data-root path here; a registry's
    `models:/NAME/VERSION` alike) lands its display name in the same field."""
    with tenants.server.client() as client:
        answer = client.post("/models", json={"path": "external/model.onnx"}, headers=tenants.alice)
        assert answer.status_code in (200, 201), answer.text
        item = listed(client, tenants.alice, answer.json()["id"])
        assert (item["input"], item["label"]) == ("external/model.onnx", None)


def test_the_list_names_the_stages_a_verdict_covers(tenants: Tenants) -> None:
    data = chain_model(5, seed=506)
    with tenants.server.client() as client:
        default = upload(client, tenants.alice, data)
        every = upload(client, tenants.bob, data, query=f"?checks={EVERY_STAGE}")
        assert default.status_code == every.status_code == 201, (default.text, every.text)
        model_id = default.json()["id"]
        mine = listed(client, tenants.alice, model_id)
        assert mine["verdict"] == "pass"
        assert mine["stages"] == {"schema": "pass", "security": "pass", "shape": "pass"}
        assert list(mine["stages"]) == ["schema", "security", "shape"]  # in the order they run
        theirs = listed(client, tenants.bob, model_id)
        assert list(theirs["stages"]) == EVERY_STAGE.split(",") and set(theirs["stages"].values()) == {"pass"}


def test_the_label_survives_a_restart_of_the_index(tmp_path: Path) -> None:
    """Stored in the index (its own column), not in the process: a second
    service on the same store lists it."""
    root = copy_samples(tmp_path / "root")
    with serving_over_asgi(tmp_path / "store", root) as server, server.client() as client:
        answer = client.post("/models", files={"model": ("m.onnx", chain_model(3, seed=507))}, data={"label": "kept"})
        assert answer.status_code == 201, answer.text
    with serving_over_asgi(tmp_path / "store", root) as server, server.client() as client:
        assert client.get("/models").json()["items"][0]["label"] == "kept"
