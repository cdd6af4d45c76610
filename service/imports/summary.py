"""A model's summary, in its two forms, each built in one place from its parts.

Owns `content_summary`: what the store keeps with the content, from the
bounded summary the worker made (`service.tasks.bounded_summary`), the
model's identity (the id, the model file's size and SHA-256, and every link,
tensors' real names percent-encoded) and the import's `CheckRuns`; and
`tenant_view`: a stored summary as one tenant is answered it, under the name
its request gave the model, with the label its holding has and its own check
runs (`service.checks.runs.summary_for`), never another tenant's. Also
`summary_bytes`, the one way either is written as JSON.
"""

from __future__ import annotations

import json
from typing import Any

from service.checks.runs import CheckRuns, summary_for
from service.tasks.catalog_format import npy_href, tensor_href

Json = Any
SUMMARY_TENSORS = 100  # tensors (and initializers) a summary lists; the rest are paged


def content_summary(worker_summary: Json, model_id: str, model_size: int, model_sha256: str, runs: CheckRuns) -> Json:
    """The summary the store keeps: the worker's, with the id, the model file,
    the links and the checks of the import that stored it."""

    def link(item: Json) -> None:
        item["href"] = tensor_href(model_id, item["name"], item["field_path"], item.pop("shared"))
        item["npy_href"] = npy_href(item["href"], item["elem_type"])

    graph = worker_summary["graph"]
    for item in [*worker_summary["tensors"], *graph["initializers"]]:
        link(item)
    for item in graph["sparse_initializers"]:
        link(item["values"])
        link(item["indices"])
    base = f"/models/{model_id}"
    summary = {
        "id": model_id,
        **worker_summary,
        "model_file": {"size": model_size, "sha256": model_sha256},
        "links": {"self": base, "graph": f"{base}/graph", "tensors": f"{base}/tensors", "shapes": f"{base}/shapes"},
    }
    return summary_for(summary, runs, SUMMARY_TENSORS)


def tenant_view(stored: Json, display_name: str, runs: CheckRuns | None, label: str = "") -> bytes:
    """`stored` as a tenant is answered it: under `display_name` and its `label`
    (null for none), with `runs`, its own check runs (None, a holding from before
    them: the checks stored with the content)."""
    stored["input"] = display_name
    stored["label"] = label or None
    if runs is not None:
        summary_for(stored, runs, SUMMARY_TENSORS)
    return summary_bytes(stored)


def summary_bytes(document: Json) -> bytes:
    return json.dumps(document, allow_nan=False, separators=(",", ":"), ensure_ascii=False).encode()
