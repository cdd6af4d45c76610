"""The summary's last touches, in the front end: the id, the model file and
every link (tensors' real names percent-encoded), added to the bounded summary
the worker made (`service.sandbox.worker.summary`).
"""

from __future__ import annotations

from typing import Any

from service.sandbox.catalog_format import npy_href, tensor_href

Json = Any


def finish_summary(summary: Json, model_id: str, model_size: int, model_sha256: str) -> Json:
    """Add the id, the model file and the links (in the front end)."""

    def link(item: Json) -> None:
        item["href"] = tensor_href(model_id, item["name"], item["field_path"], item.pop("shared"))
        item["npy_href"] = npy_href(item["href"], item["elem_type"])

    graph = summary["graph"]
    for item in [*summary["tensors"], *graph["initializers"]]:
        link(item)
    for item in graph["sparse_initializers"]:
        link(item["values"])
        link(item["indices"])
    base = f"/models/{model_id}"
    return {
        "id": model_id,
        **summary,
        "model_file": {"size": model_size, "sha256": model_sha256},
        "links": {"self": base, "graph": f"{base}/graph", "tensors": f"{base}/tensors"},
    }
