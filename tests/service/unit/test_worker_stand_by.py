"""A worker that makes its own PID namespace stands by over its child, the
namespace's first process, and leaves as that child left
(`service.sandbox.worker.namespaces`): the supervisor reads how the child
ended from how the parent did. That path runs where the fork server cannot
give each worker a PID namespace, a service not root (the compose and
Kubernetes files) or root without CAP_SYS_ADMIN in a container; here as root
it never runs on its own, so it is run directly, in a forked process.

A child killed by SIGKILL (the hard CPU limit: SIGXCPU does not reach a PID
namespace's first process) once left the parent exiting 1, since Python
refuses a handler change for SIGKILL: a 500 worker-crashed for a 422
resource-limit."""

from __future__ import annotations

import os
import signal

import pytest

from service.sandbox.worker import namespaces


def _stood_by(child_ends: str) -> int:
    """The wait status of a process that stood by over a child ending as `child_ends` says ("kill:N", "exit:N")."""
    parent = os.fork()
    if parent == 0:
        try:
            _, alive_writer = os.pipe()
            child = os.fork()
            if child == 0:
                how, number = child_ends.split(":")
                if how == "kill":
                    os.kill(os.getpid(), int(number))
                os._exit(int(number))
            namespaces._stand_by(child, alive_writer)
        finally:
            os._exit(99)  # _stand_by raised: how it once left on SIGKILL (exit 1 in a worker)
    _, status = os.waitpid(parent, 0)
    return status


@pytest.mark.parametrize("number", [signal.SIGKILL, signal.SIGTERM, signal.SIGXCPU], ids=["SIGKILL", "SIGTERM", "SIGXCPU"])
def test_the_parent_dies_by_the_signal_that_killed_its_child(number: int) -> None:
    status = _stood_by(f"kill:{int(number)}")
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == number, status


def test_the_parent_exits_with_its_childs_status() -> None:
    status = _stood_by("exit:3")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3, status
