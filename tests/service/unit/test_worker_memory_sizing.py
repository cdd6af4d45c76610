"""A check worker's memory sized to its model (`service.sandbox.memory_sizing`):
the cap for given model sizes, machine memory and cgroup limits, the reason a
model too large for the bound is `incomplete`, the cap an out-of-memory
reason names, and the service's cgroup limit read from its files. External
data the worker binds for onnxruntime to map counts at its own multiple, and
only where the workers have a minimal root to bind it in
(`service.checks.check_worker.check_worker_memory`)."""

from __future__ import annotations

from pathlib import Path

from service.checks.check_worker import check_worker_memory
from service.sandbox.cgroups import lowest_memory_limit
from service.sandbox.memory_sizing import MemoryBound, machine_memory, size_worker_memory
from service.sandbox.supervisor import Sandbox
from service.settings import Settings

GIB = 1 << 30
MIB = 1 << 20
KIB = 1 << 10
MACHINE = 24 * GIB


def test_a_small_model_runs_under_the_worker_memory_setting() -> None:
    memory = size_worker_memory(100 * MIB, 2 * GIB, 2.5, MemoryBound(MACHINE, None, 0.5))
    assert (memory.cap, memory.fits, memory.sized) == (2 * GIB, True, False)


def test_a_large_model_gets_the_multiple_of_its_bytes() -> None:
    memory = size_worker_memory(3 * GIB, 2 * GIB, 2.5, MemoryBound(MACHINE, None, 0.5))
    assert (memory.cap, memory.fits, memory.sized) == (int(7.5 * GIB), True, True)


def test_the_bound_is_the_share_of_the_lower_of_machine_and_cgroup() -> None:
    assert MemoryBound(MACHINE, None, 0.5).bytes == 12 * GIB
    assert MemoryBound(MACHINE, 8 * GIB, 0.5).bytes == 4 * GIB
    assert MemoryBound(4 * GIB, 8 * GIB, 0.5).bytes == 2 * GIB
    assert MemoryBound(None, None, 0.5).bytes is None


def test_a_model_past_the_bound_does_not_fit_and_its_reason_names_what_it_needs() -> None:
    memory = size_worker_memory(3 * GIB, 2 * GIB, 2.5, MemoryBound(MACHINE, 8 * GIB, 0.5))  # needs 7.5 of 4 GiB
    assert not memory.fits
    reason = memory.reason()
    assert "needs about 7.5 GiB of worker memory" in reason
    assert "2.5 × its 3.0 GiB: --worker-memory-per-model-byte" in reason
    assert "4.0 GiB (--worker-memory-share 50% of the service's cgroup limit of 8.0 GiB)" in reason
    assert "raise --worker-memory-share or give the service's cgroup more memory" in reason


def test_the_machine_is_named_when_its_memory_is_the_lower() -> None:
    memory = size_worker_memory(20 * GIB, 2 * GIB, 1.0, MemoryBound(MACHINE, None, 0.5))
    assert "12.0 GiB (--worker-memory-share 50% of the machine's 24.0 GiB)" in memory.reason()


def test_a_worker_memory_set_above_the_bound_is_kept() -> None:
    """The operator's --worker-memory is a floor the share never lowers."""
    memory = size_worker_memory(3 * GIB, 16 * GIB, 2.5, MemoryBound(MACHINE, None, 0.5))
    assert (memory.cap, memory.fits) == (16 * GIB, True)


def test_a_multiple_of_zero_keeps_every_worker_at_the_setting() -> None:
    memory = size_worker_memory(30 * GIB, 2 * GIB, 0.0, MemoryBound(MACHINE, None, 0.5))
    assert (memory.cap, memory.fits, memory.sized) == (2 * GIB, True, False)


def test_an_out_of_memory_reason_names_the_cap_and_the_setting() -> None:
    sized = size_worker_memory(3 * GIB, 2 * GIB, 2.5, MemoryBound(MACHINE, None, 0.5))
    reason = sized.out_of_memory_reason("out of memory while onnxruntime loaded the model: std::bad_alloc")
    assert reason.endswith(
        "(the check worker's cap was 7.5 GiB: --worker-memory-per-model-byte 2.5 × its 3.0 GiB; "
        "raise --worker-memory-per-model-byte or --worker-memory)"
    )
    plain = size_worker_memory(MIB, 2 * GIB, 2.5, MemoryBound(MACHINE, None, 0.5))
    assert "(the check worker's cap was 2.0 GiB: --worker-memory;" in plain.out_of_memory_reason(
        "the check worker needed more than 2.0 GiB of memory"
    )
    assert plain.out_of_memory_reason("the smoke run used its 3 CPU-seconds") == "the smoke run used its 3 CPU-seconds"


def test_mapped_external_data_counts_at_its_own_multiple() -> None:
    memory = size_worker_memory(3 * GIB + 64 * KIB, 2 * GIB, 2.5, MemoryBound(MACHINE, None, 0.5), 3 * GIB, 1.5)
    assert (memory.cap, memory.fits, memory.sized) == (int(4.5 * GIB) + 160 * KIB, True, True)
    assert memory.out_of_memory_reason("std::bad_alloc").endswith(
        "(the check worker's cap was 4.5 GiB: 2.5 × its 64 KiB model file and 1.5 × its 3.0 GiB of external data, mapped: "
        "--worker-memory-per-model-byte, --worker-memory-per-mapped-byte; raise --worker-memory-per-mapped-byte, "
        "--worker-memory-per-model-byte or --worker-memory)"
    )
    past = size_worker_memory(12 * GIB + 64 * KIB, 2 * GIB, 2.5, MemoryBound(MACHINE, None, 0.5), 12 * GIB, 1.5)
    assert not past.fits
    assert "needs about 18.0 GiB of worker memory (2.5 × its 64 KiB model file and 1.5 × its 12.0 GiB of external data" in past.reason()


def test_external_data_counts_as_mapped_only_where_workers_have_a_minimal_root(tmp_path: Path) -> None:
    """Elsewhere the worker hands the weights to onnxruntime, which copies them: every byte at the model multiple."""
    (tmp_path / "model.onnx").write_bytes(bytes(1000))
    sandbox = Sandbox(Settings())
    job = sandbox.job("checks", directory=str(tmp_path), model="model.onnx", display_name="model.onnx", model_bytes=1000 + 3 * GIB)
    sandbox.isolation = "pid-namespace+mount-namespace+minimal-root+landlock-7+seccomp"  # what a probe reports
    mapped = check_worker_memory(sandbox, job)
    assert (mapped.mapped_bytes, mapped.needed) == (3 * GIB, int(1000 * 2.5 + 3 * GIB * 1.5))
    sandbox.isolation = "pid-namespace+landlock-7+seccomp"  # no mount namespace: no minimal root, nothing bound
    handed = check_worker_memory(sandbox, job)
    assert (handed.mapped_bytes, handed.needed) == (0, int((1000 + 3 * GIB) * 2.5))


def test_machine_memory_is_memtotal() -> None:
    assert machine_memory("MemTotal:       24683784 kB\nMemFree:  1 kB\n") == 24683784 * 1024
    assert machine_memory("nothing here") is None


def test_the_lowest_cgroup_limit_of_the_group_and_its_parents(tmp_path: Path) -> None:
    group = tmp_path / "service.slice" / "onnx"
    group.mkdir(parents=True)
    (tmp_path / "memory.max").write_text("max\n")
    (tmp_path / "service.slice" / "memory.max").write_text(f"{6 * GIB}\n")
    (group / "memory.max").write_text(f"{8 * GIB}\n")
    assert lowest_memory_limit(tmp_path, group, v2=True) == 6 * GIB
    (tmp_path / "service.slice" / "memory.max").write_text("max\n")
    assert lowest_memory_limit(tmp_path, group, v2=True) == 8 * GIB


def test_v1s_no_limit_is_none(tmp_path: Path) -> None:
    (tmp_path / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert lowest_memory_limit(tmp_path, tmp_path, v2=False) is None
    assert lowest_memory_limit(tmp_path, tmp_path / "absent", v2=True) is None
