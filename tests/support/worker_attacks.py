"""What a model that ran code in a worker would try, run in real workers.

`python tests/support/worker_attacks.py [FOLDER]` plays a front end: it makes itself
not dumpable as the service does, starts a real `Sandbox` whose workers run
the test-only entry point (`support.fault_worker`, found beside this file,
or in the container under `TEST_SUPPORT`) and, for each attack below, runs
its code in a fresh worker at the moment it would parse its model: the model
file open, every wall up (a `FaultyJob`'s `code`, in place of the parse),
and once more in a plain
child without walls (the control: it shows the attack works where nothing
stops it). The attacks: the store's and the host's files (read, link,
write, stat), the front end's and the fork server's memory, limits,
priorities, CPU affinity, scheduling class and I/O priority, a real-time
class and nice -20 for itself, fanotify and inotify, System V IPC objects,
new namespaces and mounts, bpf, perf_event_open, io_uring, the kernel
keyring, userfaultfd, process_vm_readv and ptrace; and in a check worker
given its model's external files (bound read-only beside the model for
onnxruntime), writing, renaming and hard-linking a bound file, reading a
file beside them and listing their folder. Each one that would leave
something behind in the control (an IPC object, a key, a mount, a trace)
removes it again. It prints one JSON object: {attack: {"confined": ..., "control":
...}} on one line, each "done", "refused: ERRNO" or "killed" (the seccomp
filter stopped the worker). The system-call numbers are x86-64's (the
machines and the container this runs on). FOLDER (default: a new temporary one) gets a stand-in store (two tenants' files, an API-key
file) and the worker's input; everything in it is readable and writable by
anyone, so the control succeeds as any user. Used by tests/service/process/test_worker_walls.py
on this machine (as root, and as an unprivileged user) and by
tests/e2e/test_container.py in the container (support/worker_walls.py: how
both run it and judge its outcomes).
"""

from __future__ import annotations

import json
import multiprocessing.forkserver
import os
import resource
import shutil
import sys
import tempfile
import textwrap
import time
from dataclasses import replace
from pathlib import Path

TEST_SUPPORT = "/test-support"  # in the container: where the test mounts the test-only worker entry (tests/e2e/test_container.py)


def _sample() -> Path:
    """The bundled add.onnx; run as `python -c` (in the container), the data root's."""
    here = globals().get("__file__")
    return Path(here).resolve().parents[2] / "testdata" / "samples" / "add.onnx" if here else Path("/data/add.onnx")


def _import_paths() -> list[str]:
    """Where `service` and `support` are found: this checkout and its tests/; run as
    `python -c` (in the container), the installed service and TEST_SUPPORT."""
    here = globals().get("__file__")
    return [str(Path(here).resolve().parents[2]), str(Path(here).resolve().parents[1])] if here else [TEST_SUPPORT]


SAMPLE = _sample()
EXTERNAL = SAMPLE.parent / "external"  # the external-data sample (where the data root has it)
sys.path[:0] = _import_paths()
from service.sandbox.supervisor import Sandbox  # noqa: E402
from service.sandbox.worker.confinement import make_undumpable  # noqa: E402
from service.settings import Settings  # noqa: E402
from support.fault_worker import ProbeAnswer, faulty  # noqa: E402

SECRET = b"the front end's memory"  # process_vm_readv reads it at its address in this process


def attacks(folder: Path, front_end: int, fork_server: int) -> dict[str, str]:
    """Each attack's code; it raises OSError where it is refused (`call`: a raw system call, see PRELUDE)."""
    store = folder / "store"
    a_model, b_folder, keys = store / "tenant-a" / "model.onnx", store / "tenant-b", folder / "keys.toml"
    cpu = resource.getrlimit(resource.RLIMIT_CPU)
    nice = os.getpriority(os.PRIO_PROCESS, front_end)
    return {
        "read another tenant's stored model": f"open({str(a_model)!r}, 'rb').read()",
        "read the API-key file": f"open({str(keys)!r}, 'rb').read()",
        "read a file outside the data root": "open('/etc/passwd', 'rb').read()",
        "stat the API-key file": f"os.stat({str(keys)!r})",
        "stat /etc/shadow": "os.stat('/etc/shadow')",
        "stat another tenant's stored model": f"os.stat({str(a_model)!r})",
        "link a tenant's record into another's folder": f"os.link({str(a_model)!r}, {str(b_folder / 'linked.onnx')!r})",
        "create a file in the store": f"os.close(os.open({str(b_folder / 'new.onnx')!r}, os.O_WRONLY | os.O_CREAT, 0o644))",
        "open a stored file for writing": f"os.close(os.open({str(a_model)!r}, os.O_WRONLY))",
        "change a stored file through a shared mapping": textwrap.dedent(f"""
            import mmap
            fd = os.open({str(a_model)!r}, os.O_RDWR)
            mapping = mmap.mmap(fd, 0, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            mapping[0:1] = mapping[0:1]
            mapping.close()"""),
        "restore a stored file's mtime": f"os.utime({str(a_model)!r}, ns=(0, 0))",
        "truncate a stored file (O_TRUNC)": f"os.close(os.open({str(a_model)!r}, os.O_RDONLY | os.O_TRUNC))",
        "truncate a stored file": f"os.truncate({str(a_model)!r}, 0)",
        "rename in the store": f"os.rename({str(a_model)!r}, {str(b_folder / 'moved.onnx')!r})",
        "unlink in the store": f"os.unlink({str(a_model)!r})",
        "watch the store (inotify)": f"fd = call(294, 0)\ncall(254, fd, {str(store).encode()!r}, 0xFFF)\nos.close(fd)",
        "block every open on a mount (fanotify)": textwrap.dedent(f"""
            fd = call(300, 0x4 | 0x1, os.O_RDONLY)  # FAN_CLASS_CONTENT | FAN_CLOEXEC: permission events
            try:
                # FAN_MARK_ADD, FAN_OPEN (not FAN_OPEN_PERM: the control must not block this machine's opens)
                call(301, fd, 0x1, ctypes.c_uint64(0x20), -100, {str(folder).encode()!r})
            finally:
                os.close(fd)"""),
        "read the front end's memory": f"open('/proc/{front_end}/mem', 'rb').close()",
        "read the front end's environment": f"open('/proc/{front_end}/environ', 'rb').read()",
        "read the front end's memory (process_vm_readv)": textwrap.dedent(f"""
            buffer = ctypes.create_string_buffer(8)
            local = (ctypes.c_void_p * 2)(ctypes.addressof(buffer), 8)
            remote = (ctypes.c_void_p * 2)({id(SECRET)}, 8)
            call(310, {front_end}, local, 1, remote, 1, 0)"""),
        # PTRACE_SEIZE (the control's tracee is let go as the control exits)
        "trace the front end (ptrace)": f"call(101, 0x4206, {front_end}, 0, 0)",
        "trace the fork server (ptrace)": f"call(101, 0x4206, {fork_server}, 0, 0)",
        "set the front end's limits (prlimit64)": f"import resource; resource.prlimit({front_end}, resource.RLIMIT_CPU, {cpu!r})",
        "set the front end's priority": f"os.setpriority(os.PRIO_PROCESS, {front_end}, {nice})",
        "set the front end's CPU affinity": f"os.sched_setaffinity({front_end}, {sorted(os.sched_getaffinity(front_end))!r})",
        "set the fork server's CPU affinity": f"os.sched_setaffinity({fork_server}, {sorted(os.sched_getaffinity(fork_server))!r})",
        "set the fork server's scheduling class": (
            f"os.sched_setscheduler({fork_server}, {os.sched_getscheduler(fork_server)}, os.sched_param(0))"
        ),
        # ioprio_set(IOPRIO_WHO_PROCESS, the front end, its ioprio_get)
        "set the front end's I/O priority": f"call(251, 1, {front_end}, call(252, 1, {front_end}))",
        "make itself real-time (SCHED_FIFO 50)": "os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(50))",
        "make itself nice -20": "os.setpriority(os.PRIO_PROCESS, 0, -20)",
        "signal the front end": f"import signal; os.kill({front_end}, 0)",
        "signal the fork server": f"os.kill({fork_server}, 0)",
        "System V shared memory (300 MiB, mode 0666)": "call(31, call(29, 0, 300 << 20, 0o1666), 0, 0)",  # shmget, shmctl(IPC_RMID)
        "a System V message queue": "call(71, call(68, 0, 0o1666), 0, 0)",  # msgget, msgctl(IPC_RMID)
        "a System V semaphore set": "call(66, call(64, 0, 1, 0o1666), 0, 0)",  # semget, semctl(IPC_RMID)
        "a new user namespace (unshare)": "call(272, 0x10000000)",
        "mount a file system": textwrap.dedent(f"""
            call(165, b"none", {str(folder / "mnt").encode()!r}, b"tmpfs", 0, b"size=4k")
            call(166, {str(folder / "mnt").encode()!r}, 0)"""),  # mount, umount2
        "load a BPF map (bpf)": textwrap.dedent("""
            attr = (ctypes.c_uint32 * 32)(2, 4, 4, 1)  # BPF_MAP_TYPE_ARRAY, key 4, value 4, one entry
            os.close(call(321, 0, attr, ctypes.sizeof(attr)))"""),
        "open a performance counter (perf_event_open)": textwrap.dedent("""
            attr = (ctypes.c_uint32 * 32)(1, 128)  # PERF_TYPE_SOFTWARE, size; config 0: the CPU clock
            attr[10] = 0x60  # exclude_kernel, exclude_hv
            os.close(call(298, attr, 0, -1, -1, 0))"""),
        "set up an io_uring": "os.close(call(425, 1, (ctypes.c_uint32 * 30)()))",
        "add a key to the user keyring": "call(250, 21, call(248, b'user', b'worker-attack', b'x', 1, -4))",  # add_key, keyctl(INVALIDATE)
        "open a userfaultfd": "os.close(call(323, os.O_CLOEXEC))",
    }


def bound_attacks(folder: Path) -> dict[str, str]:
    """Attacks on a check worker's bound files (its model's external data,
    bound read-only for onnxruntime to open by name), run in a check worker
    given them (`mapped_files`)."""
    mapped = folder / "mapped"
    weights = mapped / "weights.bin"
    return {
        "write a bound external file": f"os.close(os.open({str(weights)!r}, os.O_WRONLY))",
        "rename a bound external file": f"os.rename({str(weights)!r}, {str(mapped / 'moved.bin')!r})",
        "hard-link a bound external file": f"os.link({str(weights)!r}, {str(mapped / 'linked.bin')!r})",
        "read a file beside the bound files": f"open({str(mapped / 'other.bin')!r}, 'rb').read()",
        "list the bound files' folder": f"os.listdir({str(mapped)!r})",
    }


BOUND = ("weights.bin", "more/bias.bin")  # what the external sample's model names


PRELUDE = """import ctypes, errno, os
_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
def call(number, *arguments):
    answer = _libc.syscall(ctypes.c_long(number), *arguments)
    if answer == -1:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return answer
"""


def lay_out(folder: Path) -> Path:
    """The stand-in store and the worker's input folder; returns the input folder."""
    for sub in ("store/tenant-a", "store/tenant-b", "inputs", "mnt"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SAMPLE, folder / "store" / "tenant-a" / "model.onnx")
    (folder / "keys.toml").write_text('[[key]]\nsha256 = "00"\ntenant = "a"\nscopes = ["read"]\n')
    shutil.copyfile(SAMPLE, folder / "inputs" / "add.onnx")
    if EXTERNAL.is_dir():  # a model with external data, for the bound files' attacks
        shutil.rmtree(folder / "mapped", ignore_errors=True)
        shutil.copytree(EXTERNAL, folder / "mapped")
        (folder / "mapped" / "other.bin").write_bytes(b"not the model's")
    for path in folder.rglob("*"):  # the folder itself is the caller's (mode 0777)
        path.chmod(0o777 if path.is_dir() else 0o666)
    return folder / "inputs"


REFUSED = "\n    result = 'done'\nexcept OSError as error:\n    result = 'refused: ' + str(errno.errorcode.get(error.errno, error.errno))\n"


def wrapped(code: str) -> str:
    """`code` setting `result` to "done", or to "refused: ERRNO" where it raised OSError."""
    return PRELUDE + "try:\n" + textwrap.indent(code.strip(), "    ") + REFUSED


def run_unconfined(code: str) -> str:
    """The control: the same code in a plain child process (no walls)."""
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:
        namespace: dict[str, object] = {}
        exec(code, namespace)
        os.write(writer, str(namespace["result"]).encode())
        os._exit(0)
    os.close(writer)
    os.waitpid(pid, 0)
    with os.fdopen(reader, "rb") as answer:
        return answer.read().decode()


def main(folder: Path) -> dict[str, dict[str, str]]:
    make_undumpable()
    inputs = lay_out(folder)
    settings = Settings(worker_timeout=20.0, data_root=str(SAMPLE.parent), store=str(folder / "unused-store"))
    sandbox = Sandbox(settings, worker="support.fault_worker:main")
    sandbox.start()
    outcomes: dict[str, dict[str, str]] = {"sandbox": {"isolation": sandbox.isolation}}
    fork_server = multiprocessing.forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    for name, code in attacks(folder, os.getpid(), fork_server).items():
        job = faulty(sandbox.job("import", directory=str(inputs), model="add.onnx", display_name="add.onnx"), code=wrapped(code))
        try:
            confined = ProbeAnswer.model_validate_json(sandbox.first_frame(job, timeout=20.0)).test_result or ""
        except EOFError:
            confined = "killed"
        lay_out(folder)  # undo what a confined attack may have done, for the control
        outcomes[name] = {"confined": confined, "control": run_unconfined(wrapped(code))}
        lay_out(folder)
    if EXTERNAL.is_dir():
        for name, code in bound_attacks(folder).items():
            checks = sandbox.job("checks", directory=str(folder / "mapped"), model="model.onnx", display_name="model.onnx")
            job = faulty(replace(checks, mapped_files=BOUND), code=wrapped(code))
            try:
                answer = ProbeAnswer.model_validate_json(sandbox.first_frame(job, timeout=20.0))
                confined, outcomes["sandbox"]["bound"] = answer.test_result or "", answer.isolation
            except EOFError:
                confined = "killed"
            lay_out(folder)
            outcomes[name] = {"confined": confined, "control": run_unconfined(wrapped(code))}
            lay_out(folder)
    return outcomes


if __name__ == "__main__":
    started = time.monotonic()
    print(json.dumps(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="worker-attacks-")))))
    print(f"worker_attacks: {time.monotonic() - started:.1f} s", file=sys.stderr)
