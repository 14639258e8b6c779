"""Per-caller limits on what holds the service a long time: event streams and simulations.

Theory of operation: a :class:`Slots` counts, per caller (a token's name),
how many of one kind of long request are under way, and refuses one more
beyond its limit with a 429 problem and ``Retry-After``.  A handler takes
a slot with ``with slots.take(caller):`` around the long part of its work,
so the slot is given back however that ends: answered, failed, cancelled
(the service shutting down), or ended because the client went away (a
stream's next write fails; a simulation keeps its slot while its forecast
still runs, since the work goes on).  Two
instances exist per application (``keys.STREAM_SLOTS`` for
``GET /api/v1/events`` streams, ``keys.SIMULATION_SLOTS`` for
``dryRun=Simulate``), sized by ``max_streams_per_token`` and
``max_simulations_per_token``.  Without a tokens file every caller is the
one admin caller, so the limit bounds all callers together; that is the
single local user, whose browser opens at most six connections per host
anyway.  On PostgreSQL the slots are counted where the work runs: the
leader (a follower forwards these routes with the caller's identity).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from fleet.api.problems import ProblemError, too_many_requests
from fleet.api.tokens import Caller

#: Seconds a refused caller is told to wait (``Retry-After``).
RETRY_AFTER: Final = 5


class Slots:
    """At most ``limit`` of ``what`` at once per caller (see the module docstring)."""

    def __init__(self, what: str, limit: int, setting: str) -> None:
        if limit < 1:
            raise ValueError(f"{setting} must be at least 1, not {limit}")
        self.what = what
        self.limit = limit
        self.setting = setting
        self._held: dict[str, int] = {}

    def held(self, caller: Caller) -> int:
        """How many slots ``caller`` holds now."""
        return self._held.get(caller.name, 0)

    @contextmanager
    def take(self, caller: Caller) -> Iterator[None]:
        """Hold one slot of ``caller`` inside the block; 429 when it holds them all."""
        name = caller.name
        held = self._held.get(name, 0)
        if held >= self.limit:
            detail = (
                f"token {name} already has {held} {self.what} under way, the most it may "
                f"({self.setting}); end one, or retry in {RETRY_AFTER} s"
            )
            raise ProblemError(too_many_requests(detail), headers={"Retry-After": str(RETRY_AFTER)})
        self._held[name] = held + 1
        try:
            yield
        finally:
            left = self._held[name] - 1
            if left:
                self._held[name] = left
            else:
                del self._held[name]
