"""Admission's memory budget (`service.imports.admission`): workers sized to
large models reserve their cap while they run, never past the budget in all,
one tenant at most its share of it while it runs another; a worker at
--worker-memory reserves nothing. Two admissions on one folder stand for two
front-end processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from service.imports.admission import Admission

GIB = 1 << 30


def test_sized_workers_never_add_up_past_the_budget(tmp_path: Path) -> None:
    async def scenario() -> None:
        admission = Admission(workers=4, queue=4, max_receiving=4, folder=tmp_path, memory_budget=12 * GIB)
        async with admission.admitted("alice") as first, admission.admitted("bob") as second:
            async with first.slot(8 * GIB):
                assert admission.memory_reserved == 8 * 1024
                with pytest.raises(TimeoutError):  # 8 + 8 GiB: waits, slots free
                    async with asyncio.timeout(0.2), second.slot(8 * GIB):
                        pass
                async with second.slot(0):  # a worker at --worker-memory is not held back
                    assert admission.running == 2
            async with second.slot(8 * GIB):  # its memory back
                assert admission.memory_reserved == 8 * 1024
        assert admission.memory_reserved == 0

    asyncio.run(scenario())


def test_a_waiting_large_worker_takes_the_memory_as_it_frees(tmp_path: Path) -> None:
    async def scenario() -> None:
        admission = Admission(workers=4, queue=4, max_receiving=4, folder=tmp_path, memory_budget=12 * GIB)
        async with admission.admitted("alice") as first, admission.admitted("bob") as second:
            ran: list[str] = []

            async def run(tenant: str) -> None:
                async with second.slot(8 * GIB):
                    ran.append(tenant)

            async with first.slot(8 * GIB):
                waiting = asyncio.create_task(run("bob"))
                await asyncio.sleep(0.1)
                assert not ran
            await asyncio.wait_for(waiting, 2)
            assert ran == ["bob"]

    asyncio.run(scenario())


def test_a_tenant_running_a_sized_worker_takes_at_most_its_share_for_another(tmp_path: Path) -> None:
    async def scenario() -> None:
        admission = Admission(workers=4, queue=4, max_receiving=4, folder=tmp_path, tenant_share=0.5, memory_budget=12 * GIB)
        one, two, three = admission.admitted("alice"), admission.admitted("alice"), admission.admitted("bob")
        async with one as alice, two as alice_again, three as bob, alice.slot(7 * GIB):  # her first: past her 6 GiB share
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.2), alice_again.slot(3 * GIB):  # 10 GiB for alice: past her share
                    pass
            async with bob.slot(5 * GIB):  # bob's first fits the 5 GiB left
                assert admission.memory_reserved == 12 * 1024

    asyncio.run(scenario())


def test_the_budget_holds_across_processes(tmp_path: Path) -> None:
    async def scenario() -> None:
        here = Admission(workers=4, queue=4, max_receiving=4, folder=tmp_path, memory_budget=12 * GIB)
        there = Admission(workers=4, queue=4, max_receiving=4, folder=tmp_path, memory_budget=12 * GIB)
        async with here.admitted("alice") as mine, there.admitted("bob") as theirs, mine.slot(8 * GIB):
            assert there.memory_reserved == 8 * 1024
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(0.3), theirs.slot(8 * GIB):
                    pass
        assert there.memory_reserved == 0

    asyncio.run(scenario())


def test_without_a_budget_nothing_is_reserved(tmp_path: Path) -> None:
    async def scenario() -> None:
        admission = Admission(workers=2, queue=2, max_receiving=2, folder=tmp_path)
        async with admission.admitted("alice") as one, admission.admitted("alice") as two, one.slot(64 * GIB), two.slot(64 * GIB):
            assert admission.memory_reserved == 0

    asyncio.run(scenario())
