"""A data root folder through the `DataRoot` interface: what it serves, and that no link leads out of it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from service.errors import ImportTooLarge, ModelSourceChanged, NotFound, PathForbidden, PathRefused, TensorSourceChanged
from service.store.data_root import DataRoot, Entry
from service.store.folder_root import FolderRoot
from service.store.records import SourceFile


@pytest.fixture
def root(tmp_path: Path) -> FolderRoot:
    (tmp_path / "outside.bin").write_bytes(b"secret")
    folder = tmp_path / "models"
    (folder / "m" / "w").mkdir(parents=True)
    (folder / "m" / "model.onnx").write_bytes(b"model bytes")
    (folder / "m" / "w" / "weights.bin").write_bytes(b"weights")
    (folder / "m" / "escape.bin").symlink_to(tmp_path / "outside.bin")
    (folder / "linked").symlink_to(tmp_path)
    return FolderRoot(str(folder))


def identity(root: FolderRoot, key: str) -> SourceFile:
    info = os.stat(os.path.join(root.url, key))
    return SourceFile(path=key, in_store=False, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino)


def test_a_file_is_fetched_whole_with_its_digest(root: FolderRoot, tmp_path: Path) -> None:
    typed: DataRoot = root
    fetched = typed.fetch("m/w/weights.bin", tmp_path / "copy" / "weights.bin", 100)
    assert (tmp_path / "copy" / "weights.bin").read_bytes() == b"weights"
    assert (fetched.key, fetched.size, fetched.sha256) == ("m/w/weights.bin", 7, hashlib.sha256(b"weights").hexdigest())
    with pytest.raises(ImportTooLarge):
        root.fetch("m/model.onnx", tmp_path / "big", 5)
    with pytest.raises(NotFound):
        root.fetch("m/absent.onnx", tmp_path / "absent", 100)


def test_no_fetch_leaves_the_folder(root: FolderRoot, tmp_path: Path) -> None:
    for key in ("m/escape.bin", "linked/outside.bin"):
        with pytest.raises(PathForbidden):
            root.fetch(key, tmp_path / "escaped", 100)
    for key in ("../outside.bin", "/etc/passwd", "m/%2e%2e/%2e%2e/outside.bin"):
        with pytest.raises(PathRefused):
            root.fetch(key, tmp_path / "escaped", 100)
    assert not (tmp_path / "escaped").exists()


def test_a_recorded_file_is_served_only_while_it_is_the_one_recorded(root: FolderRoot, tmp_path: Path) -> None:
    recorded = identity(root, "m/w/weights.bin")
    source = root.open(recorded)
    try:
        assert source.read(2, 3) == b"igh"
    finally:
        source.close()
    assert root.fetch("m/w/weights.bin", tmp_path / "again", 100, expected=recorded).size == 7
    Path(root.url, "m/w/weights.bin").write_bytes(b"other weights")
    with pytest.raises(TensorSourceChanged):
        root.open(recorded)
    with pytest.raises(ModelSourceChanged):
        root.fetch("m/w/weights.bin", tmp_path / "changed", 100, expected=recorded)


def test_a_listing_names_files_and_folders_never_links(root: FolderRoot) -> None:
    assert root.list("m") == [Entry("model.onnx", False, 11), Entry("w", True, 0)]
    assert root.list("") == [Entry("m", True, 0)]
    assert root.list("m/w/") == [Entry("weights.bin", False, 7)]
    assert root.list("absent") == [] and root.list("linked") == []
    with pytest.raises(PathRefused):
        root.list("../")
