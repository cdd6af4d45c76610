"""A model removed while its graph renders, or its summary is read, answers 404, never 500.

`GET /models/{id}/graph` renders on a tenant's first request
(`service.imports.graph_render`): it reads the model's record, then copies or
opens its files for the worker. A DELETE racing it (`Store.release`: the
record dropped under the index's lock, the content removed after it, outside
the lock) can land between the two, and on object storage also between the
listing of the model's objects and their download. Either way the store
says FileNotFoundError (gone), which the render answers as `not-found`; so
do a removal while the worker reads the files, before the graph is added
(nothing is added) and before it is opened. Each
race is made to happen here at its point, in process (the in-process
sandbox), on the local folder backend and a fleet's (a
real SeaweedFS and PostgreSQL, skipped where those cannot be had); the
process test `test_a_graph_racing_delete_never_answers_500_or_a_cut_body`
races them by timing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from in_process import InProcessSandbox

from service.access.keys import ANONYMOUS
from service.app import create_app
from service.settings import Settings
from service.store.model_store import Store

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "testdata" / "samples"
PROBLEMS = "https://onnx-import.example/problems/"


def serve(request: pytest.FixtureRequest, backend: str) -> Iterator[TestClient]:
    """The whole application in process on `backend`; a 500 is answered, not raised."""
    folder: Path = request.getfixturevalue("tmp_path")
    chosen: dict[str, Any] = {"data_root": str(SAMPLES), "workers": 1, "store_min_free": 0}
    if backend == "fleet":
        fleet = request.getfixturevalue("fleet_servers")
        monkeypatch: pytest.MonkeyPatch = request.getfixturevalue("monkeypatch")
        for name, value in fleet.environ.items():
            monkeypatch.setenv(name, value)
        chosen.update(store=fleet.new_store_url(), database=fleet.new_database(), cache_dir=folder / "cache")
    else:
        chosen.update(store=str(folder / "store"), store_backend=backend)
    settings = Settings(**chosen)
    with TestClient(create_app(settings, InProcessSandbox(settings)), raise_server_exceptions=False) as served:
        yield served


@pytest.fixture(params=("local", "fleet"))
def client(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    yield from serve(request, request.param)


@pytest.fixture
def fleet_client(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    """On a fleet's store: the model's files are objects, copied for the worker."""
    yield from serve(request, "fleet")


def store_of(client: TestClient) -> Store:
    store: Store = client.app.state.service.store  # type: ignore[attr-defined]
    return store


def upload(client: TestClient) -> str:
    path = SAMPLES / "add.onnx"
    response = client.post("/models", files={"model": (path.name, path.read_bytes())})
    assert response.status_code == 201, response.text
    model_id: str = response.json()["id"]
    return model_id


def assert_gone(client: TestClient, model_id: str) -> None:
    """The graph request that raced the removal, and any after it: 404 not-found."""
    for _ in range(2):
        response = client.get(f"/models/{model_id}/graph")
        assert response.status_code == 404, response.text
        assert response.json()["type"] == PROBLEMS + "not-found"


def deleted_after(call: Callable[..., Any], store: Store, model_id: str) -> Callable[..., Any]:
    """`call`, then the tenant's DELETE of the model (once): the race, at that point."""
    released: list[bool] = []

    def racing(*args: Any) -> Any:
        answer = call(*args)
        if not released:
            released.append(store.release(ANONYMOUS, model_id))
        return answer

    return racing


def deleted_before(call: Callable[..., Any], store: Store, model_id: str) -> Callable[..., Any]:
    """The tenant's DELETE of the model (once), then `call`: the race, at that point."""
    released: list[bool] = []

    def racing(*args: Any) -> Any:
        if not released:
            released.append(store.release(ANONYMOUS, model_id))
        return call(*args)

    return racing


def test_a_model_deleted_before_the_render_reads_its_files_answers_404(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DELETE lands after the render checked that the tenant holds the
    model and before it reads the files: their place is no longer recorded."""
    model_id, store = upload(client), store_of(client)
    monkeypatch.setattr(store, "holding", deleted_after(store.holding, store, model_id))
    assert_gone(client, model_id)
    assert not store.has(model_id)


def test_a_model_deleted_while_its_objects_are_copied_answers_404(fleet_client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DELETE's removal of the objects lands between the listing of the
    model's files and their download: the GET finds no object."""
    store = store_of(fleet_client)
    assert not store.content.on_local_disk
    model_id, content = upload(fleet_client), store.content
    monkeypatch.setattr(content.blobs, "fetch", deleted_after(content.blobs.fetch, store, model_id))
    assert_gone(fleet_client, model_id)
    assert not [place for place in content.places() if place.startswith(model_id)]  # its objects are gone


def test_the_files_of_a_removed_place_are_not_found(fleet_client: TestClient) -> None:
    """A removed place's copy is FileNotFoundError (an empty folder would send a worker to find nothing)."""
    store = store_of(fleet_client)
    assert not store.content.on_local_disk
    model_id = upload(fleet_client)
    record = store.read_record(model_id)
    assert record is not None and record.place
    with store.content.model_files(record.place) as folder:
        assert folder.upload_model.read_bytes() == (SAMPLES / "add.onnx").read_bytes()
    assert store.release(ANONYMOUS, model_id)
    with pytest.raises(FileNotFoundError), store.content.model_files(record.place):
        pass


def test_a_model_deleted_while_the_worker_reads_its_files_in_place_answers_404(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DELETE lands once the render has the model's folder (the local
    store's, read in place; a fleet's, a private copy): the worker finds no
    file, or the render's result finds no model to add it to."""
    model_id, store = upload(client), store_of(client)
    handed_out = store.content.model_files

    @contextlib.contextmanager
    def then_deleted(place: str) -> Iterator[Any]:
        with handed_out(place) as folder:
            assert store.release(ANONYMOUS, model_id)
            yield folder

    monkeypatch.setattr(store.content, "model_files", then_deleted)
    assert_gone(client, model_id)


def test_a_model_deleted_before_its_rendered_graph_is_added_answers_404(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DELETE lands between the render and the graph's addition: nothing is added to a removed model."""
    model_id, store = upload(client), store_of(client)
    monkeypatch.setattr(store, "add_graph", deleted_before(store.add_graph, store, model_id))
    assert_gone(client, model_id)
    assert not store.has(model_id) and store.usage() == 0


def test_a_model_deleted_before_its_graph_is_opened_answers_404(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DELETE lands between the graph's addition and its opening (the graph of a removed place is not found)."""
    model_id, store = upload(client), store_of(client)
    monkeypatch.setattr(store, "open_graph", deleted_before(store.open_graph, store, model_id))
    assert_gone(client, model_id)


def test_a_model_deleted_before_its_summary_is_read_answers_404(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """GET /models/{id}: the DELETE lands between the visibility check and the summary's read."""
    model_id, store = upload(client), store_of(client)
    monkeypatch.setattr(store, "summary", deleted_before(store.summary, store, model_id))
    response = client.get(f"/models/{model_id}")
    assert response.status_code == 404, response.text
    assert response.json()["type"] == PROBLEMS + "not-found"
