"""The front end's watch on a worker's memory (service.memory_watch), on real
processes: a process that grows past 97% of its limit is killed and counted
as out of memory, whether it grows its heap or touches shared memory
(MAP_SHARED | MAP_ANONYMOUS, which neither RLIMIT_DATA nor VmData counts); one that aborts after growing past half its limit (how the
compiled importer's runtime ends when an allocation fails under
RLIMIT_DATA) counts as out of memory; one that aborts small does not."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from service.sandbox.memory_watch import WorkerMemoryWatch

MIB = 1 << 20
# Allocates (and touches) `size` MiB, says so, then aborts or waits.
GROW = "import os, sys, time; block = bytearray({size} << 20); print('grown', flush=True); {end}"


def _run(size_mib: int, end: str, limit_mib: int) -> tuple[WorkerMemoryWatch, int]:
    process = subprocess.Popen([sys.executable, "-c", GROW.format(size=size_mib, end=end)], stdout=subprocess.PIPE)
    watch = WorkerMemoryWatch(process.pid, limit_mib * MIB, process.kill)
    assert process.stdout is not None
    process.stdout.readline()
    time.sleep(0.1)  # a few of the watch's polls
    process.wait(10)
    process.stdout.close()
    watch.stop()
    return watch, process.returncode


def test_a_process_past_its_limit_is_killed_as_out_of_memory() -> None:
    watch, status = _run(120, "time.sleep(30)", limit_mib=100)
    assert status == -signal.SIGKILL and watch.hit and watch.ran_out(signal.SIGKILL)


SHARED = "import mmap; block = mmap.mmap(-1, {size} << 20, mmap.MAP_SHARED | mmap.MAP_ANONYMOUS); block.write(b'x' * ({size} << 20))"


def test_shared_memory_past_the_limit_is_killed_as_out_of_memory() -> None:
    code = SHARED.format(size=120) + "; print('grown', flush=True); time.sleep(30)"
    process = subprocess.Popen([sys.executable, "-c", "import time; " + code], stdout=subprocess.PIPE)
    watch = WorkerMemoryWatch(process.pid, 100 * MIB, process.kill)
    assert process.stdout is not None
    process.stdout.readline()
    process.wait(10)
    process.stdout.close()
    watch.stop()
    assert process.returncode == -signal.SIGKILL and watch.hit and watch.peak >= 100 * MIB * 0.97


def test_an_abort_after_growing_past_half_the_limit_is_out_of_memory() -> None:
    watch, status = _run(80, "time.sleep(0.2); os.abort()", limit_mib=150)
    assert status == -signal.SIGABRT and not watch.hit and watch.peak >= 80 * MIB
    assert watch.ran_out(signal.SIGABRT)


def test_a_small_abort_or_another_signal_is_not_out_of_memory() -> None:
    watch, status = _run(1, "time.sleep(0.2); os.abort()", limit_mib=200)
    assert status == -signal.SIGABRT and not watch.ran_out(signal.SIGABRT)
    big, status = _run(80, "time.sleep(0.2); os.kill(os.getpid(), 9)", limit_mib=150)
    assert status == -signal.SIGKILL and not big.ran_out(signal.SIGKILL)
