"""`pip install` into a virtual environment, done by uv under pip's own configuration.

    python tools/uv_pip.py VENV_PYTHON ARGS...   # runs: uv pip install --python VENV_PYTHON ARGS...

uv installs the suite's ~150 packages in seconds where pip takes two minutes
(tools/dev.sh), but it reads none of pip's configuration. This machine's
indexes, find-links folders (where the CPU build of torch lies), constraints
(its torch cap) and certificate live there, so they are read with `pip config
list` (files and PIP_* variables; for one option, a PIP_ variable wins over the
[install] section, which wins over [global]) and handed to uv as its own
options. Indexes are merged as pip merges them (the best match across all of
them); with no certificate set, uv trusts the system's store, as pip on
Debian does; and the installed modules are byte-compiled, as pip does unless
told not to (uv does not by default, and where PYTHONDONTWRITEBYTECODE is set,
as on this machine, every new process then compiles all it imports: the
service's process tests ran 40% slower). uv is the one beside VENV_PYTHON, else on PATH.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

SECTIONS = (":env:", "install", "global")  # which of pip's sections wins, first first
# pip's option -> uv's (each of a space-separated list of values gets the option)
AS_OPTIONS = {
    "index-url": "--default-index",
    "extra-index-url": "--index",
    "find-links": "--find-links",
    "constraint": "--constraints",
    "trusted-host": "--allow-insecure-host",
}
TRUE = {"1", "true", "yes", "on"}


def pip_configuration(python: str) -> dict[str, str]:
    """pip's effective value of each option for `pip install`, by option name."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True).stdout
    found: dict[tuple[str, str], str] = {}
    for line in listed.splitlines():
        key, equals, value = line.partition("=")
        section, dot, option = key.rpartition(".")
        if equals and dot:
            found[section, option] = str(ast.literal_eval(value))
    effective: dict[str, str] = {}
    for section in reversed(SECTIONS):  # the weakest first, each overriding the one before
        effective |= {option: value for (where, option), value in found.items() if where == section}
    return effective


def uv_arguments(configuration: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """uv's options and environment for pip's configuration."""
    arguments = ["--index-strategy", "unsafe-best-match"]  # pip's way: every index's versions compete
    for option, uv_option in AS_OPTIONS.items():
        for value in configuration.get(option, "").split():
            arguments += [uv_option, value]
    if configuration.get("no-index", "").lower() in TRUE:
        arguments.append("--no-index")
    if configuration.get("no-compile", "").lower() not in TRUE:
        arguments.append("--compile-bytecode")  # pip's default: without it, every process compiles every module it imports
    environment = {}
    if cert := configuration.get("cert"):
        environment["SSL_CERT_FILE"] = cert
    else:
        arguments.append("--system-certs")  # the system's trust store, as Debian's pip and Python's ssl use, not uv's own roots
    if timeout := configuration.get("timeout") or configuration.get("default-timeout"):
        environment["UV_HTTP_TIMEOUT"] = timeout
    return arguments, environment


def main(python: str, *arguments: str) -> int:
    uv = str(Path(python).parent / "uv")
    if not os.access(uv, os.X_OK):
        uv = shutil.which("uv") or sys.exit("uv_pip: no uv beside the environment's python nor on PATH")
    options, environment = uv_arguments(pip_configuration(python))
    command = [uv, "pip", "install", "--python", python, *options, *arguments]
    return subprocess.run(command, env=os.environ | environment).returncode


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    sys.exit(main(*sys.argv[1:]))
