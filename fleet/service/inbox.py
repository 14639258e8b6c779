"""The loop's inbox: what the API, the members and the loop's own effects tell the core.

Theory of operation: API handlers write to the database first and then post
(:class:`Mailbox`) what changed (:class:`Submitted` jobs, :class:`Cancel` requests); member
backends post what happened in the members (:class:`FromMember`);
administration posts work that needs the state to itself
(:class:`Exclusive`).  Each iteration of the loop takes what was posted and
:func:`take` applies it to the core through :func:`fleet.core.events.apply`,
returning data — the transitions, the jobs to delete in members, the
cancellation intents handled, the new jobs and the exclusive work to run —
for the journal and the effects.  A member's report goes through the
failover book first (:func:`member_report`): the news of an old copy is
failover's, not the core's; a member's node list (:class:`NodesObserved`)
is not the core's either: the last one of each member is handed to the loop,
which builds the member's cells again from it
(:func:`fleet.service.admin.nodes_observed`).  What the loop's own member calls came to
(:mod:`fleet.service.effects`) comes back the same way, as core events
(:func:`outcomes`).  Nothing here does I/O.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.clusters.base import (
    JobFinished,
    JobRestarting,
    JobStarted,
    JobStopped,
    MemberEvent,
    MemberReadiness,
    NodeHealth,
    NodesObserved,
)
from fleet.core import events
from fleet.core.failover import Due, FailoverBook
from fleet.core.jobs import Job
from fleet.core.lifecycle import JobState
from fleet.core.state import SchedulerState, Transition
from fleet.service.effects import Conflicted, Created, NotCreated, Outcome

log = logging.getLogger("fleet.service.inbox")


@dataclass(frozen=True, slots=True)
class Submitted:
    """Jobs stored as Queued (``seq`` is the row id)."""

    jobs: tuple[Job, ...]


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel job ``key``; ``intent``: the stored request, marked done once handled."""

    key: str
    reason: str
    intent: int | None = None


@dataclass(frozen=True, slots=True)
class FromMember:
    """What member ``cluster`` reported."""

    cluster: str
    event: MemberEvent


@dataclass(frozen=True, slots=True)
class Exclusive:
    """Work that needs the loop's state to itself (administration, :mod:`fleet.service.admin`)."""

    work: Callable[[Any], Awaitable[Any]]
    done: asyncio.Future[Any]


Item = Submitted | Cancel | FromMember | Exclusive


class Mailbox:
    """Where items wait for the loop's next iteration; every item wakes the loop."""

    def __init__(self) -> None:
        self._items: list[Item] = []
        self._taken: list[Item] = []  # the items of the iteration that runs
        self._abandoned: Exception | None = None
        self.wake = asyncio.Event()  # set when an item came
        self.idle = asyncio.Event()  # set while the loop waits with nothing to do

    def post(self, item: Item) -> None:
        if isinstance(item, Exclusive) and self._abandoned is not None:
            raise self._abandoned
        self._items.append(item)
        self.wake.set()

    def take(self) -> list[Item]:
        """The items posted since the last take (the iteration that starts handles them)."""
        self.wake.clear()
        self._taken, self._items = self._items, []
        return self._taken

    def abandon(self, error: Exception) -> None:
        """Fail the exclusive work that will never run with ``error`` (and any posted later)."""
        self._abandoned = error
        for item in [*self._taken, *self._items]:
            if isinstance(item, Exclusive) and not item.done.done():
                item.done.set_exception(error)
        self._items.clear()
        self._taken = []

    @property
    def quiet(self) -> bool:
        """Whether the loop waits with nothing to do."""
        return self.idle.is_set() and not self.wake.is_set()

    async def until_quiet(self) -> None:
        """Wait until the loop has handled everything posted and waits again."""
        while not self.quiet:
            await self.idle.wait()
            await asyncio.sleep(0)


@dataclass(slots=True)
class Taken:
    """What :func:`take` did with the items of one iteration."""

    #: new jobs, in submission order
    submitted: list[Job] = field(default_factory=list)
    changes: list[Transition] = field(default_factory=list)
    #: (job, cluster) to delete in members
    deletes: list[tuple[str, str]] = field(default_factory=list)
    #: cancellation intents handled
    done: list[int] = field(default_factory=list)
    exclusive: list[Exclusive] = field(default_factory=list)
    #: cluster -> the last node list it observed
    observed: dict[str, NodesObserved] = field(default_factory=dict)


def moves(outcomes: Sequence[events.Outcome]) -> list[Transition]:
    """The job transitions among an event's outcomes."""
    return [o for o in outcomes if isinstance(o, Transition)]


def take(state: SchedulerState, book: FailoverBook, items: Sequence[Item]) -> Taken:
    """Apply ``items`` to the core (and what members said to the failover book)."""
    taken = Taken()
    new = sorted(
        (job for item in items if isinstance(item, Submitted) for job in item.jobs),
        key=lambda job: job.seq,
    )
    for job in new:
        if job.key in state.phase:
            continue
        events.apply(state, events.Submitted(job))
        taken.submitted.append(job)
    for item in items:
        if isinstance(item, Cancel):
            if item.intent is not None:
                taken.done.append(item.intent)
            run = state.running.get(item.key)
            try:
                out = events.apply(state, events.Cancelled(item.key, item.reason))
            except (KeyError, ValueError):
                continue  # finished or cancelled meanwhile
            if run is not None:
                taken.deletes.append((item.key, run.cluster))
            taken.changes += moves(out)
        elif isinstance(item, FromMember) and isinstance(item.event, NodesObserved):
            taken.observed[item.cluster] = item.event
        elif isinstance(item, FromMember):
            # Only a node going bad preempts (and so deletes) running jobs.
            held = (
                {k: r.cluster for k, r in state.running.items()}
                if isinstance(item.event, NodeHealth)
                else {}
            )
            moved = member_report(state, book, item.cluster, item.event)
            taken.changes += moved
            taken.deletes += [
                (t.job, held[t.job]) for t in moved if t.new is JobState.PREEMPTED and t.job in held
            ]
        elif isinstance(item, Exclusive):
            taken.exclusive.append(item)
    return taken


async def run_exclusive(work: Sequence[Exclusive], loop: Any) -> None:
    """Run each exclusive work on ``loop`` in order; its caller gets its result or error."""
    for item in work:
        if item.done.done():
            continue
        try:
            result = await item.work(loop)
        except Exception as e:  # the caller gets it
            if not item.done.done():
                item.done.set_exception(e)
        else:
            if not item.done.done():
                item.done.set_result(result)


def failed_over(state: SchedulerState, due: Sequence[Due]) -> list[Transition]:
    """Queue the jobs failover found due again elsewhere; their transitions."""
    changes: list[Transition] = []
    for d in due:
        log.warning("%s: %s", d.key, d.reason)
        changes += moves(events.apply(state, events.FailedOver(d.key, d.reason)))
    return changes


def member_report(
    state: SchedulerState, book: FailoverBook, cluster: str, event: MemberEvent
) -> list[Transition]:
    """Apply what member ``cluster`` reported, through the failover book, to the core."""
    try:
        if isinstance(event, MemberReadiness):
            book.member_ready(cluster, event.ready, event.reason)
            events.apply(state, events.ClusterReadiness(cluster, event.ready))
        elif isinstance(event, NodeHealth):
            book.node_health(cluster, event.node, event.healthy)
            health = events.NodeHealthChanged(cluster, event.node, event.healthy)
            return moves(events.apply(state, health))
        elif isinstance(event, JobRestarting):
            book.job_restarting(cluster, event.key, event.restarting, event.reason, event.at, state)
        elif isinstance(event, JobStopped):
            if book.job_stopped(cluster, event.key, state):
                return moves(events.apply(state, events.MemberJobStopped(event.key)))
        elif isinstance(event, NodesObserved):
            pass  # the loop's, not the core's (take)
        elif not book.job_report(cluster, event.key, state):
            pass  # the old copy of a job that failed over
        elif isinstance(event, JobStarted):
            return moves(events.apply(state, events.MemberJobStarted(event.key)))
        elif isinstance(event, JobFinished):
            finished = events.MemberJobFinished(event.key, event.succeeded, event.reason)
            return moves(events.apply(state, finished))
    except (KeyError, ValueError) as e:
        log.warning("ignored %s from %s: %s", event, cluster, e)
    return []


def outcomes(state: SchedulerState, acted: Sequence[Outcome]) -> tuple[list[Transition], list[Due]]:
    """Apply what the loop's member calls came to; the transitions, and the jobs that
    go elsewhere because another object holds their name (failover's records)."""
    changes: list[Transition] = []
    conflicts: list[Due] = []
    for outcome in acted:
        if isinstance(outcome, Conflicted):
            # Another object holds the name there: never overwrite it, go elsewhere.
            why = f"not created in {outcome.cluster}: {outcome.message}"
            changes += moves(events.apply(state, events.FailedOver(outcome.key, why)))
            conflicts.append(Due(outcome.key, outcome.cluster, why, None))
        elif isinstance(outcome, NotCreated):
            failed = events.DispatchFailed(outcome.key, outcome.error)
            changes += moves(events.apply(state, failed))
        elif isinstance(outcome, Created) and state.phase.get(outcome.key) is JobState.ADMITTED:
            changes += moves(events.apply(state, events.Dispatched(outcome.key)))
    return changes, conflicts
