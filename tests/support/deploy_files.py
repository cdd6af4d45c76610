"""The deployment files as data, for the deployment tests.

Owns the small readers the deployment tests share: the Dockerfile as stages
of instructions (continuations joined, comments dropped), YAML documents,
Compose's variable interpolation (`${VAR:-default}` and the like), and the
size units of Kubernetes quantities and of Compose. It checks nothing itself
and never changes a file.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from support.paths import REPO

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
COMPOSE = REPO / "compose.yaml"
DEPLOY = REPO / "deploy"
KUSTOMIZATION = DEPLOY / "kustomization.yaml"
FRONT_END_ANNOTATION = "onnx-import-service/front-end-memory"
COMPOSE_FRONT_END = "x-front-end-memory"


@dataclass
class Instruction:
    keyword: str  # upper case: FROM, RUN, ENV, ...
    arguments: str  # the rest of the (joined) line


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def env(self) -> dict[str, str]:
        """Every `ENV KEY=VALUE ...` of the stage, later ones winning."""
        values: dict[str, str] = {}
        for instruction in self.all("ENV"):
            for word in shlex.split(instruction.arguments):
                key, separator, value = word.partition("=")
                assert separator, f"ENV {instruction.arguments!r}: write KEY=VALUE"
                values[key] = value
        return values

    def exec_form(self, keyword: str) -> list[str]:
        """The JSON (exec) form of the stage's last `keyword` instruction."""
        instructions = self.all(keyword)
        assert instructions, f"the stage has no {keyword}"
        text = instructions[-1].arguments
        if keyword == "HEALTHCHECK":
            text = text[text.index("CMD") + 3 :]
        value = json.loads(text)
        assert isinstance(value, list), f"{keyword} is not in exec form"
        return [str(item) for item in value]


@dataclass
class Dockerfile:
    arguments: dict[str, str]  # ARGs before the first FROM, with their defaults
    stages: list[Stage]

    @property
    def runtime(self) -> Stage:
        return self.stages[-1]

    def stage(self, name: str) -> Stage:
        return next(s for s in self.stages if s.name == name)

    def user_ids(self) -> tuple[int, int]:
        """The runtime stage's numeric `USER uid:gid`."""
        user = self.runtime.all("USER")[-1].arguments.strip()
        uid, _, gid = user.partition(":")
        return int(uid), int(gid or uid)


def logical_lines(text: str) -> list[str]:
    """Lines with `\\` continuations joined; comments and blank lines dropped."""
    lines: list[str] = []
    current = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or not stripped:
            continue
        if stripped.endswith("\\"):
            current += stripped[:-1] + " "
            continue
        lines.append(current + stripped)
        current = ""
    assert not current, "the Dockerfile ends inside a continuation"
    return lines


def read_dockerfile(path: Path = DOCKERFILE) -> Dockerfile:
    arguments: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(path.read_text()):
        keyword, _, rest = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = rest.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name))
        elif not stages:
            assert keyword == "ARG", f"only ARG may come before the first FROM, not {keyword}"
            key, _, default = rest.partition("=")
            arguments[key.strip()] = default.strip()
        else:
            stages[-1].instructions.append(Instruction(keyword, rest.strip()))
    return Dockerfile(arguments, stages)


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    with path.open() as handle:
        return [document for document in yaml.safe_load_all(handle) if document is not None]


def yaml_document(path: Path) -> dict[str, Any]:
    (document,) = yaml_documents(path)
    return document


_COMPOSE_VARIABLE = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-+?])([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(value: Any, variables: dict[str, str]) -> Any:
    """`value` (a Compose document or a part of it) with `${VAR}`, `$VAR`,
    `${VAR:-default}`, `${VAR-default}`, `${VAR:+alternative}`,
    `${VAR+alternative}` and `$$` replaced as Compose does, from `variables`
    (the host's environment). `${VAR:?message}` of an unset variable raises."""
    if isinstance(value, dict):
        return {key: interpolate(item, variables) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, variables) for item in value]
    if not isinstance(value, str):
        return value

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, word = match.group(2) or "", match.group(3) or ""
        present = name in variables
        given = present and variables[name] != ""
        if operator in (":-", "-"):
            return variables[name] if (given if operator == ":-" else present) else word
        if operator in (":+", "+"):
            return word if (given if operator == ":+" else present) else ""
        if operator in (":?", "?") and not (given if operator == ":?" else present):
            raise KeyError(f"{name}: {word}")
        return variables.get(name, "")

    return _COMPOSE_VARIABLE.sub(replace, value)


_K8S_UNITS = {
    "": 1, "m": 0.001,
    "k": 1000, "M": 1000**2, "G": 1000**3, "T": 1000**4,
    "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
}  # fmt: skip
_K8S_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)")


def k8s_quantity(value: str | int | float) -> float:
    """A Kubernetes quantity: `4608Mi` -> bytes, `2500m` -> 2.5."""
    match = _K8S_QUANTITY.fullmatch(str(value))
    assert match is not None and match.group(2) in _K8S_UNITS, f"{value!r} is not a Kubernetes quantity this test knows"
    return float(match.group(1)) * _K8S_UNITS[match.group(2)]


_COMPOSE_BYTES = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([bkmgt]?)(?:i?b)?", re.IGNORECASE)


def compose_bytes(value: str | int) -> int:
    """A Compose byte value: units b, k, m, g (optionally kb, mb, gb), all binary."""
    match = _COMPOSE_BYTES.fullmatch(str(value))
    assert match is not None, f"{value!r} is not a Compose byte value"
    power = "bkmgt".index(match.group(2).lower() or "b")
    return int(float(match.group(1)) * (1024**power))
