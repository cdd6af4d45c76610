"""`OpenFiles` (service/store/open_files.py) on real files, no mocks: a second
borrow reuses the cached descriptor and each borrow is a descriptor of its
own; a file rewritten in place, replaced by a rename or deleted is refused on
the next borrow as `open_checked` refuses it (409/410 to a client), its
cached descriptor closed; `sweep()` closes the descriptor of a deleted file;
a folder on the path swapped for a link is refused; eviction beyond the
capacity and `forget(paths)` close what they drop. Descriptors are counted in
/proc/self/fd."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from service.errors import TensorSourceChanged, TensorSourceGone
from service.store.open_files import OpenFiles
from service.store.records import SourceFile


def identity_of(root: Path, relative: str) -> SourceFile:
    """The record of `relative` below `root` as an import makes it."""
    info = os.stat(root / relative)
    return SourceFile(path=relative, in_store=True, size=info.st_size, mtime_ns=info.st_mtime_ns, inode=info.st_ino)


def write(root: Path, relative: str, data: bytes) -> SourceFile:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return identity_of(root, relative)


def held(path: Path) -> int:
    """How many of this process's descriptors are open on `path` (also once it
    is deleted or renamed over: the kernel then names it `path (deleted)`)."""
    names = {str(path), f"{path} (deleted)"}
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            count += os.readlink(f"/proc/self/fd/{fd}") in names
    return count


def read_all(fd: int) -> bytes:
    try:
        return os.pread(fd, os.fstat(fd).st_size, 0)
    finally:
        os.close(fd)


@pytest.fixture()
def files() -> Iterator[OpenFiles]:
    cache = OpenFiles(capacity=4)
    try:
        yield cache
    finally:
        cache.close()


def test_a_second_borrow_reuses_the_cached_descriptor_and_each_borrow_is_independent(tmp_path: Path, files: OpenFiles) -> None:
    identity = write(tmp_path, "sub/weights.bin", b"0123456789" * 100)
    first = files.borrow(str(tmp_path), identity)
    assert os.fstat(first).st_ino == identity.inode
    assert len(files.open) == 1 and held(tmp_path / "sub/weights.bin") == 2  # the borrowed one and the cached one
    ((cached, _),) = files.open.values()
    assert first != cached
    os.close(first)  # a borrower closing its descriptor leaves the cached one open
    assert held(tmp_path / "sub/weights.bin") == 1

    second = files.borrow(str(tmp_path), identity)
    assert len(files.open) == 1 and files.open[next(iter(files.open))][0] == cached  # no new open: the cached one, dup'd
    assert os.fstat(second).st_ino == identity.inode and second != cached
    assert held(tmp_path / "sub/weights.bin") == 2
    assert read_all(second) == b"0123456789" * 100
    assert read_all(files.borrow(str(tmp_path), identity)) == b"0123456789" * 100  # still served after both were closed
    assert held(tmp_path / "sub/weights.bin") == 1


def test_offsets_of_borrowers_do_not_move_each_other(tmp_path: Path, files: OpenFiles) -> None:
    """Borrowers read with pread; a dup shares the file offset, so a read() of
    one would move the other's: each reads what it asks for by position."""
    identity = write(tmp_path, "w.bin", bytes(range(256)))
    one, two = files.borrow(str(tmp_path), identity), files.borrow(str(tmp_path), identity)
    try:
        assert os.pread(one, 4, 10) == bytes([10, 11, 12, 13])
        assert os.pread(two, 4, 200) == bytes([200, 201, 202, 203])
    finally:
        os.close(one)
        os.close(two)


def test_a_file_rewritten_in_place_is_changed_and_its_descriptor_closed(tmp_path: Path, files: OpenFiles) -> None:
    identity = write(tmp_path, "w.bin", b"a" * 4096)
    os.close(files.borrow(str(tmp_path), identity))
    with open(tmp_path / "w.bin", "r+b") as rewritten:  # the same inode, another size and mtime
        rewritten.truncate(100)
    assert os.stat(tmp_path / "w.bin").st_ino == identity.inode
    with pytest.raises(TensorSourceChanged):
        files.borrow(str(tmp_path), identity)
    assert held(tmp_path / "w.bin") == 0 and len(files.open) == 0
    with pytest.raises(TensorSourceChanged):  # and again: no stale descriptor answers later
        files.borrow(str(tmp_path), identity)


def test_a_file_rewritten_with_the_same_size_is_changed(tmp_path: Path, files: OpenFiles) -> None:
    identity = write(tmp_path, "w.bin", b"a" * 4096)
    os.close(files.borrow(str(tmp_path), identity))
    os.utime(tmp_path / "w.bin", ns=(identity.mtime_ns + 10**9, identity.mtime_ns + 10**9))  # as a write would
    with pytest.raises(TensorSourceChanged):
        files.borrow(str(tmp_path), identity)
    assert held(tmp_path / "w.bin") == 0


def test_a_file_replaced_by_a_rename_is_changed_and_the_old_descriptor_closed(tmp_path: Path, files: OpenFiles) -> None:
    identity = write(tmp_path, "w.bin", b"old" * 1000)
    os.close(files.borrow(str(tmp_path), identity))
    (tmp_path / "new.bin").write_bytes(b"old" * 1000)  # the same bytes and size: only the inode says it is another file
    os.utime(tmp_path / "new.bin", ns=(identity.mtime_ns, identity.mtime_ns))
    os.replace(tmp_path / "new.bin", tmp_path / "w.bin")
    assert held(tmp_path / "w.bin") == 1  # the cached descriptor, of the file renamed over ("w.bin (deleted)")
    with pytest.raises(TensorSourceChanged):
        files.borrow(str(tmp_path), identity)
    assert held(tmp_path / "w.bin") == 0 and len(files.open) == 0


def test_a_deleted_file_is_gone(tmp_path: Path, files: OpenFiles) -> None:
    identity = write(tmp_path, "w.bin", b"x" * 4096)
    os.close(files.borrow(str(tmp_path), identity))
    (tmp_path / "w.bin").unlink()
    with pytest.raises(TensorSourceGone):
        files.borrow(str(tmp_path), identity)
    assert held(tmp_path / "w.bin") == 0 and len(files.open) == 0


def test_sweep_closes_the_descriptor_of_a_deleted_file(tmp_path: Path, files: OpenFiles) -> None:
    deleted = write(tmp_path, "deleted.bin", b"x" * 4096)
    kept = write(tmp_path, "kept.bin", b"y" * 4096)
    for identity in (deleted, kept):
        os.close(files.borrow(str(tmp_path), identity))
    (tmp_path / "deleted.bin").unlink()
    assert held(tmp_path / "deleted.bin") == 1  # its space is held until the descriptor is closed
    files.sweep()
    assert held(tmp_path / "deleted.bin") == 0
    assert held(tmp_path / "kept.bin") == 1 and len(files.open) == 1
    assert read_all(files.borrow(str(tmp_path), kept)) == b"y" * 4096


def test_a_folder_swapped_for_a_link_is_refused(tmp_path: Path, files: OpenFiles) -> None:
    root = tmp_path / "root"
    identity = write(root, "sub/w.bin", b"z" * 4096)
    os.rename(root / "sub", root / "sub.real")
    os.symlink("sub.real", root / "sub")  # the very same file at the end of the link
    with pytest.raises(TensorSourceChanged, match="no longer a folder"):
        files.borrow(str(root), identity)
    assert len(files.open) == 0


def test_a_folder_swapped_for_a_link_to_another_file_is_refused_when_cached(tmp_path: Path, files: OpenFiles) -> None:
    root = tmp_path / "root"
    identity = write(root, "sub/w.bin", b"z" * 4096)
    os.close(files.borrow(str(root), identity))
    outside = tmp_path / "outside"
    write(outside, "w.bin", b"LEAK" * 1024)
    os.rename(root / "sub", root / "sub.real")
    os.symlink(outside, root / "sub")
    with pytest.raises(TensorSourceChanged):
        files.borrow(str(root), identity)
    assert held(root / "sub.real" / "w.bin") == 0 and held(root / "sub" / "w.bin") == 0


def test_a_folder_swapped_for_a_link_to_the_same_file_is_refused_when_cached(tmp_path: Path, files: OpenFiles) -> None:
    root = tmp_path / "root"
    identity = write(root, "sub/w.bin", b"z" * 4096)
    os.close(files.borrow(str(root), identity))
    os.rename(root / "sub", tmp_path / "moved-out")  # the same folder, now outside the root, reached through a link
    os.symlink(tmp_path / "moved-out", root / "sub")
    with pytest.raises(TensorSourceChanged):
        os.close(files.borrow(str(root), identity))


def test_eviction_beyond_the_capacity_closes_the_least_recently_used(tmp_path: Path) -> None:
    files = OpenFiles(capacity=2)
    try:
        identities = [write(tmp_path, f"f{n}.bin", bytes([n]) * 100) for n in range(3)]
        os.close(files.borrow(str(tmp_path), identities[0]))
        os.close(files.borrow(str(tmp_path), identities[1]))
        os.close(files.borrow(str(tmp_path), identities[0]))  # f0 used again: f1 is now the oldest
        assert [held(tmp_path / f"f{n}.bin") for n in range(3)] == [1, 1, 0]
        os.close(files.borrow(str(tmp_path), identities[2]))
        assert [held(tmp_path / f"f{n}.bin") for n in range(3)] == [1, 0, 1]
        assert len(files.open) == 2
        in_use = files.borrow(str(tmp_path), identities[1])  # opened again; evicts f0
        assert [held(tmp_path / f"f{n}.bin") for n in range(3)] == [0, 2, 1]
        os.close(files.borrow(str(tmp_path), identities[0]))  # evicts f2, then f1's cached one: a borrowed descriptor stays open
        os.close(files.borrow(str(tmp_path), identities[2]))
        assert held(tmp_path / "f1.bin") == 1
        assert read_all(in_use) == bytes([1]) * 100
        assert held(tmp_path / "f1.bin") == 0
    finally:
        files.close()
    assert [held(tmp_path / f"f{n}.bin") for n in range(3)] == [0, 0, 0]


def test_forget_closes_the_descriptors_of_those_files_only(tmp_path: Path, files: OpenFiles) -> None:
    removed, other = tmp_path / "models" / "a", tmp_path / "models" / "b"
    gone = [write(removed, name, b"a" * 10) for name in ("model.onnx", "ext/w.bin")]
    staying = write(other, "model.onnx", b"b" * 10)
    for identity in gone:
        os.close(files.borrow(str(removed), identity))
    os.close(files.borrow(str(other), staying))
    assert held(removed / "model.onnx") == held(removed / "ext/w.bin") == held(other / "model.onnx") == 1
    files.forget({f"{removed}/model.onnx", f"{removed}/ext/w.bin"})
    assert held(removed / "model.onnx") == held(removed / "ext/w.bin") == 0
    assert held(other / "model.onnx") == 1 and len(files.open) == 1
    assert read_all(files.borrow(str(removed), gone[0])) == b"a" * 10  # still there: opened afresh


def test_close_closes_every_descriptor(tmp_path: Path) -> None:
    files = OpenFiles()
    identities = [write(tmp_path, f"f{n}.bin", b"q") for n in range(3)]
    for identity in identities:
        os.close(files.borrow(str(tmp_path), identity))
    files.close()
    assert [held(tmp_path / f"f{n}.bin") for n in range(3)] == [0, 0, 0] and len(files.open) == 0
