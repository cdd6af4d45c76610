"""The inferred types kept in a catalogue (service/store/catalog_shapes.py), read back as stored.

A user relies on: the check worker's list kept once and served as it is (the
route adds nothing to it); a text that is no JSON list, which only a broken
worker sends, never kept, so never served; a catalogue without the table (an
import before this release, or without `shape`) reads as an empty list.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from service.store.catalog import Catalog
from service.store.catalog_shapes import record_inferred

LISTED = json.dumps([{"name": "h", "type": {"kind": "tensor", "elem_type": "FLOAT", "shape": ["batch", 4]}}])


def empty_catalogue(path: Path) -> Path:
    sqlite3.connect(path).close()
    return path


def read_back(path: Path) -> str:
    catalog = Catalog(path)
    try:
        return catalog.inferred_types()
    finally:
        catalog.close()


def test_a_list_is_kept_and_read_back_as_it_was_written(tmp_path: Path) -> None:
    path = empty_catalogue(tmp_path / "catalog.sqlite")
    record_inferred(path, LISTED)
    assert read_back(path) == LISTED


@pytest.mark.parametrize("broken", ['{"name": "h"}', "[{", "not json", '"[]"'])
def test_a_text_that_is_no_json_list_is_not_kept(tmp_path: Path, broken: str) -> None:
    path = empty_catalogue(tmp_path / "catalog.sqlite")
    record_inferred(path, broken)
    assert read_back(path) == "[]"


def test_a_catalogue_from_before_the_shapes_reads_as_none(tmp_path: Path) -> None:
    assert read_back(empty_catalogue(tmp_path / "catalog.sqlite")) == "[]"
