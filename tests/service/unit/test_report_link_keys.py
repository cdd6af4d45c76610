"""Report links' keys and tokens, without a service (`service.imports.report_links`).

The operator's keys: the first signs, every one opens (a rotation keeps the
old key while its links should open, and drops it to end them); the variable
and the file are read as the settings say, and a key too short refuses the
start. The token: a diff link says its two ids in order, and a link to 16
models (or to the most a link takes, with a long tenant and address) fits
MLflow's 5,000-character tag values. The stored key, shared by replicas:
tests/service/unit/test_sql_index.py; the route: tests/service/api/test_report_links.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from service.errors import LinkRefused
from service.imports.report_links import MAX_LINK_MODELS, ReportLinks
from service.settings import Settings
from service.settings.kinds import SettingsError
from service.store.backends import open_store
from service.store.model_store import Store

SAMPLES = Path(__file__).resolve().parents[3] / "testdata" / "samples"
OLD, NEW = "o" * 32, "n" * 40
MLFLOW_TAG_CHARS = 5000


def model_id(name: object) -> str:
    return hashlib.sha256(str(name).encode()).hexdigest()


def settings(tmp_path: Path, **chosen: object) -> Settings:
    return Settings(data_root=str(SAMPLES), store=str(tmp_path / "store"), store_backend="memory", **chosen)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return open_store(settings(tmp_path))  # never opened: the operator's keys ask nothing of it


def token(link: str) -> str:
    return link.rpartition("/")[2]


def test_the_first_key_signs_and_every_one_opens(store: Store) -> None:
    before = ReportLinks(store, [OLD], 90)
    during = ReportLinks(store, [NEW, OLD], 90)
    after = ReportLinks(store, [NEW], 90)
    old_link = token(before.report_link("", "mlflow", [model_id(1)]))
    assert during.opened(old_link).model_ids == (model_id(1),)  # the old key's links still open
    new_link = token(during.report_link("", "mlflow", [model_id(2)]))
    assert after.opened(new_link).model_ids == (model_id(2),)  # signed with the new key
    with pytest.raises(LinkRefused):
        after.opened(old_link)  # the old key dropped: its links no longer open


def test_a_diff_link_says_its_two_models_in_order(store: Store) -> None:
    links = ReportLinks(store, [OLD], 90)
    opened = links.opened(token(links.diff_link("https://onnx.example", "team", model_id("a"), model_id("b"))))
    assert (opened.kind, opened.tenant, opened.model_ids) == ("diff", "team", (model_id("a"), model_id("b")))


def test_links_fit_mlflows_tag_values(store: Store) -> None:
    links = ReportLinks(store, [OLD], 90)
    sixteen = links.report_link("https://onnx-import.example.com/service", "mlflow", [model_id(n) for n in range(16)])
    assert len(sixteen) < 800, len(sixteen)
    most = links.report_link("https://" + "x" * 300, "t" * 200, [model_id(n) for n in range(MAX_LINK_MODELS)])
    assert len(most) <= MLFLOW_TAG_CHARS, len(most)
    with pytest.raises(ValueError, match="1 to 64 model ids"):
        links.report_link("", "mlflow", [model_id(n) for n in range(MAX_LINK_MODELS + 1)])
    with pytest.raises(ValueError, match="64 lower-case hex digits"):
        links.report_link("", "mlflow", [model_id(1).upper()])


def test_the_keys_come_from_the_variable_else_the_file(tmp_path: Path, store: Store) -> None:
    key_file = tmp_path / "link-keys"
    key_file.write_text(f"{NEW}\n\n  {OLD}  \n")
    from_file = ReportLinks.for_settings(settings(tmp_path, link_key_file=key_file), store)
    signed_old = token(ReportLinks(store, [OLD], 90).report_link("", "t", [model_id(1)]))
    assert from_file.opened(signed_old).tenant == "t"
    from_variable = ReportLinks.for_settings(settings(tmp_path, link_key=OLD, link_key_file=key_file), store)  # the variable wins
    assert ReportLinks(store, [OLD], 90).opened(token(from_variable.report_link("", "t", [model_id(1)]))).tenant == "t"
    with pytest.raises(SettingsError, match="at least 32 characters"):
        settings(tmp_path, link_key="short")
    key_file.write_text("short\n")
    with pytest.raises(SettingsError, match="--link-key-file must hold keys of at least 32 characters"):
        ReportLinks.for_settings(settings(tmp_path, link_key_file=key_file), store)
    with pytest.raises(SettingsError, match="--link-days"):
        settings(tmp_path, link_days=0)
