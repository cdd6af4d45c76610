"""The fork server's own preparation, before it loads anything else.

Imported only by the fork server, first of its preloaded modules
(`service.sandbox.supervisor.Sandbox.start`), while it is still one thread: a user
namespace of its own where it is not root, and a PID namespace of its own
for every worker it forks (`service.sandbox.worker.namespaces.prepare_fork_server`);
and its pid, which each worker it forks checks when it arms its death with
it (`service.sandbox.worker.lifeline`).
"""

from service.sandbox.worker.lifeline import expect_forks_here
from service.sandbox.worker.namespaces import prepare_fork_server

prepare_fork_server()
expect_forks_here()
