"""The comparison of two stored models a tenant may read.

Owns `model_diff`: each model's graph document (rendered for this tenant
on its first request, as `GET /models/{id}/graph` does:
`service.imports.graph`) and its opsets (from its stored summary), compared
by `service.model_diff` in a thread. The result is kept for the few pairs
asked last, per tenant (a page after the first is not a second comparison,
and no tenant's timing tells whether another compared the same models).
Graph documents larger than MAX_DIFF_GRAPH_BYTES together are refused
(`DiffTooLarge`, 422): parsing them would cost the front end several times
their size in memory.
"""

from __future__ import annotations

import json
import os
import threading

import anyio.to_thread

from service.errors import DiffTooLarge, NotFound
from service.imports.graph import graph_document
from service.imports.parts import ImportParts
from service.imports.stored_model import GONE
from service.memo import Memo
from service.model_diff import ModelDiff, ModelSide, compare_models

MAX_DIFF_GRAPH_BYTES = 256 << 20  # both graph documents together
_kept: Memo[tuple[str, str, str], ModelDiff] = Memo(4)  # (tenant, a, b) -> the comparison
_kept_lock = threading.Lock()


def _read_graphs(fd_a: int, fd_b: int) -> tuple[object, object]:
    """Both graph documents, parsed; both descriptors closed, whatever happens."""
    try:
        size = os.fstat(fd_a).st_size + os.fstat(fd_b).st_size
        if size > MAX_DIFF_GRAPH_BYTES:
            raise DiffTooLarge(f"the two graph documents hold {size} bytes; at most {MAX_DIFF_GRAPH_BYTES} are compared")
        with open(fd_a, "rb", closefd=False) as first, open(fd_b, "rb", closefd=False) as second:
            return json.load(first), json.load(second)
    finally:
        os.close(fd_a)
        os.close(fd_b)


def _opsets(parts: ImportParts, model_id: str) -> list[object]:
    """The model's opsets, from its stored summary."""
    try:
        found = json.loads(parts.store.summary(model_id)).get("opsets", [])
    except FileNotFoundError:
        raise NotFound(GONE) from None
    return found if isinstance(found, list) else []


async def model_diff(parts: ImportParts, tenant: str, a: str, b: str) -> ModelDiff:
    """The comparison of model `a` (before) with model `b` (after), both readable by `tenant`."""
    with _kept_lock:
        found = _kept.find((tenant, a, b))
    if found is not None:
        return found
    fd_a = await graph_document(parts, a, tenant)
    try:
        fd_b = await graph_document(parts, b, tenant)
    except BaseException:
        os.close(fd_a)
        raise
    graph_a, graph_b = await anyio.to_thread.run_sync(_read_graphs, fd_a, fd_b)
    opsets_a = await parts.read(lambda: _opsets(parts, a))
    opsets_b = await parts.read(lambda: _opsets(parts, b))
    diff = await anyio.to_thread.run_sync(compare_models, ModelSide(a, graph_a, opsets_a), ModelSide(b, graph_b, opsets_b))
    with _kept_lock:
        _kept.get((tenant, a, b), lambda: diff)
    return diff
