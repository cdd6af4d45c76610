"""Report links (`GET /links/{token}`), in the test process over ASGI
(support.asgi_service, its workers real), with API keys on.

A link the service made opens its one report for a client with no key: the
SARIF of one model (the document the tenant's own `?format=sarif` gives), of
two (one run each, named by the model's name), or the comparison of two (the
tenant's own diff, paged under the link). Changed in any one character, cut,
expired, or signed by another store's key, it is refused (403); it opens
nothing but that report (no summary, tensor or graph, no other tenant's
view), and a model its tenant no longer holds is a 404. Two apps sharing one
store (front ends, replicas) share the key: a link one made opens on the
other. The keys themselves (the operator's, rotation, the token's length):
tests/service/unit/test_report_link_keys.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.api_keys import ACCESS_ROLES, key_file
from support.asgi_service import AsgiService, serving_over_asgi
from support.service_harness import assert_problem, copy_samples

from service.imports.report_links import ReportLinks

pytestmark = pytest.mark.both_stores  # on the local store, then on a fleet store (support/servers.py): the key in SQLite, then PostgreSQL

NAMES = ("add.onnx", "typed_fields.onnx", "if_subgraph.onnx")
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"  # base64url's, in the order of the values


@dataclass
class Served:
    server: AsgiService
    keys: Path
    data_root: Path
    alice: dict[str, str]
    bob: dict[str, str]
    ids: dict[str, str]  # alice's models by name

    @property
    def links(self) -> ReportLinks:
        return links_of(self.server)


def links_of(server: AsgiService) -> ReportLinks:
    links: ReportLinks = server.app.state.service.imports.links
    return links


def token_of(link: str) -> str:
    assert link.startswith("/links/"), link
    return link.removeprefix("/links/")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, store_kind: str) -> Iterator[Served]:
    base = tmp_path_factory.mktemp("links")
    secrets = key_file(base / "keys.toml", ACCESS_ROLES)
    alice, bob = ({"Authorization": f"Bearer {secrets[role]}"} for role in ("alice", "bob"))
    data_root = copy_samples(base / "root")
    with serving_over_asgi(base / "store", data_root, "--api-keys", str(base / "keys.toml")) as server, server.client() as client:
        ids = {}
        for name in NAMES:
            imported = client.post("/models", json={"path": name}, headers=alice)
            assert imported.status_code == 201, imported.text
            ids[name] = imported.json()["id"]
        yield Served(server, base / "keys.toml", data_root, alice, bob, ids)


def test_a_report_link_answers_the_sarif_to_a_client_with_no_key(served: Served) -> None:
    model_id = served.ids["add.onnx"]
    link = served.links.report_link("", "team-a", [model_id])
    with served.server.client() as client:
        opened = client.get(link)
        own = client.get(f"/models/{model_id}/diagnostics?format=sarif", headers=served.alice)
        assert_problem(client.get(f"/models/{model_id}/diagnostics?format=sarif"), 401, "unauthorized")  # the walls stand
    assert opened.status_code == 200, opened.text
    assert opened.headers["content-type"].startswith("application/sarif+json")
    assert opened.json() == own.json()  # the document the tenant's own request gives
    assert opened.json()["runs"][0]["properties"]["model_id"] == model_id
    assert opened.headers["cache-control"] == "private, no-store" and opened.headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize("count", [1, 2])  # 104 characters; 147, whose last one has two bits to spare
def test_a_link_changed_in_any_one_character_or_cut_is_refused(served: Served, count: int) -> None:
    token = token_of(served.links.report_link("", "team-a", [served.ids[name] for name in NAMES[:count]]))
    # each character's lowest bit flipped: in the last one of the longer link, a bit base64 leaves spare
    changed = [token[:at] + ALPHABET[ALPHABET.index(token[at]) ^ 1] + token[at + 1 :] for at in range(len(token))]
    with served.server.client() as client:
        assert client.get(f"/links/{token}").status_code == 200
        for other in [*changed, token[:-1], token[:40], token + "A", "not-a-link", "%25%25"]:
            body = assert_problem(client.get(f"/links/{other}"), 403, "link-refused")
            assert "changed or cut" in body["detail"]


def test_an_expired_link_is_refused(served: Served) -> None:
    link = served.links.report_link("", "team-a", [served.ids["add.onnx"]], expires=time.time() - 1)
    with served.server.client() as client:
        body = assert_problem(client.get(link), 403, "link-expired")
    assert body["detail"].startswith("this link expired at ") and "ask for a new one" in body["detail"]


def test_a_link_opens_its_report_and_nothing_else(served: Served) -> None:
    model_id = served.ids["add.onnx"]
    token = token_of(served.links.report_link("", "team-a", [model_id]))
    bearer = {"Authorization": f"Bearer {token}"}
    with served.server.client() as client:
        for path in ("/tensors", "/tensors/A", "/graph", "/shapes", "/diagnostics"):
            assert_problem(client.get(f"/links/{token}{path}"), 404, "not-found")
        for path in ("", "/tensors", "/tensors/A", "/graph", "/shapes", "/diagnostics"):
            assert_problem(client.get(f"/models/{model_id}{path}", headers=bearer), 401, "unauthorized")  # the token is no API key
            assert_problem(client.get(f"/models/{model_id}{path}", params={"token": token}), 401, "unauthorized")
        others = [served.ids[name] for name in NAMES if name != "add.onnx"]
        assert [run["properties"]["model_id"] for run in client.get(f"/links/{token}").json()["runs"]] == [model_id]
        # the tenant the link names is the view: bob holds none of alice's models
        assert_problem(client.get(served.links.report_link("", "team-b", [model_id])), 404, "not-found")
        assert_problem(client.get(served.links.report_link("", "team-a", [model_id, "0" * 64])), 404, "not-found")
        assert client.get(served.links.report_link("", "team-a", others)).status_code == 200  # its own link for each


def test_a_link_to_a_model_its_tenant_no_longer_holds_is_a_404(served: Served) -> None:
    with served.server.client() as client:
        imported = client.post("/models", json={"path": "external/model.onnx"}, headers=served.alice)
        assert imported.status_code == 201, imported.text
        link = served.links.report_link("", "team-a", [imported.json()["id"]])
        assert client.get(link).status_code == 200
        assert client.delete(f"/models/{imported.json()['id']}", headers=served.alice).status_code == 204
        assert_problem(client.get(link), 404, "not-found")


def test_a_link_to_two_models_is_one_sarif_with_a_run_each(served: Served) -> None:
    first, second = served.ids["add.onnx"], served.ids["typed_fields.onnx"]
    with served.server.client() as client:
        opened = client.get(served.links.report_link("", "team-a", [first, second]))
        assert opened.status_code == 200, opened.text
        own = [client.get(f"/models/{model_id}/diagnostics?format=sarif", headers=served.alice).json() for model_id in (first, second)]
    runs: list[dict[str, Any]] = opened.json()["runs"]
    assert [run["properties"]["model_id"] for run in runs] == [first, second]
    assert [run["artifacts"][0]["location"]["uri"] for run in runs] == ["add.onnx", "typed_fields.onnx"]
    assert [run["automationDetails"]["id"] for run in runs] == ["onnx-import/add.onnx/", "onnx-import/typed_fields.onnx/"]
    for run, alone in zip(runs, own, strict=True):  # each run is the model's own report but for its category
        assert {key: value for key, value in run.items() if key != "automationDetails"} == {
            key: value for key, value in alone["runs"][0].items() if key != "automationDetails"
        }


def test_a_diff_link_gives_the_tenants_diff_paged_under_the_link(served: Served) -> None:
    before, after = served.ids["add.onnx"], served.ids["if_subgraph.onnx"]
    link = served.links.diff_link("", "team-a", before, after)
    with served.server.client() as client:
        opened = client.get(link)
        own = client.get(f"/models/{before}/diff/{after}", headers=served.alice)
        assert opened.status_code == own.status_code == 200, opened.text
        assert opened.json() == own.json()
        first = client.get(link, params={"limit": 1}).json()
        assert first["links"]["next"].startswith(f"{link}?limit=1&cursor=")
        second = client.get(first["links"]["next"])
        assert second.status_code == 200, second.text
    assert first["changes"] + second.json()["changes"] == own.json()["changes"][:2]
    assert (opened.json()["a"]["id"], opened.json()["b"]["id"]) == (before, after)


def test_a_link_signed_with_another_stores_key_is_refused(served: Served, tmp_path: Path) -> None:
    with serving_over_asgi(tmp_path / "store", served.data_root, "--api-keys", str(served.keys)) as other, other.client() as client:
        foreign = links_of(other).report_link("", "team-a", [served.ids["add.onnx"]])
        assert_problem(client.get(served.links.report_link("", "team-a", [served.ids["add.onnx"]])), 403, "link-refused")
    with served.server.client() as client:
        assert_problem(client.get(foreign), 403, "link-refused")


def test_two_apps_sharing_a_store_share_the_key(served: Served) -> None:
    """A second app on the same store (another front end, or a replica on the fleet store)."""
    with serving_over_asgi(served.server.store, served.data_root, "--api-keys", str(served.keys)) as second:
        made_there = links_of(second).report_link("", "team-a", [served.ids["add.onnx"]])
        made_here = served.links.report_link("", "team-a", [served.ids["add.onnx"]])
        expires = time.time() + 3600
        assert links_of(second).diff_link("https://x.example", "team-a", "a" * 64, "b" * 64, expires=expires) == (
            served.links.diff_link("https://x.example", "team-a", "a" * 64, "b" * 64, expires=expires)
        )
        with second.client() as client:
            assert client.get(made_here).status_code == 200
    with served.server.client() as client:
        assert client.get(made_there).status_code == 200


def test_the_route_takes_no_credentials(served: Served) -> None:
    """A wrong API key beside a good link changes nothing: the link is the credential."""
    link = served.links.report_link("", "team-a", [served.ids["add.onnx"]])
    with served.server.client() as client:
        assert client.get(link, headers={"Authorization": "Bearer wrong"}).status_code == 200
        assert client.get(link, headers=served.bob).status_code == 200
