"""The worker-attacks script (worker_attacks.py, beside this file) as the tests
run it, and how its outcomes are judged: by tests/service/process/test_worker_walls.py
on this machine, and by tests/e2e/test_container.py in the running container."""

from __future__ import annotations

from pathlib import Path

ATTACKS = Path(__file__).resolve().with_name("worker_attacks.py")
# Refused to the control too unless it may trace any process (CAP_SYS_PTRACE): the front end is not dumpable.
PROTECTED_EVEN_UNCONFINED = {"read the front end's memory", "read the front end's environment"}


def check_attack_outcomes(outcomes: dict[str, dict[str, str]], may_trace: bool) -> None:
    isolation = outcomes.pop("sandbox")["isolation"]
    assert "landlock" in isolation and "seccomp" in isolation, isolation
    assert len(outcomes) >= 15
    held = {name: outcome["confined"] for name, outcome in outcomes.items() if outcome["confined"] == "done"}
    assert not held, f"attacks that worked inside a worker: {held}"
    for name, outcome in outcomes.items():
        assert outcome["confined"].startswith(("refused", "killed")), (name, outcome)
        if may_trace or name not in PROTECTED_EVEN_UNCONFINED:
            assert outcome["control"] == "done", f"the control of {name!r} failed, so the attack proves nothing: {outcome}"
