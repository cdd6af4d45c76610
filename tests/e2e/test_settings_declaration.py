"""The settings are declared once (`service/settings/__init__.py`); what describes them elsewhere agrees.

- `python -m service --help`: its flags are exactly the declared flags.
- README.md: the settings paragraph holds exactly `settings_table_markdown()`,
  which `python -m service.settings` prints.
- deploy/configmap.yaml: every key is a declared variable, and every declared
  setting is there or on `ABSENT_FROM_CONFIGMAP` below (compose.yaml must
  equal the ConfigMap but for the two access variables:
  tests/e2e/test_deploy_static.py checks that).
- The declarations themselves: names derived one way, defaults valid.
"""

# Regenerate the README table after changing a setting:
#     .venv/bin/python -m service.settings
# and paste its output over the table under "Every setting is a flag and ..." in README.md.

from __future__ import annotations

import os
import re
import subprocess
import sys

from support.deploy_files import DEPLOY, yaml_document
from support.paths import REPO

from service.settings import ENV_PREFIX, SETTINGS, Settings, env_name, flag_name, settings_table_markdown

README = REPO / "README.md"
CONFIGMAP = DEPLOY / "configmap.yaml"
SETTINGS_PARAGRAPH = "Every setting is a flag and an `ONNX_SERVICE_<NAME>` variable"

# Settings deliberately not in deploy/configmap.yaml, each with its reason.
ABSENT_FROM_CONFIGMAP = {
    "ONNX_SERVICE_DATABASE": "its URL carries a password: the fleet variants set it from a Secret (deploy/fleet, compose.fleet.yaml)",
    "ONNX_SERVICE_API_KEYS": "set by the Deployment (the key file is a mounted Secret) and by compose from the host's variable",
    "ONNX_SERVICE_ALLOW_ANONYMOUS": "never on a cluster; compose sets it for its loopback-only port",
    "ONNX_SERVICE_WORKER_UID": "the image runs as uid 10001, not root: workers keep that identity",
    "ONNX_SERVICE_WORKER_GID": "the image runs as uid 10001, not root: workers keep that identity",
    "ONNX_SERVICE_MLFLOW_URL": "the MLflow hook is off unless a registry is named: docs/registry.md sets it where one is",
    "ONNX_SERVICE_MLFLOW_WEBHOOK_SECRET": "a secret: from a Secret or the host's environment, never a ConfigMap (docs/registry.md)",
    "ONNX_SERVICE_MLFLOW_WEBHOOK_SECRET_FILE": "names a mounted Secret, only where the MLflow hook is on (docs/registry.md)",
    "ONNX_SERVICE_MLFLOW_TENANT": "only meaningful with the MLflow hook on; its default serves (docs/registry.md)",
    "ONNX_SERVICE_MLFLOW_CHECKS": "only meaningful with the MLflow hook on; its default (every stage but signature) serves",
    "ONNX_SERVICE_TRUSTED_SIGNERS": "names a mounted file of the signers' public keys, only where signatures are checked (docs/checks.md)",
    "ONNX_SERVICE_REQUIRE_SIGNATURE": "only where signatures are checked and every model must have one (docs/checks.md)",
    "ONNX_SERVICE_MLFLOW_ALIAS": "only meaningful with the MLflow hook on; its default (validated) serves",
    "ONNX_SERVICE_MLFLOW_DIMS": "only meaningful with the MLflow hook on; a model family's bindings (docs/registry.md)",
    "ONNX_SERVICE_OCI_REGISTRY": "the OCI hook is off unless a registry is named: docs/registry.md sets it where one is",
    "ONNX_SERVICE_OCI_CREDENTIALS": "names a mounted Secret, only where the OCI hook is on (docs/registry.md)",
    "ONNX_SERVICE_OCI_WEBHOOK_SECRET": "a secret: from a Secret or the host's environment, never a ConfigMap (docs/registry.md)",
    "ONNX_SERVICE_OCI_WEBHOOK_SECRET_FILE": "names a mounted Secret, only where the OCI hook is on (docs/registry.md)",
    "ONNX_SERVICE_OCI_TENANT": "only meaningful with the OCI hook on; its default serves (docs/registry.md)",
    "ONNX_SERVICE_OCI_CHECKS": "only meaningful with the OCI hook on; its default (every stage but signature) serves",
    "ONNX_SERVICE_HARBOR_TOKEN": "a secret: from a Secret or the host's environment, never a ConfigMap (docs/registry.md)",
    "ONNX_SERVICE_HARBOR_TOKEN_FILE": "names a mounted Secret, only where the Harbor scanner is on (docs/registry.md)",
    "ONNX_SERVICE_PUBLIC_URL": "the address clients reach depends on the cluster's ingress: set where it is known (docs/registry.md)",
    "ONNX_SERVICE_LINK_DAYS": "its default (90 days) serves; set where report links should last otherwise (docs/registry.md)",
    "ONNX_SERVICE_LINK_KEY": "a secret: from a Secret or the host's environment, never a ConfigMap (docs/registry.md)",
    "ONNX_SERVICE_SIGNING_KEY": "names a mounted Secret, only where attestations are signed (docs/attestations.md)",
    "ONNX_SERVICE_VERIFY_KEYS": "names a mounted file of older public keys, only after a key rotation (docs/attestations.md)",
    "ONNX_SERVICE_VERIFIER_ID": "its default (the public URL, else the host's name) serves; set where it should read otherwise",
    "ONNX_SERVICE_LINK_KEY_FILE": "names a mounted Secret; without it the key the service keeps in its index serves (docs/registry.md)",
}


def declared_flags() -> set[str]:
    return {s.flag for s in SETTINGS if s.flag is not None}


def test_help_lists_exactly_the_declared_flags() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    result = subprocess.run([sys.executable, "-m", "service", "--help"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    options = result.stdout.partition("\noptions:\n")[2]
    assert options, f"no options section in:\n{result.stdout}"
    listed = set(re.findall(r"^ {2}(?:-\w, )?(--[a-z][a-z0-9-]*)", options, re.MULTILINE)) - {"--help"}
    assert listed == declared_flags()


def readme_table() -> str:
    """The first run of `|` lines after the settings paragraph's opening words."""
    text = README.read_text(encoding="utf-8")
    assert text.count(SETTINGS_PARAGRAPH) == 1, f"README.md: the paragraph starting {SETTINGS_PARAGRAPH!r} once"
    lines = text[text.index(SETTINGS_PARAGRAPH) :].splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("|")), None)
    assert start is not None, "README.md: no table after the settings paragraph"
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end]) + "\n"


def test_readme_table_is_the_declared_one_and_the_command_prints_it() -> None:
    assert readme_table() == settings_table_markdown(), "README.md is stale: regenerate with `python -m service.settings`"
    printed = subprocess.run([sys.executable, "-m", "service.settings"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert (printed.returncode, printed.stdout) == (0, settings_table_markdown()), printed.stderr


def test_configmap_sets_declared_settings_and_misses_only_the_listed_ones() -> None:
    data = yaml_document(CONFIGMAP)["data"]
    variables = {s.variable for s in SETTINGS}
    unknown = sorted(set(data) - variables)
    assert not unknown, f"deploy/configmap.yaml sets variables the service does not declare: {unknown}"
    missing = sorted(variables - set(data) - set(ABSENT_FROM_CONFIGMAP))
    assert not missing, f"deploy/configmap.yaml lacks {missing}: add them, or to ABSENT_FROM_CONFIGMAP with the reason"
    stale = sorted(set(ABSENT_FROM_CONFIGMAP) & set(data))
    assert not stale, f"ABSENT_FROM_CONFIGMAP lists variables the ConfigMap does set: {stale}"
    assert set(ABSENT_FROM_CONFIGMAP) <= variables, "ABSENT_FROM_CONFIGMAP lists undeclared variables"


# Settings with no flag, each with its reason.
VARIABLE_ONLY = {
    "ONNX_SERVICE_MLFLOW_WEBHOOK_SECRET": "a secret in a command line is shown by ps: its variable, or --mlflow-webhook-secret-file",
    "ONNX_SERVICE_OCI_WEBHOOK_SECRET": "a secret in a command line is shown by ps: its variable, or --oci-webhook-secret-file",
    "ONNX_SERVICE_HARBOR_TOKEN": "a secret in a command line is shown by ps: its variable, or --harbor-token-file",
    "ONNX_SERVICE_LINK_KEY": "a secret in a command line is shown by ps: its variable, or --link-key-file",
}


def test_every_field_is_declared_and_named_one_way() -> None:
    assert [s.name for s in SETTINGS] == list(Settings.__slots__)
    for declared in SETTINGS:
        assert declared.variable == env_name(declared.name) and declared.variable.startswith(ENV_PREFIX)
        assert declared.flag in (flag_name(declared.name), None)
        assert declared.help and declared.default
    assert {s.variable for s in SETTINGS if s.flag is None} == set(VARIABLE_ONLY)


def test_defaults_are_valid_and_shown_as_they_parse() -> None:
    defaults = Settings()
    for declared in SETTINGS:
        value = getattr(defaults, declared.name)
        assert declared.rule is None or declared.rule.holds(value), declared.name
        shown = declared.kind.show(value)
        if declared.default == f"`{shown}`":  # a literal default reads back as itself
            assert declared.kind.parse(shown) == value, declared.name
