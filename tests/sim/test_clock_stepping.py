"""``VirtualClock.advance_one``: one sleeper at a time, what a replay steps with."""

from __future__ import annotations

import asyncio

from fleet.clock import VirtualClock


async def test_sleepers_of_one_deadline_wake_one_call_at_a_time_in_order() -> None:
    clock = VirtualClock(0.0)
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, until: float) -> None:
        await clock.sleep_until(until)
        woke.append((name, clock.now()))

    tasks = [asyncio.create_task(sleeper(n, t)) for n, t in (("a", 10), ("b", 10), ("c", 5))]
    assert await clock.advance_one() == 5
    assert woke == [("c", 5)]
    assert await clock.advance_one() == 10
    assert woke == [("c", 5), ("a", 10)]  # b waits for the next call, at the same time
    assert clock.sleepers() == 1
    assert await clock.advance_one() == 10
    assert woke == [("c", 5), ("a", 10), ("b", 10)]
    assert await clock.advance_one() is None
    assert clock.now() == 10
    await asyncio.gather(*tasks)
