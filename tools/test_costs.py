"""Where a test run's time goes: the JUnit XML files `bash tools/dev.sh test`
leaves in .cache/test-reports/, summed by test module, the costliest first.

    .venv/bin/python tools/test_costs.py [REPORT.xml ...]   # default: .cache/test-reports/*.xml

A module's seconds are its tests' setup, call and teardown, on whichever
pytest-xdist worker ran them: the core-seconds it costs, not wall time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from xml.etree import ElementTree

REPORTS = Path(__file__).resolve().parent.parent / ".cache" / "test-reports"


def module_of(classname: str) -> str:
    """`tests.e2e.test_x` for a test function, and for a test class's `tests.e2e.test_x.TestY` too."""
    head, _, last = classname.rpartition(".")
    return head if head and last[:1].isupper() else classname


def module_seconds(report: Path) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for case in ElementTree.parse(report).getroot().iter("testcase"):
        module = module_of(case.get("classname", "?"))
        seconds[module] = seconds.get(module, 0.0) + float(case.get("time", "0"))
    return seconds


def main(argv: list[str]) -> int:
    reports = [Path(name) for name in argv] or sorted(REPORTS.glob("*.xml"))
    if not reports:
        print(f"test_costs: no reports (run bash tools/dev.sh test first; they go to {REPORTS})", file=sys.stderr)
        return 1
    for report in reports:
        seconds = module_seconds(report)
        print(f"{report.name}: {sum(seconds.values()):.0f} core-seconds in {len(seconds)} modules")
        for module, spent in sorted(seconds.items(), key=lambda item: -item[1])[:25]:
            print(f"  {spent:8.1f}  {module}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
