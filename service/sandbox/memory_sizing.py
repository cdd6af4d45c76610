"""A check worker's memory cap, sized to its model: the rule, and what bounds it.

Owns `MemoryBound` (the memory a sized worker may take: `--worker-memory-share`
of the lower of the machine's memory and the service's own cgroup limit,
read once when the sandbox starts) and `size_worker_memory`, the rule:

- the worker that hands the model to onnx and onnxruntime (the check
  worker) needs memory in proportion to the model: its cap is the larger of
  `--worker-memory` and `--worker-memory-per-model-byte` times the model's
  bytes (its file plus its external data, the staged files' sizes, known
  before the worker starts), where the external data the worker binds for
  onnxruntime to map (`mapped_bytes`) counts at `--worker-memory-per-mapped-byte`
  instead: onnxruntime reads those files in place, where it copies what it
  is handed;
- that cap may not pass the bound (nor `--worker-memory` itself, where the
  operator set it higher): a model that would need more is `incomplete`
  before any worker starts, its reason (`WorkerMemory.reason`) naming the
  settings and the memory it would need;
- `out_of_memory_reason` adds, to a stage that ran out of memory, the cap
  it ran under and the setting that raises it.

Pure: sizes in, a decision out. Reading /proc/meminfo and the cgroup files is
`machine_memory` here and `service.sandbox.cgroups.service_memory_limit`.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

MIB: Final = 1 << 20
GIB: Final = 1 << 30
OUT_OF_MEMORY: Final = re.compile(r"out of memory|bad_alloc|failed to allocate memory|needed more than .* of memory", re.IGNORECASE)
_MEMTOTAL: Final = re.compile(r"^MemTotal:\s+([0-9]+)\s+kB", re.MULTILINE)


def shown_size(size: float) -> str:
    """7945689497 -> `7.4 GiB`; 134217728 -> `128 MiB`; 400000 -> `391 KiB`."""
    if size >= GIB:
        return f"{size / GIB:.1f} GiB"
    return f"{size / MIB:.0f} MiB" if size >= MIB else f"{size / 1024:.0f} KiB"


def machine_memory(meminfo: str) -> int | None:
    """MemTotal of /proc/meminfo's text, in bytes (None where it says none)."""
    found = _MEMTOTAL.search(meminfo)
    return int(found.group(1)) * 1024 if found else None


def read_machine_memory(path: Path = Path("/proc/meminfo")) -> int | None:
    with contextlib.suppress(OSError):
        return machine_memory(path.read_text())
    return None


@dataclass(frozen=True, slots=True)
class MemoryBound:
    """What a sized worker may take: `share` of the lower of `machine` and `cgroup` (None: not known, or no limit)."""

    machine: int | None
    cgroup: int | None
    share: float

    @property
    def whole(self) -> int | None:
        """The memory the share is taken of: the lower of the two known, else None."""
        known = [size for size in (self.machine, self.cgroup) if size is not None]
        return min(known) if known else None

    @property
    def bytes(self) -> int | None:
        whole = self.whole
        return None if whole is None else int(whole * self.share)

    def described(self) -> str:
        """`50% of the machine's 23.5 GiB`, or `of the service's cgroup limit of 8.0 GiB`."""
        whole = self.whole
        if whole is None:
            return "unknown (neither /proc/meminfo nor a cgroup limit could be read)"
        of = "the service's cgroup limit of" if self.cgroup is not None and whole == self.cgroup else "the machine's"
        return f"{shown_size(self.bytes or 0)} (--worker-memory-share {self.share * 100:g}% of {of} {shown_size(whole)})"


@dataclass(frozen=True, slots=True)
class WorkerMemory:
    """A check worker's memory: `cap` to run under, or (`fits` False) the `needed` that no cap allows."""

    cap: int
    needed: int  # per model byte times the model's bytes (per mapped byte times those of them mapped)
    model_bytes: int
    per_model_byte: float
    floor: int  # --worker-memory
    bound: MemoryBound
    mapped_bytes: int = 0  # of model_bytes, the external data bound for onnxruntime to map
    per_mapped_byte: float = 0.0

    @property
    def sized(self) -> bool:
        """Whether the cap is above --worker-memory (the model asked for more)."""
        return self.cap > self.floor

    @property
    def fits(self) -> bool:
        return self.needed <= self.cap

    def _multiples(self) -> str:
        """`2.5 × its 3.0 GiB: --worker-memory-per-model-byte`, or with its external data mapped
        `2.5 × its 12 KiB model file and 1.5 × its 3.0 GiB of external data, mapped: --worker-memory-per-model-byte,
        --worker-memory-per-mapped-byte`."""
        if not self.mapped_bytes:
            return f"{self.per_model_byte:g} × its {shown_size(self.model_bytes)}: --worker-memory-per-model-byte"
        model_file = shown_size(self.model_bytes - self.mapped_bytes)
        return (
            f"{self.per_model_byte:g} × its {model_file} model file and {self.per_mapped_byte:g} × its {shown_size(self.mapped_bytes)} "
            "of external data, mapped: --worker-memory-per-model-byte, --worker-memory-per-mapped-byte"
        )

    def reason(self) -> str:
        """Why the model's check stages did not run (a model too large for the bound)."""
        return (
            f"the model needs about {shown_size(self.needed)} of worker memory ({self._multiples()}), more than a worker may "
            f"take: {self.bound.described()}; raise --worker-memory-share or give the service's cgroup more memory"
        )

    def out_of_memory_reason(self, reason: str) -> str:
        """A stage's reason, with the cap it ran under and how to raise it added where it ran out of memory."""
        if not OUT_OF_MEMORY.search(reason):
            return reason
        if not self.sized:
            how, raise_it = "--worker-memory", "raise --worker-memory-per-model-byte or --worker-memory"
        elif not self.mapped_bytes:
            how = f"--worker-memory-per-model-byte {self.per_model_byte:g} × its {shown_size(self.model_bytes)}"
            raise_it = "raise --worker-memory-per-model-byte or --worker-memory"
        else:
            how, raise_it = self._multiples(), "raise --worker-memory-per-mapped-byte, --worker-memory-per-model-byte or --worker-memory"
        return f"{reason} (the check worker's cap was {shown_size(self.cap)}: {how}; {raise_it})"


def size_worker_memory(
    model_bytes: int, floor: int, per_model_byte: float, bound: MemoryBound, mapped_bytes: int = 0, per_mapped_byte: float = 0.0
) -> WorkerMemory:
    """The cap of a check worker on a model of `model_bytes`, `mapped_bytes` of them external data bound for
    onnxruntime to map (see the module comment)."""
    mapped_bytes = min(max(0, mapped_bytes), model_bytes)
    needed = int((model_bytes - mapped_bytes) * per_model_byte + mapped_bytes * per_mapped_byte)
    limit = bound.bytes
    allowed = floor if limit is None else max(floor, limit)
    cap = max(floor, needed) if needed <= allowed else floor
    return WorkerMemory(cap, needed, model_bytes, per_model_byte, floor, bound, mapped_bytes, per_mapped_byte)
