"""Builds the wheels the test run will ask for, ahead of it: `bash tools/dev.sh test`
starts this beside its own setup, so the compiled wheel's minute of mypyc and
gcc runs on the core the setup leaves idle, not inside the tests.

    .venv/bin/python tools/prebuild_wheels.py

The build IMPORTER_BUILD chooses (compiled where a C compiler works, under
auto), then the pure one, into .cache/wheels/<digest of the build context>/
(tests/support/wheel_builds.py). A test that asks for a wheel while it is being
built waits for it; one this run could not build is built, and its failure
reported, by the test that asks.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO / "tests"), str(REPO / "tools")]

from build_backend import chosen_build  # noqa: E402
from support.wheel_builds import Wheels  # noqa: E402


def main() -> int:
    wheels = Wheels()
    status = 0
    for build in dict.fromkeys([chosen_build(), "pure"]):
        started = time.monotonic()
        try:
            wheel = wheels(build)
        except (AssertionError, OSError, SystemExit) as error:
            print(f"prebuild_wheels: the {build} wheel failed: {error}", file=sys.stderr)
            status = 1
            continue
        print(f"prebuild_wheels: {wheel.relative_to(REPO)} ready after {time.monotonic() - started:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
