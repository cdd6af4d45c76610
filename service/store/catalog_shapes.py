"""The inferred value types in a work folder's catalogue: the front end writes them once, at import.

Owns `record_inferred` (the `shape` stage's types of the values a model does
not declare, `StageResult.inferred`: the JSON text of a list of `{"name",
"type"}`, written after the import worker's tensors and findings) and the
table that holds it, one row. The text is the check worker's, checked here
to be a JSON list (a broken worker's text is dropped, never served) and kept
as it is, zlib-compressed (the types of a deep network repeat: 20,000 of
them, 1.4 MB of text, are a few tens of KB, so they count little against
an import's --max-import-bytes), so that the route serves it without
building 100,000 objects. A
stored catalogue gives it back with `Catalog.inferred_types`
(`service.store.catalog`); a catalogue written before them, or by an import
that did not run `shape`, has no such table and gives none. They are a
function of the model's bytes and onnx's version alone, the same for every
tenant that holds the model.
"""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path
from typing import Final

INFERRED_TABLE: Final = "inferred_types"
CREATE_INFERRED: Final = f"CREATE TABLE IF NOT EXISTS {INFERRED_TABLE} (document BLOB NOT NULL)"  # zlib of the JSON text


def _dropped(pairs: list[tuple[str, object]]) -> None:
    return None


def record_inferred(catalog: Path, document: str) -> None:
    """Keep `document` (the JSON list of the inferred types) in the catalogue; one that is no JSON list is dropped."""
    try:  # its syntax checked whole, its objects never built (a hook that drops them: 0.07 s for 100,000, not 0.24)
        if not isinstance(json.loads(document, object_pairs_hook=_dropped), list):
            return
    except ValueError:
        return
    connection = sqlite3.connect(catalog)
    try:
        connection.execute(CREATE_INFERRED)
        connection.execute(f"INSERT INTO {INFERRED_TABLE} (document) VALUES (?)", (zlib.compress(document.encode(), 6),))
        connection.commit()
    finally:
        connection.close()
