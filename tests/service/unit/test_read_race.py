"""A tensor read that a removal lands in the middle of answers whole or gone: never 500, 409 or a body cut short.

`GET /models/{id}/tensors/{name}` reads the model's record, then opens its
catalogue and looks the name up, then opens the file holding the bytes
(`service.api.routes.tensors`). A DELETE (`Store.release`), an eviction or
another replica can land between any two, and the same bytes may be imported
again at once (the same id). Each interleaving is made to happen here at its
point, in process, on the local folder backend and a
fleet's (a real SeaweedFS and PostgreSQL, skipped where those cannot be had);
the process test tests/service/process/test_racing_reads.py races them by
timing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import onnx
import pytest
from fastapi.testclient import TestClient
from support.small_models import weight_model
from test_graph_render_race import SAMPLES, deleted_after, serve, store_of, upload

from service.access.keys import ANONYMOUS
from service.api.tensor_responses import SMALL_BYTES
from service.store.catalog import Catalog, CatalogUnavailable
from service.store.records import StoredRecord

PROBLEMS = "https://onnx-import.example/problems/"
WEIGHT = onnx.numpy_helper.to_array(next(t for t in onnx.load(str(SAMPLES / "add.onnx")).graph.initializer if t.name == "W"))


def read_before(stale: StoredRecord | None, real: Callable[[str, str], StoredRecord | None]) -> Callable[[str, str], StoredRecord | None]:
    """The index's `visible_record`, answering `stale` (the record as read before the change) the first time."""
    answers = [stale]
    return lambda tenant, model_id: answers.pop() if answers else real(tenant, model_id)


@pytest.fixture(params=("local", "fleet"))
def client(request: pytest.FixtureRequest) -> Iterator[TestClient]:
    yield from serve(request, request.param)


def test_a_catalogue_removed_before_its_first_lookup_answers_404(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DELETE lands after the catalogue was handed out (not opened yet: a
    connection opens on the first query) and before the lookup: its file is
    gone. Before, the lookup's stat of it was a FileNotFoundError, a 500."""
    model_id, store = upload(client), store_of(client)
    store.catalogs.open.clear()  # opened by the import's summary, if at all: the first lookup opens it
    monkeypatch.setattr(store, "catalog", deleted_after(store.catalog, store, model_id))
    response = client.get(f"/models/{model_id}/tensors/W")
    assert response.status_code == 404, response.text
    assert response.json()["type"] == PROBLEMS + "not-found"
    assert client.get(f"/models/{model_id}/tensors/W").status_code == 404


def test_a_closed_catalogue_whose_file_went_is_unavailable(client: TestClient) -> None:
    """A catalogue asked after its file went (the model removed; never opened,
    or closed by a sweep) says so, as the tensor routes expect (404), not an
    OSError; and a sweep sees it is gone."""
    model_id, store = upload(client), store_of(client)
    catalog = store.catalog(model_id, ANONYMOUS)
    assert catalog.by_name("W", 2)
    catalog.close()
    assert store.release(ANONYMOUS, model_id)
    gone = Catalog(catalog.path)
    assert not gone.current()  # what a sweep closes and forgets
    with pytest.raises(CatalogUnavailable):
        gone.by_name("W", 2)


def test_a_model_imported_again_after_its_record_was_read_answers_its_bytes(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record is read, then the model is deleted and the same bytes
    imported again (the same id, a new copy at a place of its own) before
    its catalogue is opened: the read answers the new copy's bytes, as a read
    after the import would, not 404 (the place the record read names is gone
    with its catalogue) or 409 tensor-source-changed."""
    model_id, store = upload(client), store_of(client)
    stale = store.read_record(model_id)
    assert client.delete(f"/models/{model_id}").status_code == 204
    assert upload(client) == model_id
    monkeypatch.setattr(store, "visible_record", read_before(stale, store.visible_record))
    response = client.get(f"/models/{model_id}/tensors/W")
    assert response.status_code == 200, response.text
    assert np.frombuffer(response.content, dtype="<f4").tolist() == WEIGHT.astype("<f4").ravel().tolist()


def test_a_model_removed_after_its_record_was_read_is_gone(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record is read, then the model is deleted before its file is
    opened: 404 or 410 (the file holding the tensor is gone), never 500."""
    model_id, store = upload(client), store_of(client)
    stale = store.read_record(model_id)
    assert client.get(f"/models/{model_id}/tensors/W").status_code == 200  # its catalogue open
    assert client.delete(f"/models/{model_id}").status_code == 204
    monkeypatch.setattr(store, "visible_record", read_before(stale, store.visible_record))
    response = client.get(f"/models/{model_id}/tensors/W")
    assert response.status_code in (404, 410), response.text
    assert response.json()["type"] in (PROBLEMS + "not-found", PROBLEMS + "tensor-source-gone")


def test_a_streamed_tensor_whose_file_goes_after_its_lookup_is_gone_not_cut(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The DELETE lands after the catalogue lookup, before the bytes of a tensor
    too large to read at once are fetched: on a fleet the object is fetched
    from before the headers go, so its absence is 410 tensor-source-gone,
    where it was a 200 whose body was cut (the GET made once the response had
    started); a local copy is 404, the model being gone."""
    values = SMALL_BYTES // 4 + 1024
    response = client.post("/models", files={"model": ("large.onnx", weight_model(5, values))})
    assert response.status_code == 201, response.text
    model_id, store = response.json()["id"], store_of(client)
    whole = client.get(f"/models/{model_id}/tensors/W")  # its catalogue open: the lookup finds the tensor
    assert whole.status_code == 200 and len(whole.content) == values * 4
    monkeypatch.setattr(store, "touch", deleted_after(store.touch, store, model_id))  # touched after the lookup
    response = client.get(f"/models/{model_id}/tensors/W")
    status, slug = (410, "tensor-source-gone") if not store.content.on_local_disk else (404, "not-found")
    assert response.status_code == status, response.text
    assert response.json()["type"] == PROBLEMS + slug
