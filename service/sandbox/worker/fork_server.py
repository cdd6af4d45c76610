"""The fork server's own preparation, before it loads anything else.

Imported only by the fork server, first of its preloaded modules
(`service.sandbox.supervisor.Sandbox.start`), while it is still one thread: a user
namespace of its own where it is not root, and a PID namespace of its own
for every worker it forks (`service.sandbox.worker.namespaces.prepare_fork_server`);
its pid, which each worker it forks checks when it arms its death with
it (`service.sandbox.worker.lifeline`); and a lower CPU priority
(`WORKER_NICENESS`), which every worker inherits: the long CPU work runs in
workers, and when a worker and a front end want the same core, the front end
gets it (its event loop answers `/healthz` and the other requests meanwhile;
a worker uses whatever the front ends leave, all of it when they are idle).
"""

import os
from typing import Final

from service.sandbox.worker.lifeline import expect_forks_here
from service.sandbox.worker.namespaces import prepare_fork_server

WORKER_NICENESS: Final = 10  # nice(1)'s own default: a front end's weight is about 9x a worker's when both want a core

prepare_fork_server()
expect_forks_here()
os.nice(WORKER_NICENESS)
