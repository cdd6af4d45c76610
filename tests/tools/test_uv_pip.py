"""tools/uv_pip.py hands uv what pip itself would use: its indexes, find-links
folders, constraints and certificate, each from where pip would take it.

pip's own `pip config list` is read (this interpreter's pip), with
PIP_CONFIG_FILE naming a file of the test's: pip reads it after the machine's
files, and PIP_* variables after that.
"""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest
from uv_pip import pip_configuration, uv_arguments


@pytest.fixture
def pip_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in [name for name in os.environ if name.startswith("PIP_")]:
        monkeypatch.delenv(name)
    settings = tmp_path / "pip.conf"
    monkeypatch.setenv("PIP_CONFIG_FILE", str(settings))
    return settings


def values_of(arguments: list[str], option: str) -> list[str]:
    return [value for name, value in itertools.pairwise(arguments) if name == option]


def test_pips_indexes_folders_and_constraints_become_uvs_options(pip_settings: Path, tmp_path: Path) -> None:
    pip_settings.write_text(
        "[global]\n"
        "index-url = https://index.example/simple\n"
        "extra-index-url = https://one.example/simple https://two.example/simple\n"
        f"find-links = {tmp_path}/wheels\n"
        f"constraint = {tmp_path}/cap.txt\n"
        f"cert = {tmp_path}/ca.pem\n"
        "trusted-host = one.example\n"
    )
    arguments, environment = uv_arguments(pip_configuration(sys.executable))
    assert values_of(arguments, "--default-index") == ["https://index.example/simple"]
    assert values_of(arguments, "--index") == ["https://one.example/simple", "https://two.example/simple"]
    assert values_of(arguments, "--find-links") == [f"{tmp_path}/wheels"]
    assert values_of(arguments, "--constraints") == [f"{tmp_path}/cap.txt"]
    assert values_of(arguments, "--allow-insecure-host") == ["one.example"]
    assert values_of(arguments, "--index-strategy") == ["unsafe-best-match"]  # pip compares every index's versions
    assert "--compile-bytecode" in arguments  # pip compiles what it installs
    assert environment["SSL_CERT_FILE"] == f"{tmp_path}/ca.pem"


def test_a_pip_variable_wins_over_the_install_section_which_wins_over_global(
    pip_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pip_settings.write_text(
        "[global]\nfind-links = /from-global\nindex-url = https://global.example/simple\n[install]\nfind-links = /from-install\n"
    )
    configuration = pip_configuration(sys.executable)
    assert configuration["find-links"] == "/from-install"
    assert configuration["index-url"] == "https://global.example/simple"
    monkeypatch.setenv("PIP_FIND_LINKS", "/from-variable")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_NO_COMPILE", "1")
    arguments, _ = uv_arguments(pip_configuration(sys.executable))
    assert values_of(arguments, "--find-links") == ["/from-variable"]
    assert "--no-index" in arguments and "--compile-bytecode" not in arguments


def test_with_no_certificate_set_uv_trusts_the_systems_store(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [name for name in os.environ if name.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # pip reads no file at all, as in a bare container
    monkeypatch.setenv("PIP_FIND_LINKS", "/wheels")
    arguments, environment = uv_arguments(pip_configuration(sys.executable))
    assert "--system-certs" in arguments and "SSL_CERT_FILE" not in environment
    assert values_of(arguments, "--find-links") == ["/wheels"]
