"""The inferred value types in a work folder's catalogue: the front end writes them once, at import.

Owns `record_inferred` (the `shape` stage's types of the values a model does
not declare, `StageResult.inferred`, written after the import worker's
tensors and findings) and the table that holds them. A stored catalogue
gives them back with `Catalog.inferred_types` (`service.store.catalog`); a
catalogue written before them, or by an import that did not run `shape`,
has no such table and gives none. They are a function of the model's bytes
and onnx's version alone, the same for every tenant that holds the model.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any, Final

INFERRED_TABLE: Final = "inferred_types"
CREATE_INFERRED: Final = f"CREATE TABLE IF NOT EXISTS {INFERRED_TABLE} (seq INTEGER PRIMARY KEY, name TEXT NOT NULL, type TEXT NOT NULL)"


def record_inferred(catalog: Path, types: dict[str, Any]) -> None:
    """Keep `types` (name -> type, as `describe_type` writes one) in the catalogue, in their order."""
    connection = sqlite3.connect(catalog)
    try:
        connection.execute(CREATE_INFERRED)
        rows = ((name, json.dumps(value, separators=(",", ":"))) for name, value in types.items())
        connection.executemany(f"INSERT INTO {INFERRED_TABLE} (name, type) VALUES (?, ?)", rows)
        connection.commit()
    finally:
        connection.close()
