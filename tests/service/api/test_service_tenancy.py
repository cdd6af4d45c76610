"""No side door between tenants, in the test process over ASGI
(support.asgi_service, its workers real), with API keys:
a tenant's errors carry only its own names; a graph another tenant viewed is
not faster to a tenant's first request (medians); per-tenant quotas
(`--tenant-max-models`, `--tenant-max-bytes`: 507 naming the limit); one
tenant's imports never evict another's models within its share; a graph
render counts against `--max-import-bytes`; each tenant's checks are its own
and run when asked. A catalogue deleted by another process:
process/test_service_restarts.py; reads racing DELETE and eviction:
process/test_racing_reads.py."""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import onnx
import pytest
from graph_timing import chain_model, first_graph_trials
from onnx import TensorProto, helper, numpy_helper
from support.asgi_service import AsgiService, serving_over_asgi
from support.service_harness import assert_problem, copy_samples

from service.access.keys import new_key

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py)


@dataclass
class Tenants:
    server: AsgiService
    alice: dict[str, str]
    bob: dict[str, str]


def _key_file(path: Path) -> tuple[Path, dict[str, str], dict[str, str]]:
    tables, headers = [], []
    for tenant in ("alice", "bob"):
        secret, table = new_key(tenant, ["import", "read", "delete"])
        tables.append(table)
        headers.append({"Authorization": f"Bearer {secret}"})
    path.write_text("".join(tables))
    return path, headers[0], headers[1]


def _serving_tenants(base: Path, *extra: str) -> Iterator[Tenants]:
    keys, alice, bob = _key_file(base / "keys.toml")
    with serving_over_asgi(base / "store", copy_samples(base / "root"), "--api-keys", str(keys), *extra) as server:
        yield Tenants(server, alice, bob)


@pytest.fixture(scope="module")
def shared_tenants(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Iterator[Tenants]:
    """One server with the default settings for the module's tests that need no
    other: each uploads models of its own (its own seeds), so none sees another's."""
    yield from _serving_tenants(tmp_path_factory.mktemp("tenants"))


@pytest.fixture()
def tenants(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Tenants]:
    """Alice and Bob on the shared server, or, for a test that gives settings of
    its own (`indirect` parametrization), on a server of its own."""
    extra: tuple[str, ...] = getattr(request, "param", ())
    if not extra:
        yield request.getfixturevalue("shared_tenants")
        return
    yield from _serving_tenants(tmp_path, *extra)


def upload(client: httpx.Client, headers: dict[str, str], name: str, data: bytes) -> httpx.Response:
    return client.post("/models", files={"model": (name, data)}, headers=headers)


@pytest.mark.local_store  # damages the stored upload in place
def test_a_failed_render_shows_a_tenant_only_its_own_name(tenants: Tenants) -> None:
    data = chain_model(10, seed=1)
    with tenants.server.client() as client:
        first = upload(client, tenants.alice, "alice-confidential-Q3-merger.onnx", data)
        second = upload(client, tenants.bob, "bob.onnx", data)
        assert first.status_code == second.status_code == 201 and first.json()["id"] == second.json()["id"]
        model_id = first.json()["id"]
        # The stored upload damaged in place (same size and times): the render's import fails.
        (stored,) = (tenants.server.store / "models" / model_id).glob("*/files/model.onnx")  # its one generation
        before = stored.stat()
        stored.write_bytes(b"\xff" * before.st_size)
        os.utime(stored, ns=(before.st_atime_ns, before.st_mtime_ns))
        refused = client.get(f"/models/{model_id}/graph", headers=tenants.bob)
    assert refused.status_code == 422, refused.text
    assert "alice" not in refused.text and "merger" not in refused.text
    assert refused.json()["input"] == "bob.onnx"


def test_a_graph_another_tenant_viewed_is_no_faster_to_a_first_request(tenants: Tenants) -> None:
    with tenants.server.client() as client:
        trials = first_graph_trials(client, tenants.alice, tenants.bob, trials=8, seed=100)
    # Bob's own second request is cached: in the median (one trial's may lose
    # to its first on a busy machine; a median of 16 does not).
    again = statistics.median(trial.again_seconds for trial in trials)
    assert again < statistics.median(trial.first_seconds for trial in trials), trials
    viewed = [trial.first_seconds for trial in trials if trial.viewed_before]
    fresh = [trial.first_seconds for trial in trials if not trial.viewed_before]
    # Before: 3.8 ms against 25.6 ms (0.15). Now both renders do the same work,
    # a ratio about 1 that a loaded machine spreads (a median of 4 against 4:
    # one run with three test processes on two cores gave 0.599). The bound
    # sits between the leak and the noise.
    ratio = statistics.median(viewed) / statistics.median(fresh)
    assert ratio > 0.4, (ratio, viewed, fresh)


def test_a_tenants_checks_are_its_own_and_run_when_asked(tenants: Tenants) -> None:
    """Through the real sandbox (the check worker's onnx and onnxruntime): bob
    never sees alice's five stages on the same bytes; his re-POST and the
    checks route run what he asks, and answer what ran."""
    data = chain_model(6, seed=7)
    with tenants.server.client() as client:
        every = "schema,security,shape,runtime,smoke"
        alice = client.post(f"/models?checks={every}", files={"model": ("a.onnx", data)}, headers=tenants.alice)
        bob = client.post("/models?checks=schema", files={"model": ("b.onnx", data)}, headers=tenants.bob)
        assert alice.status_code == bob.status_code == 201 and alice.json()["id"] == bob.json()["id"]
        model_id = bob.json()["id"]
        assert set(alice.json()["checks"]) == {"schema", "security", "shape", "runtime", "smoke"}
        assert set(client.get(f"/models/{model_id}", headers=tenants.bob).json()["checks"]) == {"schema"}
        again = client.post("/models?checks=schema,runtime", files={"model": ("b.onnx", data)}, headers=tenants.bob)
        assert again.status_code == 200 and set(again.json()["checks"]) == {"schema", "runtime"}
        assert again.json()["checks"]["runtime"]["status"] == "pass"
        assert set(again.json()["checks"]["runtime"]["versions"]) == {"onnxruntime"}
        rechecked = client.post(f"/models/{model_id}/checks?checks=smoke", headers=tenants.bob)
        assert rechecked.status_code == 200, rechecked.text
        checks = rechecked.json()["checks"]
        assert set(checks) == {"schema", "runtime", "smoke"} and rechecked.json()["verdict"] == "pass"
        assert checks["runtime"]["ran_at"] > again.json()["checks"]["runtime"]["ran_at"]  # smoke brings runtime: run again
        assert set(client.get(f"/models/{model_id}", headers=tenants.alice).json()["checks"]) == set(alice.json()["checks"])
        stranger = {"Authorization": "Bearer not-a-key"}
        assert client.post(f"/models/{model_id}/checks?checks=shape", headers=stranger).status_code == 401


@pytest.mark.parametrize("tenants", [("--tenant-max-models", "2")], indirect=True)
def test_a_tenant_beyond_its_model_quota_gets_507_naming_it(tenants: Tenants) -> None:
    with tenants.server.client() as client:
        for seed in range(2):
            assert upload(client, tenants.alice, f"m{seed}.onnx", chain_model(4, seed)).status_code == 201
        body = assert_problem(upload(client, tenants.alice, "m2.onnx", chain_model(4, 2)), 507, "tenant-quota-exceeded")
        assert body["limit"] == "tenant_max_models"
        # the same bytes again are not a new model; another tenant has its own share
        assert upload(client, tenants.alice, "m0.onnx", chain_model(4, 0)).status_code == 200
        assert upload(client, tenants.bob, "m2.onnx", chain_model(4, 2)).status_code == 201


def _weights(seed: int, megabytes: float) -> bytes:
    values = np.random.default_rng(seed).standard_normal(int(megabytes * 250_000)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["Y"])],
        "weights",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(values.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(values.shape))],
        [numpy_helper.from_array(values, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    data: bytes = model.SerializeToString()
    return data


@pytest.mark.parametrize("tenants", [("--tenant-max-bytes", "1500000")], indirect=True)
def test_a_tenant_beyond_its_byte_quota_gets_507_naming_it(tenants: Tenants) -> None:
    with tenants.server.client() as client:
        assert upload(client, tenants.alice, "w1.onnx", _weights(1, 1.0)).status_code == 201
        body = assert_problem(upload(client, tenants.alice, "w2.onnx", _weights(2, 1.0)), 507, "tenant-quota-exceeded")
        assert body["limit"] == "tenant_max_bytes"
        assert upload(client, tenants.bob, "w2.onnx", _weights(2, 1.0)).status_code == 201


@pytest.mark.parametrize("tenants", [("--store-max-bytes", "3300000")], indirect=True)
def test_one_tenants_imports_never_evict_another_tenants_model(tenants: Tenants) -> None:
    with tenants.server.client() as client:
        alices = upload(client, tenants.alice, "a.onnx", _weights(10, 1.0)).json()["id"]
        bobs = [upload(client, tenants.bob, f"b{seed}.onnx", _weights(seed, 1.0)) for seed in (11, 12, 13, 14)]
        assert all(response.status_code == 201 for response in bobs), [response.text for response in bobs]
        # bob's own oldest made room; alice's model (within its share) stayed
        assert client.get(f"/models/{alices}", headers=tenants.alice).status_code == 200
        assert client.get(f"/models/{bobs[0].json()['id']}", headers=tenants.bob).status_code == 404
        assert client.get(f"/models/{bobs[-1].json()['id']}", headers=tenants.bob).status_code == 200


@pytest.mark.parametrize("tenants", [("--max-import-bytes", "1MiB")], indirect=True)
def test_a_graph_render_counts_against_the_import_byte_limit(tenants: Tenants) -> None:
    """A key that may only read cannot grow the store past --max-import-bytes through GET /graph. The graph
    document is kept gzip-compressed: a chain whose names are random keeps more than 1 MiB of it, while its
    import (a path under the data root: the store keeps no copy) adds a fraction of that."""
    names = [os.urandom(16).hex() for _ in range(20_001)]
    nodes = [helper.make_node("Relu", [names[i]], [names[i + 1]], name=names[i]) for i in range(20_000)]
    graph = helper.make_graph(
        nodes, "random_names", [helper.make_tensor_value_info(names[0], TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [4])],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), str(tenants.server.data_root / "random.onnx"))
    with tenants.server.client() as client:
        imported = client.post("/models", json={"path": "random.onnx"}, headers=tenants.alice)
        assert imported.status_code == 201, imported.text
        before = sum(path.stat().st_size for path in tenants.server.store.rglob("*") if path.is_file())
        body = assert_problem(client.get(f"/models/{imported.json()['id']}/graph", headers=tenants.alice), 413, "payload-too-large")
        assert body["limit"] == "max_import_bytes"
    after = sum(path.stat().st_size for path in tenants.server.store.rglob("*") if path.is_file())
    assert after - before < 64 << 10


def test_onnx_reads_the_chain_models() -> None:
    """The models above are valid ONNX (so what the service answers is about tenancy, not a broken model)."""
    onnx.checker.check_model(onnx.load_from_string(chain_model(10, seed=1)))
