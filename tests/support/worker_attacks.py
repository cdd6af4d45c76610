"""What a model that ran code in a worker would try, run in real workers.

`python tests/support/worker_attacks.py [FOLDER]` plays a front end: it makes itself
not dumpable as the service does, starts a real `Sandbox` (test hooks on)
and, for each attack below, runs its code in a fresh worker with every wall
up (`WorkerJob.test_code`, in place of the import), and once more in a plain
child without walls (the control: it shows the attack works where nothing
stops it). It prints one JSON object: {attack: {"confined": ..., "control":
...}} on one line, each "done", "refused: ERRNO" or "killed" (the seccomp
filter stopped the worker). FOLDER (default: a new temporary one) gets a stand-in store (two tenants' files, an API-key
file) and the worker's input; everything in it is readable and writable by
anyone, so the control succeeds as any user. Used by tests/service/process/test_worker_walls.py
on this machine (as root, and as an unprivileged user) and by
tests/e2e/test_container.py in the container (support/worker_walls.py: how
both run it and judge its outcomes).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from service.sandbox.supervisor import Sandbox
from service.sandbox.worker.confinement import make_undumpable
from service.settings import Settings


def _sample() -> Path:
    """The bundled add.onnx; run as `python -c` (in the container), the data root's."""
    here = globals().get("__file__")
    return Path(here).resolve().parents[2] / "testdata" / "samples" / "add.onnx" if here else Path("/data/add.onnx")


SAMPLE = _sample()


def attacks(folder: Path, front_end: int) -> dict[str, str]:
    """Each attack's code; it raises OSError where it is refused."""
    store = folder / "store"
    a_model, b_folder, keys = store / "tenant-a" / "model.onnx", store / "tenant-b", folder / "keys.toml"
    cpu = resource.getrlimit(resource.RLIMIT_CPU)
    nice = os.getpriority(os.PRIO_PROCESS, front_end)
    return {
        "read another tenant's stored model": f"open({str(a_model)!r}, 'rb').read()",
        "read the API-key file": f"open({str(keys)!r}, 'rb').read()",
        "read a file outside the data root": "open('/etc/passwd', 'rb').read()",
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
        "read the front end's memory": f"open('/proc/{front_end}/mem', 'rb').close()",
        "read the front end's environment": f"open('/proc/{front_end}/environ', 'rb').read()",
        "set the front end's limits (prlimit64)": f"import resource; resource.prlimit({front_end}, resource.RLIMIT_CPU, {cpu!r})",
        "set the front end's priority": f"os.setpriority(os.PRIO_PROCESS, {front_end}, {nice})",
        "signal the front end": f"import signal; os.kill({front_end}, 0)",
    }


def lay_out(folder: Path) -> Path:
    """The stand-in store and the worker's input folder; returns the input folder."""
    for sub in ("store/tenant-a", "store/tenant-b", "inputs"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SAMPLE, folder / "store" / "tenant-a" / "model.onnx")
    (folder / "keys.toml").write_text('[[key]]\nsha256 = "00"\ntenant = "a"\nscopes = ["read"]\n')
    shutil.copyfile(SAMPLE, folder / "inputs" / "add.onnx")
    for path in folder.rglob("*"):  # the folder itself is the caller's (mode 0777)
        path.chmod(0o777 if path.is_dir() else 0o666)
    return folder / "inputs"


REFUSED = "\n    result = 'done'\nexcept OSError as error:\n    result = 'refused: ' + str(errno.errorcode.get(error.errno, error.errno))\n"


def wrapped(code: str) -> str:
    """`code` setting `result` to "done", or to "refused: ERRNO" where it raised OSError."""
    return "import errno, os\ntry:\n" + textwrap.indent(code.strip(), "    ") + REFUSED


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
    sandbox = Sandbox(Settings(test_hooks=True, worker_timeout=20.0, data_root=str(SAMPLE.parent), store=str(folder / "unused-store")))
    sandbox.start()
    outcomes: dict[str, dict[str, str]] = {"sandbox": {"isolation": sandbox.isolation}}
    for name, code in attacks(folder, os.getpid()).items():
        job = sandbox.job("import", directory=str(inputs), model="add.onnx", display_name="add.onnx", test_code=wrapped(code))
        try:
            confined = sandbox.run_probe(job, timeout=20.0).test_result or ""
        except EOFError:
            confined = "killed"
        lay_out(folder)  # undo what a confined attack may have done, for the control
        outcomes[name] = {"confined": confined, "control": run_unconfined(wrapped(code))}
        lay_out(folder)
    return outcomes


if __name__ == "__main__":
    started = time.monotonic()
    print(json.dumps(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="worker-attacks-")))))
    print(f"worker_attacks: {time.monotonic() - started:.1f} s", file=sys.stderr)
