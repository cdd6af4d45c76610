"""Writes deploy/seccomp/onnx-import.json, the container's seccomp profile, and
deploy/seccomp-profile-configmap.yaml (the same profile, for Kubernetes).

`python tools/container_seccomp.py` (the project's venv: it needs pyseccomp)
lists every system call libseccomp knows on x86-64 and arm64, takes out
`REFUSED`, and writes the rest as the profile's allow-list, in the format
Docker, Podman, containerd and CRI-O read (`defaultAction` SCMP_ACT_ERRNO:
a call not listed, one newer than this list, is refused with EPERM).

Why a profile of our own, and not the runtime's default: the default refuses
`unshare`, `clone` with namespace flags, `mount`, `umount2` and `pivot_root`
to a process without CAP_SYS_ADMIN, which is what each import worker needs to
give itself a user, PID, IPC, mount, UTS, cgroup and network namespace and a
minimal root (service/sandbox/worker/namespaces.py, minimal_root.py). This profile allows
those, and still refuses what the default refuses and the service never
needs (`REFUSED`, with why). The workers then put their own allow-list
filter on top (service/sandbox/worker/seccomp.py), which refuses every one of those calls
again once their walls are up. tests/e2e/test_deploy_static.py checks the
committed profile against this policy; the container tests run under it.
Kubernetes reads a profile from each node's kubelet folder
(/var/lib/kubelet/seccomp/onnx-import/onnx-import.json): the ConfigMap
carries it there, through deploy/seccomp-profile-daemonset.yaml.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyseccomp  # type: ignore[import-untyped]

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
PROFILE = DEPLOY / "seccomp" / "onnx-import.json"
CONFIGMAP = DEPLOY / "seccomp-profile-configmap.yaml"
CONFIGMAP_HEADER = """\
# The container's seccomp profile (deploy/seccomp/onnx-import.json), for the
# nodes: deploy/seccomp-profile-daemonset.yaml writes it to each node's kubelet
# folder, where the Deployment's seccompProfile (Localhost) names it. Written
# by tools/container_seccomp.py: edit that, not this.
"""
ARCHITECTURES = {"SCMP_ARCH_X86_64": "X86_64", "SCMP_ARCH_AARCH64": "AARCH64"}  # no 32-bit or x32 calls at all
HIGHEST_NUMBER = 1024
# Refused to every process of the service: none of them needs these, and each widens what a compromised one could reach.
REFUSED = {
    # kernel code, the kernel's own state and the machine
    "create_module", "init_module", "finit_module", "delete_module", "query_module", "get_kernel_syms",
    "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "syslog", "sysfs", "_sysctl", "ustat", "uselib",
    "nfsservctl", "lookup_dcookie", "iopl", "ioperm", "vm86", "vm86old", "quotactl", "quotactl_fd",
    "settimeofday", "stime", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    # other processes, and kernel facilities no part of the service uses
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "perf_event_open", "bpf", "userfaultfd",
    "add_key", "keyctl", "request_key", "fanotify_init", "fanotify_mark", "open_by_handle_at", "name_to_handle_at",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "personality",
    "mbind", "set_mempolicy", "set_mempolicy_home_node", "migrate_pages", "move_pages",
    # namespaces and mounts beyond what a worker makes for itself: another process's namespace, chroot, the new mount API
    "setns", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
}  # fmt: skip
NEEDED_FOR_THE_WORKERS = ("unshare", "clone", "clone3", "mount", "umount2", "pivot_root")


def known_calls(architecture: str) -> set[str]:
    arch = getattr(pyseccomp.Arch, architecture)
    names = set()
    for number in range(HIGHEST_NUMBER):
        try:
            names.add(pyseccomp.resolve_syscall(arch, number).decode())
        except ValueError:
            continue
    return names


def profile() -> dict[str, object]:
    allowed = set().union(*(known_calls(native) for native in ARCHITECTURES.values())) - REFUSED
    missing = [name for name in NEEDED_FOR_THE_WORKERS if name not in allowed]
    if missing:
        raise SystemExit(f"this libseccomp does not know {missing}")
    return {
        "comment": "Written by tools/container_seccomp.py; see its docstring and deploy/README.md (the worker sandbox).",
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": 1,
        "archMap": [{"architecture": architecture, "subArchitectures": []} for architecture in ARCHITECTURES],
        "syscalls": [{"names": sorted(allowed), "action": "SCMP_ACT_ALLOW"}],
    }


def configmap(text: str) -> str:
    """The ConfigMap holding the profile `text` (YAML: a literal block of the JSON)."""
    body = "".join(f"    {line}\n" for line in text.splitlines())
    return (
        CONFIGMAP_HEADER + "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: onnx-import-seccomp-profile\n"
        "  labels:\n    app.kubernetes.io/name: onnx-import-seccomp-profile\ndata:\n  onnx-import.json: |\n" + body
    )


def main() -> None:
    PROFILE.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(profile(), indent=1) + "\n"
    PROFILE.write_text(text)
    for copy in (CONFIGMAP, DEPLOY / "fleet" / CONFIGMAP.name):  # the fleet's is a copy (test_deploy_static.py)
        copy.write_text(configmap(text))
    print(f"wrote {PROFILE} and {CONFIGMAP} (and deploy/fleet's copy)", file=sys.stderr)


if __name__ == "__main__":
    main()
