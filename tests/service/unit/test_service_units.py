"""The service's pure parts, without a server: settings, byte ranges, .npy
headers, tensor names, path rules and the problem bodies."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest

from service.api.problems import ProblemError, domain_problem
from service.api.tensor_responses import entity_tags, none_match, npy_header, parse_range, range_condition_holds
from service.errors import MAX_DETAIL_CHARS, PathRefused, bounded
from service.settings import load_settings
from service.settings.kinds import GIB, MIB, SettingsError, parse_size
from service.store.catalog import Catalog
from service.store.client_paths import check_relative_path, lexical_refusal
from service.tasks.catalog_builder import build_catalog, slug
from service.tasks.catalog_format import tensor_href


def test_sizes() -> None:
    assert parse_size("2GiB") == 2 * GIB
    assert parse_size("512 MiB") == 512 * MIB
    assert parse_size("1.5M") == 1_500_000
    assert parse_size("4096") == 4096
    for bad in ("", "lots", "1 parsec", "-1"):
        with pytest.raises(SettingsError):
            parse_size(bad)


def test_settings_flags_win_over_environment_over_defaults(tmp_path: Path) -> None:
    defaults = load_settings([], {})
    assert (defaults.host, defaults.port, defaults.max_upload, defaults.max_upload_total) == ("127.0.0.1", 8000, 2 * GIB, 16 * GIB)
    assert Path(defaults.data_root).name == "samples" and defaults.store == str(Path.cwd() / "state" / "store")
    environ = {"ONNX_SERVICE_PORT": "9000", "ONNX_SERVICE_WORKER_MEMORY": "256MiB", "ONNX_SERVICE_DATA_ROOT": str(tmp_path)}
    from_env = load_settings([], environ)
    assert (from_env.port, from_env.worker_memory, from_env.data_root) == (9000, 256 * MIB, str(tmp_path))
    assert load_settings(["--port", "9001"], environ).port == 9001


def test_no_setting_turns_on_a_test_hook() -> None:
    """The faults the tests inject are theirs (tests/support/faults.py): the old hooks' flag is unknown."""
    with pytest.raises(SystemExit):
        load_settings(["--debug-worker-sleep", "1"], {})
    assert not {"test_hooks", "debug_worker_sleep"} & {name for name in load_settings([], {}).__dataclass_fields__}


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (None, None),
        ("bytes=0-9", (0, 9)),
        ("bytes=90-200", (90, 99)),
        ("bytes=-10", (90, 99)),
        ("bytes=-1000", (0, 99)),
        ("bytes=50-", (50, 99)),
        ("bytes=0-1,4-5", None),
        ("items=0-1", None),
        ("bytes=5-1", None),
        ("bytes=a-b", None),
        ("bytes=-", None),
        ("BYTES=0-9", (0, 9)),  # the unit is case-insensitive
        ("bytes=²-", None),  # Unicode digits are not digits here (str.isdigit says they are)
        ("bytes=0-٣", None),
        ("bytes=-¹", None),
        ("bytes=0-" + "9" * 5000, (0, 99)),  # a last position of any length: to the end
        ("bytes=-" + "9" * 5000, (0, 99)),  # a suffix longer than the whole
        ("bytes=" + "0" * 5000 + "7-8", (7, 8)),
        ("bytes=" + "9" * 5000 + "-1", None),  # last before first: invalid
    ],
)
def test_ranges(header: str | None, expected: tuple[int, int] | None) -> None:
    assert parse_range(header, 100) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=-0", "bytes=200-300", "bytes=" + "9" * 5000 + "-"])
def test_unsatisfiable_ranges(header: str) -> None:
    with pytest.raises(ProblemError) as caught:
        parse_range(header, 100)
    assert caught.value.problem.status == 416 and caught.value.headers["Content-Range"] == "bytes */100"


def test_entity_tag_conditions() -> None:
    assert entity_tags('"a", W/"b",, "c,d"') == [(False, '"a"'), (True, '"b"'), (False, '"c,d"')]
    assert entity_tags('"a" "b"') is None and entity_tags("a") is None and entity_tags('W/"a') is None
    assert none_match(['W/"t"'], '"t"') and none_match(["*"], '"t"') and none_match(['"x"', '"t"'], '"t"')
    assert not none_match([], '"t"') and not none_match(['"x"'], '"t"') and not none_match(["W/*"], '"t"')
    assert range_condition_holds(None, '"t"') and range_condition_holds('"t"', '"t"')
    assert not range_condition_holds('W/"t"', '"t"') and not range_condition_holds("Mon, 30 Nov 2026 08:59:35 GMT", '"t"')


@pytest.mark.parametrize("dims", [[], [3], [2, 3], [0, 4], [1] * 40])
def test_npy_headers_load_with_numpy(dims: list[int]) -> None:
    data = np.arange(int(np.prod(dims)), dtype="<f4").reshape(dims)
    header = npy_header("<f4", dims)
    assert len(header) % 64 == 0
    loaded = np.load(io.BytesIO(header + data.tobytes()), allow_pickle=False)
    assert loaded.shape == tuple(dims) and np.array_equal(loaded, data)


def test_catalogue_rows_aliases_and_hrefs(tmp_path: Path) -> None:
    assert slug("a/b c") == "a_b_c"
    assert slug("") == "_" and slug("..") == "_.." and slug(".hidden") == "_.hidden"
    assert slug("x" * 500) == "x" * 100
    import onnx
    from onnx import helper

    from importer import load_model_bytes

    tensors = [helper.make_tensor(name, onnx.TensorProto.FLOAT, [1], [1.0]) for name in ("w", "a/b", "a_b", "../x")]
    constants = [
        helper.make_node("Constant", [], ["c1"], name="c1", value=helper.make_tensor("w", onnx.TensorProto.FLOAT, [1], [2.0])),
        helper.make_node("Constant", [], ["c2"], value=helper.make_tensor("", onnx.TensorProto.FLOAT, [1], [3.0])),
    ]
    graph = helper.make_graph(constants, "g", [], [helper.make_tensor_value_info("c2", onnx.TensorProto.FLOAT, [1])], tensors)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    with load_model_bytes(model.SerializeToString()) as imported:
        built = build_catalog(imported.proto, keep_rows=2)
    assert built.count == 6 and [row.alias for row in built.rows] == ["w", "a_b"]
    (tmp_path / "catalog.sqlite").write_bytes(built.database)  # the store's copy, read as the front end reads it
    catalog = Catalog(tmp_path / "catalog.sqlite")
    rows = catalog.page(-1, 100, "")
    assert [row.alias for row in rows] == ["w", "a_b", "a_b~2", "_.._x", "w~2", "Constant.value"]
    assert [row.name for row in rows] == ["w", "a/b", "a_b", "../x", "w", ""]
    assert [row.shared for row in rows] == [2, 1, 1, 1, 2, 1]
    assert [row.field_path for row in catalog.by_name("w", 10)] == [
        "ModelProto.graph.initializer[0]",
        "ModelProto.graph.node[0].attribute[0].t",
    ]
    assert catalog.by_alias("a_b~2") == rows[2] and catalog.by_field_path("ModelProto.graph.initializer[3]") == rows[3]
    assert [row.name for row in catalog.page(0, 2, "a")] == ["a/b", "a_b"]
    # float_data: converted by the worker, one after another in the "converted" file
    assert [(row.file, row.offset, row.length) for row in rows] == [("converted", 4 * i, 4) for i in range(6)]
    assert b"".join(built.converted) == np.array([1, 1, 1, 1, 2, 3], np.float32).tobytes()
    catalog.close()
    assert tensor_href("M", "a/b", "ModelProto.graph.initializer[1]", 1) == "/models/M/tensors/a%2Fb"
    assert tensor_href("M", "..", "p", 1) == "/models/M/tensors/%2E%2E" and tensor_href("M", "", "p", 1) == "/models/M/tensors/"
    assert (
        tensor_href("M", "w", "ModelProto.graph.initializer[0]", 2) == "/models/M/tensors/w?field_path=ModelProto.graph.initializer%5B0%5D"
    )


@pytest.mark.parametrize(
    "path", ["", "/abs", "\\abs", "C:x", "a/../b", "..", "a\\..\\b", "x\0y", "%2e%2e/x", "%252E%252E/x", "a/%2E%2E%5Cb", "%2Fetc", "a%00"]
)
def test_refused_paths(path: str) -> None:
    with pytest.raises(PathRefused) as caught:
        check_relative_path(path)
    assert domain_problem(caught.value).problem.status == 400


@pytest.mark.parametrize("path", ["a.onnx", "sub/a.onnx", "a..b.onnx", "...", "%41.onnx", "50%.onnx"])
def test_accepted_paths(path: str) -> None:
    assert check_relative_path(path) == path and lexical_refusal(path) is None


def test_details_are_bounded_and_printable() -> None:
    text = bounded("\x00\x01\xff" + "x" * 5000)
    assert len(text) <= MAX_DETAIL_CHARS and text.isprintable()


def test_max_tensor_bytes_is_the_specifications_limit_unless_raised_within_2_31_to_2_60() -> None:
    assert load_settings([], {}).max_tensor_bytes == 2**31 - 1
    assert load_settings(["--max-tensor-bytes", "4GiB"], {}).max_tensor_bytes == 4 * GIB
    assert load_settings([], {"ONNX_SERVICE_MAX_TENSOR_BYTES": "1024TiB"}).max_tensor_bytes == 2**50
    for refused in ("1GiB", "2000000TiB"):
        with pytest.raises(SettingsError, match="--max-tensor-bytes must be within 2147483647 to"):
            load_settings(["--max-tensor-bytes", refused], {})
