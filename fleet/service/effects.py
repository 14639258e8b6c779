"""The loop's effects: member calls, whose results come back as data.

Theory of operation: once the journal has stored what the core decided, the
loop acts on the members: :class:`Create` a job where the core placed it
(with its pods' nodes and GPUs), :class:`Delete` one, or :class:`Resize` a
running job whose pods changed.  :func:`act` makes the calls and returns
what happened — the intents carried out and an :data:`Outcome` per create —
without touching the core's state: the loop hands the outcomes to the inbox
(:func:`fleet.service.inbox.outcomes`), which turns them into core events
(``Dispatched``, ``DispatchFailed``, ``FailedOver``).  Creating is idempotent
in a member (the same uid is a no-op), so a restart does it again safely; a
delete that fails keeps its intent open and is done again at the next start;
a resize that fails is logged (the job is created again with its pods at the
next start).  The calls run concurrently, up to :data:`CONCURRENT_ACTIONS`
at once (a member call is a round trip to its API server; one after the
other, they bounded dispatch at one job per round trip), but the actions
of one job run in order, and what happened comes back in the order of the
actions, so the core sees the same events whichever call ends first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fleet.clusters.base import ClusterConflict, ClusterError, DispatchedJob, MemberCluster
from fleet.core.state import Running, SchedulerState
from fleet.store import jobs as job_rows

log = logging.getLogger("fleet.service.effects")

#: Member calls in flight at once (each waits on a member's API server).
CONCURRENT_ACTIONS = 32

#: A span of the loop's tracer: name and attributes -> context manager.
Span = Callable[..., contextlib.AbstractContextManager[Any]]


@dataclass(frozen=True, slots=True)
class Create:
    """Create job ``head`` in its member (``intent``: the intent it carries out)."""

    intent: int | None
    head: job_rows.JobHead
    manifest: dict[str, Any]
    started: float | None = None  # when it started running, before a restart


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete job ``key`` in member ``cluster``."""

    intent: int | None
    key: str
    cluster: str


@dataclass(frozen=True, slots=True)
class Resize:
    """Give running job ``head`` its pods as they are now (it grew or shrank)."""

    head: job_rows.JobHead
    manifest: dict[str, Any]
    intent: None = None


Action = Create | Delete | Resize


@dataclass(frozen=True, slots=True)
class Created:
    """Job ``key`` was created in ``cluster``."""

    key: str
    cluster: str


@dataclass(frozen=True, slots=True)
class Conflicted:
    """Another object holds job ``key``'s name in ``cluster``: it goes elsewhere."""

    key: str
    cluster: str
    message: str


@dataclass(frozen=True, slots=True)
class NotCreated:
    """Creating job ``key`` in ``cluster`` failed (``error``)."""

    key: str
    cluster: str
    error: str


Outcome = Created | Conflicted | NotCreated


@dataclass(slots=True)
class Acted:
    """What :func:`act` did: the creates' outcomes and the intents carried out."""

    outcomes: list[Outcome] = field(default_factory=list)
    done: list[int] = field(default_factory=list)


def key_of(head: job_rows.JobHead) -> str:
    return f"{head.namespace}/{head.name}"


def dispatched(
    head: job_rows.JobHead, manifest: dict[str, Any], run: Running, started: float | None
) -> DispatchedJob:
    """The job as a member creates it: the stored manifest and the core's placement."""
    return DispatchedJob(
        key=key_of(head),
        uid=head.uid,
        cluster=run.cluster,
        queue=head.queue,
        pods=tuple(p for u in run.units for p in u.pods),
        manifest=manifest,
        started=started,
    )


async def act(
    actions: Sequence[Action],
    state: SchedulerState,
    members: Mapping[str, MemberCluster],
    span: Span,
) -> Acted:
    """Carry out ``actions`` on the members, where the core's state places the jobs.

    Up to :data:`CONCURRENT_ACTIONS` calls are in flight at once; the actions
    of one job run one after the other, in order.  What happened is returned
    in the order of ``actions``, whatever order the calls ended in.
    """
    limit = asyncio.Semaphore(CONCURRENT_ACTIONS)
    last: dict[str, asyncio.Task[_Done]] = {}  # job key -> its latest action's task
    tasks: list[asyncio.Task[_Done]] = []
    for action in actions:
        key = key_of(action.head) if not isinstance(action, Delete) else action.key
        task = asyncio.create_task(
            _act_one(action, state, members, span, limit, last.get(key)), name=f"act {key}"
        )
        last[key] = task
        tasks.append(task)
    acted = Acted()
    try:
        for task in tasks:  # in the actions' order
            outcome, done = await task
            if outcome is not None:
                acted.outcomes.append(outcome)
            if done is not None:
                acted.done.append(done)
    except BaseException:
        for task in tasks:  # nothing goes on behind a loop that stops
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return acted


#: What one action did: its create's outcome, and the intent it carried out.
_Done = tuple[Outcome | None, int | None]


async def _act_one(
    action: Action,
    state: SchedulerState,
    members: Mapping[str, MemberCluster],
    span: Span,
    limit: asyncio.Semaphore,
    before: asyncio.Task[_Done] | None,
) -> _Done:
    if before is not None:
        await asyncio.wait([before])  # the job's earlier action first (its result is not ours)
    async with limit:
        return await _call(action, state, members, span)


async def _call(
    action: Action,
    state: SchedulerState,
    members: Mapping[str, MemberCluster],
    span: Span,
) -> _Done:
    outcome: Outcome | None = None
    if isinstance(action, Create):
        key = key_of(action.head)
        run = state.running.get(key)
        member = None if run is None else members.get(run.cluster)
        if run is not None and member is not None:
            try:
                with span("dispatch", job=key, cluster=run.cluster):
                    job = dispatched(action.head, action.manifest, run, action.started)
                    with span("member create", job=key, cluster=run.cluster):
                        await member.create(job)
            except ClusterConflict as e:
                outcome = Conflicted(key, run.cluster, e.message)
            except ClusterError as e:
                outcome = NotCreated(key, run.cluster, str(e))
            else:
                outcome = Created(key, run.cluster)
    elif isinstance(action, Resize):
        key = key_of(action.head)
        run = state.running.get(key)
        member = None if run is None else members.get(run.cluster)
        if run is not None and member is not None:
            try:
                await member.resize(dispatched(action.head, action.manifest, run, None))
            except ClusterError as e:  # created again with its pods at the next start
                log.warning("could not resize %s in %s: %s", key, run.cluster, e)
    else:
        member = members.get(action.cluster)
        if member is not None:
            try:
                with span("member delete", job=action.key, cluster=action.cluster):
                    await member.delete(action.key)
            except ClusterError as e:
                log.warning("could not delete %s in %s: %s", action.key, action.cluster, e)
                return None, None  # the intent stays open and is redone at start
    return outcome, action.intent
