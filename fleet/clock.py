"""The one clock of the service: real in ``fleet serve``, virtual in tests and the simulator.

Theory of operation: every part of the shell that needs the time or has to
wait takes a :class:`Clock` and asks it, never :func:`time.time` or
:func:`asyncio.sleep`; :class:`RealClock` is the only place that calls them.
Time is a float of seconds, epoch-like (what the store records and the core's
``ClockAdvanced`` receives).

:class:`VirtualClock` moves only when told to.  A coroutine that sleeps on it
registers a deadline in a heap and waits on a future; :meth:`~VirtualClock.advance_to`
takes the deadlines that have come in order (earliest first, equal deadlines
in the order the sleeps began), sets the time to each one, wakes that one
sleeper and lets every coroutine that can run, run, before it takes the next
deadline.  So a woken sleeper that sleeps again, or wakes others through a
queue, does so at the right time and in a reproducible order, and nothing
ever sleeps for real.  :meth:`~VirtualClock.advance_to_next` jumps to the
earliest deadline, and :meth:`~VirtualClock.advance_one` wakes only its first
sleeper (what a trace replay does between events).

"Let every coroutine run" (:meth:`~VirtualClock.run_until_idle`) yields to
the event loop until its queue of ready callbacks is empty (not at all when
it is empty already: a replay asks thousands of times a second), that is until
every other coroutine waits on something (this clock, a queue, I/O).  It
reads the ready queue of the standard asyncio loop (``loop._ready``, present
in CPython since asyncio began); on a loop without one it yields a fixed
number of times instead.  A coroutine that never waits (``while True: await
clock.sleep(0)``) is reported with a ``RuntimeError`` rather than looping
forever.

The clock also says how the shell runs CPU-bound work on the core's state
(:meth:`Clock.compute`): on the real clock in a worker thread, so that the
event loop keeps serving while a scheduling cycle runs; on a virtual clock
inline, where everything must happen in the event loop's order.  So a
replay and a test run the same loop as ``fleet serve``, with another clock.

A sleeper that is cancelled leaves its heap entry behind, marked dead; dead
entries are dropped when they reach the top of the heap, and the heap is
rebuilt without them once they are the majority, so cancelled sleeps do not
pile up.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import math
import time
import types
from collections.abc import Callable, Generator
from typing import Final, ParamSpec, Protocol, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")

#: Yields of :meth:`VirtualClock.run_until_idle` on an event loop whose ready
#: queue cannot be read.
FALLBACK_YIELDS: Final = 100

#: Rounds after which :meth:`VirtualClock.run_until_idle` gives up on a busy loop.
DEFAULT_MAX_ROUNDS: Final = 100_000

#: Dead (cancelled) heap entries tolerated before a rebuild is considered.
_COMPACT_MIN: Final = 64


class Clock(Protocol):
    """What the shell knows about time."""

    def now(self) -> float:
        """The current time in seconds (epoch-like)."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``; zero or less only yields to other coroutines once."""
        ...

    async def sleep_until(self, t: float) -> None:
        """Wait until the time is ``t``; a time already reached only yields once."""
        ...

    async def compute(self, work: Callable[_P, _T], *args: _P.args, **kw: _P.kwargs) -> _T:
        """Run CPU-bound ``work`` (in a worker thread, or inline on a virtual clock)."""
        ...


def _check_time(value: float, what: str) -> None:
    if math.isnan(value):
        raise ValueError(f"{what} must be a number, not NaN")


@types.coroutine
def _yield_once() -> Generator[None, None, None]:
    """Give every other ready callback of the loop its turn (what ``asyncio.sleep(0)`` does)."""
    yield


class RealClock:
    """Wall-clock time and the event loop's timers."""

    def now(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        _check_time(seconds, "seconds")
        await asyncio.sleep(max(0.0, seconds))

    async def sleep_until(self, t: float) -> None:
        """Wait until ``time.time()`` reaches ``t``, again if the wall clock was set back."""
        _check_time(t, "t")
        remaining = t - self.now()
        if remaining <= 0:
            await asyncio.sleep(0)
            return
        while remaining > 0:
            await asyncio.sleep(remaining)
            remaining = t - self.now()

    async def compute(self, work: Callable[_P, _T], *args: _P.args, **kw: _P.kwargs) -> _T:
        """Run ``work`` in a worker thread: the event loop keeps serving meanwhile."""
        return await asyncio.to_thread(work, *args, **kw)


_Entry = tuple[float, int, "asyncio.Future[None]"]


class VirtualClock:
    """Time that moves only through :meth:`advance`, :meth:`advance_to` and :meth:`advance_to_next`.

    ``max_rounds`` bounds :meth:`run_until_idle`: more rounds than that with
    ready callbacks means some coroutine runs without ever waiting.
    """

    def __init__(self, start: float = 0.0, *, max_rounds: int = DEFAULT_MAX_ROUNDS) -> None:
        if not math.isfinite(start):
            raise ValueError(f"start must be a finite number, not {start}")
        if max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, not {max_rounds}")
        self._now = float(start)
        self._max_rounds = max_rounds
        self._heap: list[_Entry] = []
        self._order = itertools.count()
        self._live = 0  # entries whose sleeper still waits
        self._dead = 0  # entries of cancelled sleepers still in the heap
        self._advancing = False

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        _check_time(seconds, "seconds")
        await self.sleep_until(self._now + seconds)

    async def sleep_until(self, t: float) -> None:
        """Wait until the clock is moved to ``t`` or past it (``math.inf``: forever)."""
        _check_time(t, "t")
        if t <= self._now:
            await _yield_once()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (t, next(self._order), future))
        self._live += 1
        try:
            await future
        finally:
            if future.cancelled():
                self._live -= 1
                self._dead += 1
                self._compact()

    async def compute(self, work: Callable[_P, _T], *args: _P.args, **kw: _P.kwargs) -> _T:
        """Run ``work`` inline: on a virtual clock everything happens in the event loop's order."""
        return work(*args, **kw)

    def sleepers(self) -> int:
        """How many coroutines sleep on this clock."""
        return self._live

    def next_deadline(self) -> float | None:
        """The earliest time a sleeper waits for (None: none, or only ``inf`` ones)."""
        self._drop_dead_top()
        if not self._heap or math.isinf(self._heap[0][0]):
            return None
        return self._heap[0][0]

    async def run_until_idle(self) -> None:
        """Let every coroutine that can run, run, until all of them wait (at once if
        they all wait already).

        Raises ``RuntimeError`` when coroutines are still ready after
        ``max_rounds`` yields (one of them never waits).
        """
        ready = getattr(asyncio.get_running_loop(), "_ready", None)
        if not isinstance(ready, collections.deque):
            for _ in range(FALLBACK_YIELDS):
                await _yield_once()
            return
        if not ready:  # every coroutine waits already: nothing to yield to
            return
        for _ in range(self._max_rounds):
            await _yield_once()
            if not ready:
                return
        raise RuntimeError(
            f"coroutines were still ready to run after {self._max_rounds} rounds "
            f"at virtual time {self._now}: one of them runs without ever waiting"
        )

    async def advance(self, seconds: float) -> None:
        """Move the time on by ``seconds`` (see :meth:`advance_to`)."""
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"the clock advances by a finite, non-negative amount, not {seconds}")
        await self.advance_to(self._now + seconds)

    async def advance_to(self, t: float) -> None:
        """Move the time to ``t``, waking every sleeper whose deadline is ``t`` or earlier.

        Coroutines that are ready run first (so a sleep begun just before is
        counted); then each deadline in order: the time becomes that deadline,
        its one sleeper wakes, and everything runs until idle again before the
        next deadline (sleeps begun meanwhile included).  The time ends at ``t``.
        """
        if not math.isfinite(t):
            raise ValueError(f"the clock moves to a finite time, not {t}")
        if t < self._now:
            raise ValueError(f"the clock cannot go back from {self._now} to {t}")
        if self._advancing:
            raise RuntimeError("the clock is already being advanced")
        self._advancing = True
        try:
            await self.run_until_idle()
            while (deadline := self.next_deadline()) is not None and deadline <= t:
                _, _, future = heapq.heappop(self._heap)
                self._now = deadline
                self._live -= 1
                future.set_result(None)
                await self.run_until_idle()
            self._now = t
        finally:
            self._advancing = False

    async def advance_to_next(self) -> float | None:
        """Jump to the earliest deadline and wake its sleepers; the new time (None: no sleeper)."""
        await self.run_until_idle()
        deadline = self.next_deadline()
        if deadline is not None:
            await self.advance_to(deadline)
        return deadline

    async def advance_one(self) -> float | None:
        """Wake only the earliest sleeper (the time moves to its deadline); the new time.

        Like :meth:`advance_to_next`, but when several sleepers wait for the
        same deadline only the first of them (the earliest sleep) wakes; the
        others wake on the next calls, at the same time.  A driver that lets
        everything settle between two calls (a trace replay) so handles
        simultaneous wake-ups one at a time, in a fixed order.  None: no
        sleeper (the time does not move).
        """
        if self._advancing:
            raise RuntimeError("the clock is already being advanced")
        await self.run_until_idle()
        deadline = self.next_deadline()
        if deadline is None:
            return None
        self._advancing = True
        try:
            _, _, future = heapq.heappop(self._heap)
            self._now = deadline
            self._live -= 1
            future.set_result(None)
            await self.run_until_idle()
        finally:
            self._advancing = False
        return deadline

    def _drop_dead_top(self) -> None:
        while self._heap and self._heap[0][2].cancelled():
            heapq.heappop(self._heap)
            self._dead -= 1

    def _compact(self) -> None:
        """Rebuild the heap without cancelled entries once they are the majority."""
        if self._dead < _COMPACT_MIN or self._dead * 2 < len(self._heap):
            return
        self._heap = [entry for entry in self._heap if not entry[2].cancelled()]
        heapq.heapify(self._heap)
        self._dead = 0
