"""A cgroup per worker: all of its memory counted, and its tasks bounded.

Owns `WorkerCgroups`, which the supervisor finds once (`find`) and uses per
job: `make(name, memory)` creates the worker's own groups beneath the
service's (memory, and pids), with

- memory: cgroup v2's `memory.max` = the worker's `--worker-memory` and
  `memory.swap.max` = 0, or v1's `memory.limit_in_bytes` (and
  `memory.memsw.limit_in_bytes` where swap is accounted). The kernel counts
  every page the worker owns: anonymous, shared (`MAP_SHARED|MAP_ANONYMOUS`,
  System V and POSIX shared memory, tmpfs) and the page cache it dirties or
  reads in; past the limit it reclaims, then kills the worker (SIGKILL),
  which `finish` reads back as an OOM kill (the import's resource-limit
  answer, limit "memory");
- pids: `pids.max` = `MAX_TASKS`: the worker's processes and threads in all.

The worker joins them itself (writing 0 to each `tasks`, v1, or
`cgroup.procs`, v2, while it is one thread) before it enters its cgroup
namespace (`service.sandbox.worker.main`), so it is inside
before it reads a byte; `finish` removes them once it has exited, so no group
is left behind (those of a front end killed meanwhile are removed by the
next `find`). Where the service cannot create groups (not root, a
read-only cgroup file system in a container, v2 without the memory
controller delegated to the service's group), `find` gives None and the
workers' memory watch (`service.sandbox.memory_watch`) counts shared memory
itself; /readyz's `worker_sandbox` then has no "memory-cgroup".

`service_memory_limit` reads the memory the service's own group (and every
group above it) allows, which bounds a worker sized to its model
(`service.sandbox.memory_sizing`).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

log = logging.getLogger("service.sandbox")
MAX_TASKS: Final = 64  # a worker's processes and threads (onnxruntime runs one intra-op and one inter-op thread)
REMOVE_ATTEMPTS: Final = 50
PREFIX: Final = "onnx-worker-"  # onnx-worker-<the front end's pid>-<serial>
_serial = itertools.count()


@dataclass(frozen=True)
class Controller:
    """One controller's folder for the service's workers: v1's own hierarchy, or v2's unified one."""

    name: str  # memory or pids
    folder: Path  # the service's own group in this hierarchy
    v2: bool


@dataclass
class JobGroups:
    """A worker's own groups (`joined`: what the worker joins, WorkerJob.cgroups)."""

    folders: list[tuple[str, Path, bool]]  # (controller, its folder, whether cgroup v2)
    memory: Path | None
    v2: bool

    @property
    def joined(self) -> tuple[tuple[str, str], ...]:
        """v1: `tasks` (moving the one thread that writes 0 there takes no
        global lock; `cgroup.procs` waits for an RCU grace period, 2 to 15 ms
        here); v2: `cgroup.procs`."""
        return tuple((controller, str(folder / ("cgroup.procs" if v2 else "tasks"))) for controller, folder, v2 in self.folders)


class WorkerCgroups:
    def __init__(self, controllers: list[Controller]) -> None:
        self.controllers = controllers

    @property
    def names(self) -> list[str]:
        """What /readyz lists: memory-cgroup, pids-cgroup."""
        return [f"{controller.name}-cgroup" for controller in self.controllers]

    @classmethod
    def find(cls) -> WorkerCgroups | None:
        """The service's groups where it may make its workers' (a trial group
        made and removed), else None. Groups left by a front end that is gone
        (killed before it could remove its workers') are removed."""
        controllers = []
        for name in ("memory", "pids"):
            controller = _controller(name)
            if controller is not None and _can_make_groups(controller):
                controllers.append(controller)
                _remove_stale(controller.folder)
        return cls(controllers) if controllers else None

    def make(self, memory: int) -> JobGroups:
        """A new worker's groups, limits set."""
        name = f"{PREFIX}{os.getpid()}-{next(_serial)}"
        groups = JobGroups([], None, False)
        try:
            for controller in self.controllers:
                folder = controller.folder / name
                folder.mkdir()
                groups.folders.append((controller.name, folder, controller.v2))
                if controller.name == "memory":
                    _limit_memory(folder, memory, controller.v2)
                    groups.memory, groups.v2 = folder, controller.v2
                else:
                    (folder / "pids.max").write_text(str(MAX_TASKS))
        except OSError:
            self.finish(groups)
            raise
        return groups

    @staticmethod
    def finish(groups: JobGroups) -> bool:
        """Whether the kernel killed the worker for its memory; then its groups are removed."""
        killed = False
        if groups.memory is not None:
            with contextlib.suppress(OSError, ValueError):
                events = (groups.memory / ("memory.events" if groups.v2 else "memory.oom_control")).read_text()
                counts = dict(line.split() for line in events.splitlines() if len(line.split()) == 2)
                killed = int(counts.get("oom_kill", "0")) > 0
        for _, folder, _ in groups.folders:
            _remove(folder)
        return killed


def service_memory_limit() -> int | None:
    """The lowest memory limit of the service's own cgroup and its ancestors (v2's `memory.max`, v1's
    `memory.limit_in_bytes`); None where none is set or none can be read."""
    membership = _membership()
    mounts = _cgroup_mounts()
    for key, v2 in (("memory", False), ("", True)):
        if key in membership and key in mounts:
            point, mount_root = mounts[key]
            relative = os.path.relpath(membership[key], mount_root) if membership[key].startswith(mount_root) else "."
            return lowest_memory_limit(Path(point), Path(point) / relative, v2)
    return None


def lowest_memory_limit(top: Path, folder: Path, v2: bool) -> int | None:
    """The lowest limit set in `folder` and its parents up to `top` (v1's "no limit" is a number near 2**63)."""
    name = "memory.max" if v2 else "memory.limit_in_bytes"
    lowest: int | None = None
    folder = folder.resolve()
    top = top.resolve()
    while True:
        with contextlib.suppress(OSError, ValueError):
            text = (folder / name).read_text().strip()
            if text != "max" and int(text) < 1 << 62:
                lowest = int(text) if lowest is None else min(lowest, int(text))
        if folder == top or top not in folder.parents:
            return lowest
        folder = folder.parent


def _limit_memory(folder: Path, memory: int, v2: bool) -> None:
    if v2:
        (folder / "memory.max").write_text(str(memory))
        with contextlib.suppress(FileNotFoundError):  # no swap controller: no swap to count
            (folder / "memory.swap.max").write_text("0")
        return
    (folder / "memory.limit_in_bytes").write_text(str(memory))
    with contextlib.suppress(FileNotFoundError):  # swap accounted (swapaccount=1)
        (folder / "memory.memsw.limit_in_bytes").write_text(str(memory))


def _remove(folder: Path) -> None:
    for _ in range(REMOVE_ATTEMPTS):
        try:
            folder.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:  # EBUSY: the worker's last task is still leaving
            time.sleep(0.01)
    log.warning("could not remove the worker's cgroup %s", folder)


def _remove_stale(folder: Path) -> None:
    """Remove the empty worker groups whose front end (the pid in their name) no longer runs."""
    for group in folder.glob(f"{PREFIX}*"):
        maker = group.name.removeprefix(PREFIX).split("-")[0]
        if maker.isdigit() and not Path(f"/proc/{maker}").exists():
            with contextlib.suppress(OSError):  # still holds a task (EBUSY), or another front end removed it
                group.rmdir()


def _controller(name: str) -> Controller | None:
    """The service's own group in the hierarchy that holds `name`
    (/proc/self/cgroup and /proc/self/mountinfo), preferring v1's own."""
    membership = _membership()
    mounts = _cgroup_mounts()
    if name in membership and name in mounts:
        return _under(mounts[name], membership[name], name, v2=False)
    if "" in membership and "" in mounts:
        root, _ = mounts[""]
        enabled = (Path(root) / "cgroup.controllers").read_text().split() if (Path(root) / "cgroup.controllers").exists() else []
        if name in enabled:
            return _under(mounts[""], membership[""], name, v2=True)
    return None


def _membership() -> dict[str, str]:
    """{controller: the service's group path} from /proc/self/cgroup; v2's under ""."""
    membership: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(",") if controllers else [""]:
                membership[controller] = path
    return membership


def _under(mount: tuple[str, str], path: str, name: str, v2: bool) -> Controller | None:
    point, mount_root = mount
    relative = os.path.relpath(path, mount_root) if path.startswith(mount_root) else None
    if relative is None:
        return None
    folder = Path(point) / relative if relative != "." else Path(point)
    if v2 and not _delegated(folder, name):
        return None
    return Controller(name, folder, v2)


def _delegated(folder: Path, name: str) -> bool:
    """v2: the controller is enabled for the service group's children (or can be)."""
    control = folder / "cgroup.subtree_control"
    try:
        if name in control.read_text().split():
            return True
        control.write_text(f"+{name}")  # refused (EBUSY) where the group holds processes itself
        return True
    except OSError:
        return False


def _cgroup_mounts() -> dict[str, tuple[str, str]]:
    """{controller: (mount point, the mount's root within the hierarchy)}; v2's under ""."""
    found: dict[str, tuple[str, str]] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            before, _, after = line.partition(" - ")
            fields, tail = before.split(), after.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            kind, options = tail[0], tail[2].split(",")
            if kind == "cgroup2":
                found.setdefault("", (fields[4], fields[3]))
            elif kind == "cgroup":
                for option in options:
                    found.setdefault(option, (fields[4], fields[3]))
    return found


def _can_make_groups(controller: Controller) -> bool:
    trial = controller.folder / f"{PREFIX}{os.getpid()}-trial"
    try:
        trial.mkdir()
    except OSError:
        return False
    _remove(trial)
    return True
