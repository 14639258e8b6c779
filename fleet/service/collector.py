"""Garbage collection in the long-running service: pauses that follow what is new.

Theory of operation: CPython's cyclic collector makes a full collection
whenever the objects that survived the younger collections have grown by a
quarter since the last full one, and a full collection walks every tracked
object of the process while it holds the GIL.  A service that holds tens of
thousands of jobs (their records, placements, views, the cells) stops the
API and the scheduler loop for hundreds of milliseconds at each one, and
the pauses lengthen as the service takes on jobs.  :class:`FollowGrowth`
moves what survived a full collection out of the collector's sight
(``gc.freeze()``), so that the next full collection walks only the objects
that became long-lived since: its pause follows the growth, not the heap.
Frozen objects are still freed by reference counting; only a reference
cycle among them that becomes garbage waits, until a thaw: ``gc.unfreeze()``
after a full collection, so that the next one walks (and frees) everything
once.  That one is as long as a full collection ever was (about 0.4 s with
half a million objects), so a thaw comes after at least ``thaw_every`` full
collections *and* ``thaw_after`` seconds: under load, when full collections
come every second or so, a count alone would stop the service every few
seconds.  Nothing is frozen that a collection just found to be garbage: the
freeze comes right after the collection.

A scheduling cycle allocates tens of thousands of short-lived objects
(quota verdicts, memory keys, placement questions) and most die within the
cycle by reference counting; left to itself, the collector stops the cycle
every 700 allocations to walk the young objects alive at that moment, about
a tenth of a cycle's time.  :func:`cycle_paused` runs the cycle with
automatic collection off and then, if the cycle allocated enough for one,
collects the youngest generation once: the objects that died meanwhile are
never walked, and the survivors (the cycle's decisions, new records) are
walked once, on the cycle's own time; the older generations follow as due.
"""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Final

#: Full collections at least between two that walk every object (and free old cycles).
THAW_EVERY: Final = 16
#: Seconds at least between two such collections.
THAW_AFTER: Final = 600.0


class FollowGrowth:
    """A ``gc.callbacks`` entry: freeze after each full collection, thaw every so often."""

    def __init__(
        self,
        thaw_every: int = THAW_EVERY,
        thaw_after: float = THAW_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if thaw_every < 1:
            raise ValueError(f"thaw_every must be at least 1, not {thaw_every}")
        if thaw_after < 0:
            raise ValueError(f"thaw_after must not be negative, not {thaw_after}")
        self.thaw_every = thaw_every
        self.thaw_after = thaw_after
        self._clock = clock
        #: full collections seen
        self.full = 0
        #: full collections since the last thaw, and when that was
        self._since = 0
        self._thawed_at = clock()

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase != "stop" or info.get("generation") != 2:
            return
        self.full += 1
        self._since += 1
        now = self._clock()
        if self._since >= self.thaw_every and now - self._thawed_at >= self.thaw_after:
            gc.unfreeze()  # the next full collection sees everything again
            self._since = 0
            self._thawed_at = now
        else:
            gc.freeze()

    def install(self) -> None:
        """Follow the full collections of this process (once)."""
        if self not in gc.callbacks:
            gc.callbacks.append(self)

    def remove(self) -> None:
        """Stop, and give every frozen object back to the collector."""
        if self in gc.callbacks:
            gc.callbacks.remove(self)
        gc.unfreeze()


class _Pauses:
    """The cycles running paused, and whether collection was on when the first began."""

    lock = threading.Lock()
    running = 0
    was_on = False


@contextlib.contextmanager
def cycle_paused() -> Iterator[None]:
    """Run a scheduling cycle without automatic collection, then collect the youngest
    generation once if a collection came due (see the module docstring).

    Nested or concurrent uses (several schedulers in one process) turn collection
    back on when the last one ends, and only if it was on when the first began:
    a process that switched it off keeps it off.
    """
    with _Pauses.lock:
        if _Pauses.running == 0:
            _Pauses.was_on = gc.isenabled()
            gc.disable()
        _Pauses.running += 1
    try:
        yield
    finally:
        with _Pauses.lock:
            _Pauses.running -= 1
            resume = _Pauses.running == 0 and _Pauses.was_on
            if resume:
                gc.enable()
        if resume and gc.get_count()[0] >= gc.get_threshold()[0]:
            gc.collect(0)  # the collection the pause put off; the older ones as due
