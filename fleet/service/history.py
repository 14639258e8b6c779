"""The fleet over time: a sample of every leaf queue's figures, stored every interval.

Theory of operation: the dashboard's charts (GPUs used per queue, queue
depth, wait) need the past, which neither the loop's view (the present) nor
``/metrics`` (a scrape's present) keeps.  :class:`Sampler` takes, every
``history_interval`` seconds of the service's clock, the loop's published
view (:class:`fleet.core.view.LoopView`, as the API and the gauges read it:
never the core's state) and the waits of the last hour's admissions (kept by
:meth:`fleet.service.telemetry.Telemetry.recent_waits`, the same waits as
``fleet_admission_wait_time``), makes one row per leaf queue and one for the
whole fleet (:func:`samples`) and stores them with
:func:`fleet.store.samples.add_samples`, which deletes in the same
transaction the rows older than ``history_retention``.  Only the replica
that schedules samples (the API's ``cleanup_ctx`` starts and stops the
sampler with its leadership, as it does the start estimates), and it writes
through its loop's database, whose writes are fenced by its term: a replica
that lost the lease writes no sample.  A view that is not ready yet (the
loop has not restored) is skipped.  A failed write is logged and the next
interval tries again: the history is a convenience, never a reason to stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final

from fleet.clock import Clock
from fleet.core.resources import GPU, QuantityError, parse_quantity
from fleet.core.view import LoopView
from fleet.store.database import Database
from fleet.store.samples import FLEET, Sample, add_samples

log = logging.getLogger("fleet.service.history")

#: Seconds of admissions a sample's p95 wait is of.
WAIT_WINDOW: Final = 3600.0


def p95(values: Iterable[float]) -> float | None:
    """The 95th percentile by nearest rank (None for no values)."""
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _gpus(used: Mapping[str, str]) -> int:
    text = used.get(GPU)
    if text is None:
        return 0
    try:
        return parse_quantity(GPU, text)
    except QuantityError:
        return 0


def samples(view: LoopView, waits: Sequence[tuple[str, float]]) -> list[Sample]:
    """One row per leaf queue of ``view`` and one for the whole fleet (:data:`FLEET`),
    with the p95 of ``waits`` (``(queue, seconds)`` of the recent admissions).

    The fleet's GPUs are what the members' cells hold (opportunistic jobs
    included); a queue's are its ``used`` in the quota tree.
    """
    by_queue: dict[str, list[float]] = {}
    for queue, wait in waits:
        by_queue.setdefault(queue, []).append(wait)
    leaves = [q for q in view.queues if q.leaf]
    rows = [
        Sample(
            queue=q.name,
            gpus=_gpus(q.used),
            running=q.admitted,
            pending=q.pending,
            wait_p95=p95(by_queue.get(q.name, ())),
            starts=len(by_queue.get(q.name, ())),
        )
        for q in sorted(leaves, key=lambda q: q.name)
    ]
    held = sum(c.used for c in view.clusters.values())
    rows.append(
        Sample(
            queue=FLEET,
            gpus=held if view.clusters else sum(r.gpus for r in rows),
            running=sum(r.running for r in rows),
            pending=sum(r.pending for r in rows),
            wait_p95=p95(w for _, w in waits),
            starts=len(waits),
        )
    )
    return rows


class Sampler:
    """Stores :func:`samples` every ``interval`` seconds, keeping ``retention`` seconds."""

    def __init__(
        self,
        clock: Clock,
        view: Callable[[], LoopView],
        database: Callable[[], Database],
        waits: Callable[[float], Sequence[tuple[str, float]]],
        *,
        interval: float,
        retention: float,
    ) -> None:
        self.clock = clock
        self.view = view
        #: the database to write to: the scheduling loop's (fenced by its term)
        self.database = database
        self.waits = waits
        self.interval = interval
        self.retention = retention
        self._task: asyncio.Task[None] | None = None
        self._one_at_a_time = asyncio.Lock()

    async def take(self) -> bool:
        """Store one sample now; False when the view is not ready (nothing stored)."""
        async with self._one_at_a_time:  # two at one moment: the second replaces the first
            view = self.view()
            if not view.ready:
                return False
            now = self.clock.now()
            rows = samples(view, self.waits(now - WAIT_WINDOW))
            async with self.database().write() as session:
                await add_samples(session, now, rows, keep_after=now - self.retention)
            return True

    async def _loop(self) -> None:
        while True:
            try:
                await self.take()
            except asyncio.CancelledError:
                raise
            except Exception:  # the history is a convenience; never stop the service
                log.exception("could not store a history sample; trying again later")
            await self.clock.sleep(self.interval)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="fleet-history")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
