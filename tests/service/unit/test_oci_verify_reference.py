"""What `onnx-import verify oci://...` is told before it speaks to a registry (service.registry.oci_verify):
the reference (a registry, a repository the distribution spec allows, a SHA-256 digest: never a
tag, which can be moved), and the registry's credentials file (`--credentials`, else Docker's own
places: `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`, else none: anonymous)."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.registry.oci_verify import ArtifactReference, credentials_file, parse_reference

DIGEST = "sha256:" + "ab" * 32


def test_a_reference_names_a_registry_a_repository_and_a_digest() -> None:
    reference = parse_reference(f"oci://registry.example:5000/team/models/net@{DIGEST}")
    assert reference == ArtifactReference("registry.example:5000", "team/models/net", DIGEST)
    assert str(reference) == f"oci://registry.example:5000/team/models/net@{DIGEST}"


@pytest.mark.parametrize(
    "text",
    [
        "oci://registry.example/models/net:v1",  # a tag
        "oci://registry.example/models/net@sha256:abc",  # a short digest
        f"oci://registry.example/models/net@sha512:{'ab' * 64}",  # another algorithm
        f"oci://registry.example@{DIGEST}",  # no repository
        f"oci://registry.example/Models/Net@{DIGEST}",  # not the spec's grammar
        f"oci://registry.example/models/../net@{DIGEST}",
        f"oci://user@registry.example/models/net@{DIGEST}",  # credentials belong in a file
    ],
)
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_reference(text)


def test_credentials_come_from_the_flag_else_dockers_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    given = tmp_path / "given.json"
    docker = tmp_path / "docker"
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    assert credentials_file(given, {"DOCKER_CONFIG": str(docker)}) == given
    assert credentials_file(None, {"DOCKER_CONFIG": str(docker)}) is None  # no config.json there: anonymous
    docker.mkdir()
    (docker / "config.json").write_text("{}")
    assert credentials_file(None, {"DOCKER_CONFIG": str(docker)}) == docker / "config.json"
    assert credentials_file(None, {}) is None
    (home / ".docker").mkdir(parents=True)
    (home / ".docker" / "config.json").write_text("{}")
    assert credentials_file(None, {}) == home / ".docker" / "config.json"
