"""tools/compile_cache.py keeps the compiled importer's modules by the digest of
what they are compiled from: the same sources, Python and compiler settings
find them, any change to one of those does not; a stored entry gives back the
very bytes stored, a store cut short leaves no entry, and only the newest
entries stay. (tests/e2e/test_builds.py builds a wheel from the cache.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from compile_cache import KEPT, KEY_FILES, MANIFEST, CompileCache, compile_key

SOURCES = ["importer/wire.py", "importer/graph.py"]


def source_tree(root: Path) -> Path:
    for name in [*KEY_FILES, *SOURCES]:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(f"# {name}\n")
    return root


@pytest.fixture(autouse=True)
def no_compiler_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("CC", "CFLAGS", "MYPYC_OPT_LEVEL"):
        monkeypatch.delenv(name, raising=False)


def test_the_key_is_the_content_not_the_folder(tmp_path: Path) -> None:
    assert compile_key(SOURCES, source_tree(tmp_path / "a")) == compile_key(SOURCES, source_tree(tmp_path / "b"))


@pytest.mark.parametrize("changed", [*KEY_FILES, *SOURCES])
def test_a_changed_source_or_build_file_is_another_key(changed: str, tmp_path: Path) -> None:
    root = source_tree(tmp_path)
    before = compile_key(SOURCES, root)
    with (root / changed).open("a") as file:
        file.write("x = 1\n")
    assert compile_key(SOURCES, root) != before


@pytest.mark.parametrize(("variable", "value"), [("CC", "clang"), ("CFLAGS", "-O0"), ("MYPYC_OPT_LEVEL", "0")])
def test_compiler_settings_are_part_of_the_key(variable: str, value: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = source_tree(tmp_path)
    before = compile_key(SOURCES, root)
    monkeypatch.setenv(variable, value)
    assert compile_key(SOURCES, root) != before


def built_modules(folder: Path, key: str) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    modules = {"importer.wire": folder / "wire.so", "importer._native__mypyc": folder / "native.so"}
    for name, path in modules.items():
        path.write_bytes(f"{key} {name}".encode())
    return modules


def stored(folder: Path, key: str) -> bool:
    """Whether another build of `key` would find its modules."""
    cache = CompileCache(folder, key)
    try:
        return cache.claim()
    finally:
        cache.release()


def test_a_stored_entry_gives_back_its_modules_byte_for_byte(tmp_path: Path) -> None:
    first = CompileCache(tmp_path / "cache", "k1")
    assert not first.claim()
    first.store(built_modules(tmp_path / "build", "k1"))
    first.release()
    again = CompileCache(tmp_path / "cache", "k1")
    assert again.claim()
    assert again.module_names() == ["importer._native__mypyc", "importer.wire"]
    again.copy("importer.wire", tmp_path / "installed" / "importer" / "wire.so")
    again.release()
    assert (tmp_path / "installed" / "importer" / "wire.so").read_bytes() == b"k1 importer.wire"
    assert not stored(tmp_path / "cache", "k2")


def test_a_store_cut_short_leaves_no_entry(tmp_path: Path) -> None:
    cache = CompileCache(tmp_path / "cache", "k1")
    cache.claim()
    partial = cache.entry.with_suffix(".partial")
    partial.mkdir()
    shutil.copyfile(built_modules(tmp_path / "build", "k1")["importer.wire"], partial / "importer.wire")
    cache.release()  # the build died there
    assert not stored(tmp_path / "cache", "k1")


def test_only_the_newest_entries_stay(tmp_path: Path) -> None:
    keys = [f"k{index}" for index in range(KEPT + 2)]
    for key in keys:
        cache = CompileCache(tmp_path / "cache", key)
        cache.claim()
        cache.store(built_modules(tmp_path / "build" / key, key))
        cache.release()
    kept = sorted(path.name for path in (tmp_path / "cache").iterdir() if (path / MANIFEST).is_file())
    assert kept == sorted(keys[-KEPT:])
