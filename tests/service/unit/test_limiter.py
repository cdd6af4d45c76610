"""Admission control (`service.imports.limiter.ImportLimiter`): receiving
places, the import queue and worker slots, in process."""

from __future__ import annotations

import asyncio

import pytest

from service.errors import Overloaded
from service.imports.limiter import ImportLimiter


def test_receiving_places_are_bounded_apart_from_the_queue() -> None:
    async def scenario() -> None:
        limiter = ImportLimiter(workers=1, queue=0, max_receiving=1)
        async with limiter.receiving():
            assert limiter.saturated
            with pytest.raises(Overloaded) as refused:
                async with limiter.receiving():
                    pass
            assert 1 <= refused.value.retry_after <= 60
            async with limiter.admission():  # receiving holds no import place
                assert limiter.admitted == 1
        assert limiter.receiving_now == 0 and limiter.admitted == 0

    asyncio.run(scenario())


def test_the_queue_admits_workers_plus_queue_then_refuses() -> None:
    async def scenario() -> None:
        limiter = ImportLimiter(workers=2, queue=1, max_receiving=8)
        async with limiter.admission(), limiter.admission(), limiter.admission():
            with pytest.raises(Overloaded, match="imports are running"):
                async with limiter.admission():
                    pass
        async with limiter.admission():  # places come back
            pass

    asyncio.run(scenario())


def test_slots_run_at_most_workers_at_once_in_order() -> None:
    async def scenario() -> list[int]:
        limiter = ImportLimiter(workers=1, queue=4, max_receiving=8)
        order: list[int] = []
        most = 0

        async def job(number: int) -> None:
            nonlocal most
            async with limiter.admission(), limiter.slot():
                most = max(most, limiter.running)
                order.append(number)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(job(n) for n in range(4)))
        assert most == 1
        return order

    assert asyncio.run(scenario()) == [0, 1, 2, 3]
