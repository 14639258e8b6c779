"""The clocks: the real one delegates to time and asyncio; the virtual one moves when told.

Theory of operation: nothing here sleeps for real.  The real clock's tests
replace the ``time`` and ``asyncio`` that ``fleet.clock`` sees with fakes
that record what was asked; the virtual clock's tests start coroutines that
sleep on it, move the time, and compare who woke, when, and in what order.
"""

from __future__ import annotations

import asyncio
import math
import random
import threading
import types
from collections.abc import Awaitable, Callable

import pytest

import fleet.clock as clock_module
from fleet.clock import Clock, RealClock, VirtualClock

Log = list[tuple[str, float]]


def _sleeper(clock: VirtualClock, log: Log, name: str, *delays: float) -> asyncio.Task[None]:
    """A coroutine that sleeps each of ``delays`` in turn, logging the time after each."""

    async def run() -> None:
        for delay in delays:
            await clock.sleep(delay)
            log.append((name, clock.now()))

    return asyncio.create_task(run(), name=name)


# Real clock -----------------------------------------------------------------------------


class FakeTime:
    """Stands in for the ``time`` module: a wall clock that the fake sleep moves."""

    def __init__(self, now: float) -> None:
        self.now = now

    def time(self) -> float:
        return self.now


@pytest.fixture
def fake_wall(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeTime, list[float]]:
    """``fleet.clock``'s view of time and asyncio replaced: sleeps are recorded, not slept."""
    wall = FakeTime(1000.0)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        wall.now += seconds

    monkeypatch.setattr(clock_module, "time", wall)
    monkeypatch.setattr(clock_module, "asyncio", types.SimpleNamespace(sleep=sleep))
    return wall, slept


async def test_real_clock_reads_the_wall_clock_and_sleeps_on_the_loop(
    fake_wall: tuple[FakeTime, list[float]],
) -> None:
    _, slept = fake_wall
    clock: Clock = RealClock()
    assert clock.now() == 1000.0
    await clock.sleep(2.5)
    await clock.sleep(-3)
    assert slept == [2.5, 0.0]
    assert clock.now() == 1002.5


async def test_real_clock_sleep_until_waits_the_difference_and_past_times_only_yield(
    fake_wall: tuple[FakeTime, list[float]],
) -> None:
    wall, slept = fake_wall
    clock = RealClock()
    await clock.sleep_until(1010.0)
    await clock.sleep_until(900.0)
    assert slept == [10.0, 0]
    assert wall.now == 1010.0


async def test_real_clock_sleep_until_sleeps_again_when_the_wall_clock_was_set_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wall = FakeTime(0.0)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        # The first sleep ends with the wall clock set back by 4 seconds.
        wall.now += seconds - (4.0 if len(slept) == 1 else 0.0)

    monkeypatch.setattr(clock_module, "time", wall)
    monkeypatch.setattr(clock_module, "asyncio", types.SimpleNamespace(sleep=sleep))
    await RealClock().sleep_until(10.0)
    assert slept == [10.0, 4.0]


async def test_the_real_clock_really_is_time_time() -> None:
    import time

    before = time.time()
    now = RealClock().now()
    assert before <= now <= time.time()
    await RealClock().sleep(0)


@pytest.mark.parametrize("clock", [RealClock(), VirtualClock()], ids=["real", "virtual"])
async def test_nan_is_no_time(clock: Clock) -> None:
    with pytest.raises(ValueError, match="NaN"):
        await clock.sleep(math.nan)
    with pytest.raises(ValueError, match="NaN"):
        await clock.sleep_until(math.nan)


# Virtual clock: moving time --------------------------------------------------------------


async def test_virtual_time_starts_where_asked_and_moves_only_when_told() -> None:
    clock = VirtualClock(start=100.0)
    assert clock.now() == 100.0
    await clock.run_until_idle()
    assert clock.now() == 100.0
    await clock.advance(2.5)
    assert clock.now() == 102.5
    await clock.advance_to(200.0)
    assert clock.now() == 200.0
    await clock.advance(0)
    assert clock.now() == 200.0


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan])
async def test_advance_by_a_negative_or_non_finite_amount_is_refused(bad: float) -> None:
    clock = VirtualClock()
    with pytest.raises(ValueError, match="finite, non-negative"):
        await clock.advance(bad)
    assert clock.now() == 0.0


async def test_the_virtual_clock_never_goes_back() -> None:
    clock = VirtualClock(start=10.0)
    with pytest.raises(ValueError, match=r"cannot go back from 10\.0 to 9\.0"):
        await clock.advance_to(9.0)
    with pytest.raises(ValueError, match="finite time"):
        await clock.advance_to(math.inf)


@pytest.mark.parametrize("start", [math.inf, -math.inf, math.nan])
def test_a_virtual_clock_starts_at_a_finite_time(start: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        VirtualClock(start=start)


def test_a_virtual_clock_needs_at_least_one_round() -> None:
    with pytest.raises(ValueError, match="max_rounds"):
        VirtualClock(max_rounds=0)


# Virtual clock: who wakes, when, in what order -------------------------------------------


async def test_sleepers_wake_in_deadline_order_ties_in_sleep_order_each_at_its_deadline() -> None:
    clock = VirtualClock()
    log: Log = []
    tasks = [
        _sleeper(clock, log, name, delay)
        for name, delay in [("e", 5), ("a", 1), ("c1", 3), ("c2", 3), ("b", 2), ("c3", 3)]
    ]
    await clock.advance(10)
    assert log == [("a", 1), ("b", 2), ("c1", 3), ("c2", 3), ("c3", 3), ("e", 5)]
    assert clock.now() == 10
    await asyncio.gather(*tasks)


async def test_only_deadlines_that_have_come_wake() -> None:
    clock = VirtualClock()
    log: Log = []
    tasks = [_sleeper(clock, log, str(d), d) for d in (1, 2, 3)]
    await clock.advance(2.5)
    assert log == [("1", 1), ("2", 2)]
    assert clock.sleepers() == 1
    assert clock.next_deadline() == 3
    await clock.advance_to(3)
    assert log[-1] == ("3", 3)
    assert clock.sleepers() == 0
    await asyncio.gather(*tasks)


async def test_a_deadline_equal_to_the_target_wakes() -> None:
    clock = VirtualClock(start=5.0)
    log: Log = []
    task = _sleeper(clock, log, "x", 2.0)
    await clock.advance_to(7.0)
    assert log == [("x", 7.0)]
    await task


async def test_cascades_a_woken_sleeper_sleeps_again_and_interleaves_with_others() -> None:
    clock = VirtualClock()
    log: Log = []
    a = _sleeper(clock, log, "a", 1, 1, 1)
    b = _sleeper(clock, log, "b", 1.5)
    c = _sleeper(clock, log, "c", 2)
    await clock.advance(10)
    # a's second sleep began at 1, after c's: a tie at 2 goes to c.
    assert log == [("a", 1), ("b", 1.5), ("c", 2), ("a", 2), ("a", 3)]
    await asyncio.gather(a, b, c)


async def test_what_a_woken_sleeper_sets_off_runs_before_the_next_deadline() -> None:
    clock = VirtualClock()
    log: Log = []
    queue: asyncio.Queue[str] = asyncio.Queue()

    async def producer() -> None:
        await clock.sleep(1)
        queue.put_nowait("tick")

    async def consumer() -> None:
        item = await queue.get()
        log.append((item, clock.now()))
        await clock.sleep(0.5)
        log.append(("consumer slept", clock.now()))

    tasks = [
        asyncio.create_task(consumer()),
        asyncio.create_task(producer()),
        _sleeper(clock, log, "later", 1.2),
    ]
    await clock.advance(5)
    assert log == [("tick", 1), ("later", 1.2), ("consumer slept", 1.5)]
    await asyncio.gather(*tasks)


async def test_a_sleep_begun_just_before_advancing_is_counted() -> None:
    clock = VirtualClock()
    log: Log = []
    task = _sleeper(clock, log, "new", 3)  # not started yet: it runs inside advance
    assert clock.sleepers() == 0
    await clock.advance(3)
    assert log == [("new", 3)]
    await task


@pytest.mark.parametrize(
    "sleep",
    [
        lambda c: c.sleep(0),
        lambda c: c.sleep(-2),
        lambda c: c.sleep_until(c.now()),
        lambda c: c.sleep_until(c.now() - 1),
    ],
    ids=["zero", "negative", "now", "past"],
)
async def test_sleeping_for_no_time_only_yields(
    sleep: Callable[[VirtualClock], Awaitable[None]],
) -> None:
    clock = VirtualClock(start=4.0)
    done: list[float] = []

    async def run() -> None:
        await sleep(clock)
        done.append(clock.now())

    task = asyncio.create_task(run())
    await clock.run_until_idle()
    assert done == [4.0]
    assert clock.sleepers() == 0
    await task


async def test_advance_to_next_jumps_from_deadline_to_deadline() -> None:
    clock = VirtualClock()
    log: Log = []
    tasks = [_sleeper(clock, log, "a", 3, 4), _sleeper(clock, log, "b", 7)]
    assert await clock.advance_to_next() == 3
    assert clock.now() == 3 and log == [("a", 3)]
    assert await clock.advance_to_next() == 7
    assert log == [("a", 3), ("b", 7), ("a", 7)]  # b's sleep began first
    assert await clock.advance_to_next() is None
    assert clock.now() == 7
    await asyncio.gather(*tasks)


async def test_a_sleeper_forever_is_counted_but_has_no_deadline() -> None:
    clock = VirtualClock()
    task = asyncio.create_task(clock.sleep(math.inf))
    await clock.run_until_idle()
    assert clock.sleepers() == 1
    assert clock.next_deadline() is None
    assert await clock.advance_to_next() is None
    await clock.advance(1e12)
    assert not task.done()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert clock.sleepers() == 0


async def test_many_sleepers_wake_in_deadline_then_sleep_order() -> None:
    clock = VirtualClock()
    rng = random.Random(7)
    log: Log = []
    deadlines = {f"s{i}": float(rng.randrange(0, 300)) / 4 for i in range(2000)}
    tasks = [_sleeper(clock, log, name, d) for name, d in deadlines.items()]
    order = {name: i for i, name in enumerate(deadlines)}
    await clock.advance(100)
    assert len(log) == 2000
    # Zero-length sleeps wake when they yield, before any deadline is taken.
    assert log == sorted(log, key=lambda e: (e[1], order[e[0]]))
    assert all(deadlines[name] == at for name, at in log)
    await asyncio.gather(*tasks)


# Virtual clock: cancellation -------------------------------------------------------------


async def test_a_cancelled_sleeper_is_gone_and_the_others_still_wake() -> None:
    clock = VirtualClock()
    log: Log = []
    first = _sleeper(clock, log, "first", 5)
    second = _sleeper(clock, log, "second", 5)
    await clock.run_until_idle()
    assert clock.sleepers() == 2
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert clock.sleepers() == 1
    await clock.advance(10)
    assert log == [("second", 5)]
    await second


async def test_cancelled_sleepers_leave_nothing_behind() -> None:
    clock = VirtualClock()
    tasks = [asyncio.create_task(clock.sleep(1000 + i)) for i in range(1000)]
    await clock.run_until_idle()
    assert clock.sleepers() == 1000
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    assert clock.sleepers() == 0
    assert len(clock._heap) < 100  # dead entries are compacted away as they pile up
    assert clock.next_deadline() is None
    assert clock._heap == []


async def test_a_long_lived_sleeper_survives_the_cancelled_ones_being_compacted() -> None:
    clock = VirtualClock()
    log: Log = []
    keep = [_sleeper(clock, log, f"k{i}", 500 + i) for i in range(10)]
    dropped = [asyncio.create_task(clock.sleep(i + 1)) for i in range(500)]
    await clock.run_until_idle()
    for task in dropped:
        task.cancel()
    await asyncio.gather(*dropped, return_exceptions=True)
    assert len(clock._heap) < 100
    assert clock.next_deadline() == 500
    await clock.advance(1000)
    assert log == [(f"k{i}", 500 + i) for i in range(10)]
    await asyncio.gather(*keep)


async def test_a_sleeper_cancelled_by_one_woken_at_the_same_deadline_does_not_wake() -> None:
    clock = VirtualClock()
    log: Log = []
    victim: asyncio.Task[None] | None = None

    async def canceller() -> None:
        await clock.sleep(1)  # began first: wakes first at the tie
        assert victim is not None
        victim.cancel()

    other = asyncio.create_task(canceller())
    victim = _sleeper(clock, log, "victim", 1)
    await clock.advance(2)
    assert log == []
    assert victim.cancelled()
    await other
    assert clock.sleepers() == 0
    assert clock._heap == [] and clock._dead == 0


# Virtual clock: misuse -------------------------------------------------------------------


async def test_advancing_while_advancing_is_refused() -> None:
    clock = VirtualClock()
    errors: list[str] = []

    async def meddler() -> None:
        await clock.sleep(1)
        try:
            await clock.advance(1)
        except RuntimeError as e:
            errors.append(str(e))

    task = asyncio.create_task(meddler())
    await clock.advance(5)
    await task
    assert errors == ["the clock is already being advanced"]
    assert clock.now() == 5


async def test_a_coroutine_that_never_waits_is_reported() -> None:
    clock = VirtualClock(max_rounds=50)

    async def spin() -> None:
        while True:
            await clock.sleep(0)

    task = asyncio.create_task(spin())
    with pytest.raises(RuntimeError, match=r"after 50 rounds at virtual time 0\.0"):
        await clock.advance(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_on_a_loop_without_a_readable_ready_queue_it_yields_a_fixed_number_of_times(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = VirtualClock()
    steps: list[int] = []

    async def chain() -> None:
        for i in range(10):
            await clock.sleep(0)
            steps.append(i)

    task = asyncio.create_task(chain())
    loopless = types.SimpleNamespace(get_running_loop=lambda: object())
    monkeypatch.setattr(clock_module, "asyncio", loopless)
    await clock.run_until_idle()
    monkeypatch.undo()
    assert steps == list(range(10))
    await task


async def test_one_coroutine_runs_on_either_clock() -> None:
    async def waits(clock: Clock) -> float:
        start = clock.now()
        await clock.sleep_until(start + 30)
        return clock.now() - start

    virtual = VirtualClock(start=50.0)
    task = asyncio.create_task(waits(virtual))
    await virtual.advance(30)
    assert await task == 30


async def test_the_real_clock_computes_in_a_worker_thread_so_the_event_loop_serves_meanwhile() -> (
    None
):
    served: list[str] = []
    started = threading.Event()

    def work(x: int) -> tuple[int, bool]:
        started.set()
        # The event loop answers while this runs: it appends once the work began.
        for _ in range(500):
            if served:
                break
            threading.Event().wait(0.01)
        return x * 2, threading.current_thread() is threading.main_thread()

    async def serve() -> None:
        await asyncio.to_thread(started.wait)
        served.append("answered")

    result, on_main = (await asyncio.gather(RealClock().compute(work, 21), serve()))[0]
    assert (result, on_main, served) == (42, False, ["answered"])


async def test_a_virtual_clock_computes_inline_in_the_event_loops_order() -> None:
    order: list[str] = []

    def work() -> bool:
        order.append("work")
        return threading.current_thread() is threading.main_thread()

    async def other() -> None:
        order.append("other")

    task = asyncio.create_task(other())
    assert await VirtualClock(0.0).compute(work) is True
    await task
    assert order == ["work", "other"]  # no turn of the event loop in between


async def test_run_until_idle_returns_at_once_when_every_coroutine_waits_already() -> None:
    clock = VirtualClock()
    turns: list[str] = []
    # a timer of the event loop (not a ready callback) runs at the loop's next turn
    asyncio.get_running_loop().call_later(0, turns.append, "turn")
    await clock.run_until_idle()
    assert turns == []  # nothing was ready: no turn of the event loop was taken

    async def ready() -> None:
        turns.append("ready")

    task = asyncio.create_task(ready())
    await clock.run_until_idle()
    assert task.done() and turns[0] == "ready"  # a ready coroutine runs
