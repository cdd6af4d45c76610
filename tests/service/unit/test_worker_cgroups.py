"""A worker's own cgroups (service/sandbox/cgroups.py) on this machine's
cgroup file system, where the service may make them (root; else skipped
with the reason): a job's groups carry its memory limit and the task bound,
a process that joins them as a worker does is counted there, and finishing
removes them, reporting the kernel's OOM kill of a worker past its limit;
those a killed front end left are removed when a sandbox starts again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from service.sandbox.cgroups import MAX_TASKS, WorkerCgroups

MIB = 1 << 20
found = WorkerCgroups.find()
pytestmark = pytest.mark.skipif(found is None, reason="the service may make no cgroup here (not root, or a read-only cgroup file system)")
JOIN = "import sys\nfor path in sys.argv[1:]:\n    open(path, 'w').write('0')\n"


def _run_in(groups_joined: tuple[tuple[str, str], ...], code: str) -> subprocess.CompletedProcess[str]:
    paths = [path for _, path in groups_joined]
    return subprocess.run([sys.executable, "-c", JOIN + code, *paths], capture_output=True, text=True, timeout=60)


def test_a_jobs_groups_hold_its_limits_and_are_removed() -> None:
    assert found is not None
    groups = found.make(256 * MIB)
    folders = [folder for _, folder, _ in groups.folders]
    try:
        assert groups.memory is not None
        limit = groups.memory / ("memory.max" if groups.v2 else "memory.limit_in_bytes")
        assert int(limit.read_text()) == 256 * MIB
        pids = [folder for controller, folder, _ in groups.folders if controller == "pids"]
        assert all(int((folder / "pids.max").read_text()) == MAX_TASKS for folder in pids)
        joined = _run_in(groups.joined, "print(open('/proc/self/cgroup').read())")
        assert joined.returncode == 0, joined.stderr
        assert all(folder.name in joined.stdout for folder in folders), joined.stdout
    finally:
        assert WorkerCgroups.finish(groups) is False
    assert not [folder for folder in folders if Path(folder).exists()]


def test_shared_memory_past_the_limit_is_killed_by_the_kernel_and_reported() -> None:
    assert found is not None
    groups = found.make(128 * MIB)
    try:
        code = "import mmap\nblock = mmap.mmap(-1, 256 << 20, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)\nblock.write(b'x' * (256 << 20))\n"
        ended = _run_in(groups.joined, code)
    finally:
        killed = WorkerCgroups.finish(groups)
    if groups.memory is None:
        pytest.skip("no memory controller here (pids only)")
    assert ended.returncode == -9 and killed, (ended.returncode, ended.stderr[-300:])


def test_groups_of_a_front_end_that_is_gone_are_removed_at_the_next_start() -> None:
    assert found is not None
    dead = 4_194_303  # above any pid this machine hands out (pid_max is at most 2^22)
    stale = [controller.folder / f"onnx-worker-{dead}-0" for controller in found.controllers]
    for folder in stale:
        folder.mkdir()
    assert WorkerCgroups.find() is not None
    assert not [folder for folder in stale if folder.exists()]
