"""An OCI artifact's layers pulled into a work folder (service.registry.oci_pull), against a
registry's answers made in process (httpx's MockTransport): raw layers become files at their
path annotation, tar and gzip-compressed tar layers are unpacked, and whatever would leave the
folder or pass the import's limits refuses the artifact with nothing written outside it."""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import io
import tarfile
from pathlib import Path

import httpx
import pytest

from service.errors import BadInput, UploadTooLarge
from service.registry.oci_api import OciRegistry
from service.registry.oci_artifact import Layer
from service.registry.oci_pull import ArtifactTree, pull_tree
from service.registry.sources import Refused
from service.settings import Settings

SAMPLES = Path(__file__).resolve().parents[3] / "testdata" / "samples"
RAW = "application/vnd.cncf.model.weight.v1.raw"
TAR = "application/vnd.cncf.model.weight.v1.tar"


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _tar(*members: tarfile.TarInfo, data: bytes = b"onnx") -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as archive:
        for member in members:
            if member.isreg():
                member.size = len(data)
                archive.addfile(member, io.BytesIO(data))
            else:
                archive.addfile(member)
    return out.getvalue()


def _member(name: str, kind: bytes = tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.type = kind
    member.linkname = target
    return member


def _pulled(tmp_path: Path, layers: list[tuple[bytes, str, str]], **settings: int) -> ArtifactTree:
    """The tree of an artifact whose layers are (bytes, media type, path annotation)."""
    blobs = {_digest(data): data for data, _, _ in layers}

    def answer(request: httpx.Request) -> httpx.Response:
        digest = request.url.path.rpartition("/")[2]
        return httpx.Response(200, content=blobs[digest]) if digest in blobs else httpx.Response(404)

    registry = OciRegistry("http://registry.test", transport=httpx.MockTransport(answer))
    chosen = Settings(data_root=str(SAMPLES), store=str(tmp_path / "store"), **settings)  # type: ignore[arg-type]
    descriptors = [Layer(_digest(data), len(data), media_type, path) for data, media_type, path in layers]
    (tmp_path / "work").mkdir(parents=True)
    return asyncio.run(
        pull_tree(registry, "models/net", descriptors, tmp_path / "work", chosen.max_upload_total, chosen.max_external_files)
    )


def _written_outside(tmp_path: Path) -> list[str]:
    """Files written below `tmp_path` outside the work area (`work/`)."""
    return sorted(
        str(path.relative_to(tmp_path))
        for path in tmp_path.rglob("*")
        if path.is_file() and "work" not in path.relative_to(tmp_path).parts[:1]
    )


def test_raw_and_tar_layers_make_the_tree(tmp_path: Path) -> None:
    nested = gzip.compress(_tar(_member("sub/more.bin")))
    tree = _pulled(tmp_path, [(b"model", RAW, "model.onnx"), (b"weights", RAW, "weights.bin"), (nested, TAR + "+gzip", "sub"),
                              (_tar(_member("other.onnx")), TAR, "other.onnx")])  # fmt: skip
    assert tree.models == ["model.onnx", "other.onnx"]
    assert tree.sizes == {"model.onnx": 5, "weights.bin": 7, "sub/more.bin": 4, "other.onnx": 4}
    assert (tree.root / "sub" / "more.bin").read_bytes() == b"onnx" and (tree.root / "weights.bin").read_bytes() == b"weights"
    assert not list((tmp_path / "work" / "blobs").iterdir())  # every layer taken into the tree


@pytest.mark.parametrize(
    ("member", "said"),
    [
        (_member("../escaped.onnx"), "'..' segment"),
        (_member("/tmp/escaped.onnx"), "not relative"),
        (_member("a/../../escaped.onnx"), "'..' segment"),
        (_member("link.onnx", tarfile.SYMTYPE, "/etc/passwd"), "a symbolic link"),
        (_member("hard.onnx", tarfile.LNKTYPE, "../outside"), "a hard link"),
        (_member("device.onnx", tarfile.CHRTYPE), "a device or FIFO"),
        (_member("fifo.onnx", tarfile.FIFOTYPE), "a device or FIFO"),
    ],
)
def test_a_tar_member_that_would_leave_the_work_area_refuses_the_artifact(tmp_path: Path, member: tarfile.TarInfo, said: str) -> None:
    with pytest.raises(Refused, match=said):
        _pulled(tmp_path, [(_tar(member), TAR, "model.onnx")])
    assert _written_outside(tmp_path) == [] and not Path("/tmp/escaped.onnx").exists()


def test_a_link_before_a_file_of_its_name_cannot_redirect_it(tmp_path: Path) -> None:
    archive = _tar(_member("sub", tarfile.SYMTYPE, str(tmp_path)), _member("sub/model.onnx"))
    with pytest.raises(Refused, match="a symbolic link"):
        _pulled(tmp_path, [(archive, TAR, "model.onnx")])
    assert _written_outside(tmp_path) == [] and not Path("/tmp/escaped.onnx").exists()


def test_two_layers_with_one_path_and_a_file_where_a_folder_is_meant_are_refused(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="two layers of the artifact hold that path"):
        _pulled(tmp_path / "a", [(b"one", RAW, "model.onnx"), (_tar(_member("model.onnx")), TAR, "model.onnx")])
    with pytest.raises(Refused, match="has that folder's name"):
        _pulled(tmp_path / "b", [(b"one", RAW, "model.onnx"), (b"two", RAW, "model.onnx/x.bin")])


def test_layers_the_gate_cannot_read_are_refused(tmp_path: Path) -> None:
    with pytest.raises(Refused, match="zstd"):
        _pulled(tmp_path / "a", [(b"\x28\xb5\x2f\xfd" + b"rest", TAR + "+zstd", "model.onnx")])
    with pytest.raises(Refused, match="no file path annotation and is not a tar archive"):
        _pulled(tmp_path / "b", [(b"model", RAW, "model.onnx"), (b"plain", TAR, "")])
    with pytest.raises(Refused, match="not a readable tar archive"):
        _pulled(tmp_path / "c", [(b"\x1f\x8b" + b"not gzip", TAR, "model.onnx")])
    with pytest.raises(Refused, match=r"no \.onnx file"):
        _pulled(tmp_path / "d", [(b"weights", RAW, "weights.bin")])


def _raw_header(name: str, kind: bytes, size: int) -> bytes:
    """One tar header block of `kind` claiming `size` bytes of data, then that many bytes (zeros) and the padding."""
    member = tarfile.TarInfo(name)
    member.type, member.size = kind, size
    return member.tobuf(tarfile.USTAR_FORMAT) + bytes(size + (-size % tarfile.BLOCKSIZE))


@pytest.mark.parametrize(
    ("kind", "size", "said"),
    [
        (tarfile.XHDTYPE, 4 << 20, "a tar header of 4194304 bytes"),  # a pax header tarfile would read whole into memory
        (tarfile.GNUTYPE_LONGNAME, 4 << 20, "a tar header of 4194304 bytes"),
        (tarfile.GNUTYPE_SPARSE, 0, "is sparse"),
    ],
)
def test_a_tar_header_the_reader_would_hold_in_memory_refuses_the_artifact(tmp_path: Path, kind: bytes, size: int, said: str) -> None:
    """The front end unpacks tar layers with Python's tarfile: what it would read into memory is bounded first."""
    archive = _raw_header("x", kind, size) + _tar(_member("model.onnx"))
    with pytest.raises(Refused, match=said):
        _pulled(tmp_path, [(archive, TAR, "model.onnx")])


def test_an_archive_of_endless_folder_entries_is_refused(tmp_path: Path) -> None:
    folders = [_member(f"d{number}", tarfile.DIRTYPE) for number in range(4097)]  # the reader keeps each member it read
    with pytest.raises(Refused, match="more than 4096 folder entries"):
        _pulled(tmp_path, [(_tar(*folders, _member("model.onnx")), TAR, "model.onnx")])


def test_the_imports_limits_hold(tmp_path: Path) -> None:
    with pytest.raises(UploadTooLarge, match="--max-upload-total"):
        _pulled(tmp_path / "a", [(b"m" * 600, RAW, "model.onnx"), (b"w" * 600, RAW, "weights.bin")], max_upload=1000, max_upload_total=1000)
    with pytest.raises(UploadTooLarge, match="--max-upload-total"):
        _pulled(
            tmp_path / "b", [(_tar(_member("model.onnx"), data=b"x" * 2000), TAR, "model.onnx")], max_upload=1000, max_upload_total=1000
        )
    many = [(b"m", RAW, "model.onnx")] + [(str(n).encode(), RAW, f"w{n}.bin") for n in range(3)]
    with pytest.raises(BadInput, match="--max-external-files"):
        _pulled(tmp_path / "c", many, max_external_files=2)


def test_a_blob_that_is_not_its_digest_is_refused(tmp_path: Path) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=b"something else")

    registry = OciRegistry("http://registry.test", transport=httpx.MockTransport(answer))
    (tmp_path / "work").mkdir()
    layer = Layer(_digest(b"model"), 5, RAW, "model.onnx")
    with pytest.raises(Refused, match="has another digest"):
        asyncio.run(pull_tree(registry, "models/net", [layer], tmp_path / "work", 1 << 20, 10))
