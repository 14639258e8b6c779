"""The scheduler loop: the one writer of the core's state.

Theory of operation (DESIGN.md section 6: events in, decisions out, one
writer; decide, persist, act, record):

* **Start.**  The quota tree and the member clusters come from the database
  (on first start, from the files the settings name, then stored).  The
  core's state is rebuilt exactly (:mod:`fleet.core.snapshot`): running jobs
  at their recorded cells, preempted jobs waiting for their pods to stop,
  pending jobs in submission order.  Intents the previous run recorded but
  did not finish are done again (creating a job in a member is idempotent),
  and jobs that run in simulated members (which live in this process) are
  created there again.
* **Inbox.**  API handlers write to the database first and then hand the loop
  what changed (new job ids, cancellations); member backends hand it what
  happened in the members.  Every item wakes the loop; many items coalesce
  into one iteration.
* **One iteration.**  Apply the inbox to the core through
  :func:`fleet.core.events.apply` and persist the transitions; run a
  scheduling cycle in a worker thread (the event loop keeps serving the API);
  persist every decision, transition and intent in one transaction; only then
  act on the members (create, delete) and record the outcomes; publish an
  immutable :class:`LoopView` for the API.
* **Time** comes from the injected :class:`fleet.clock.Clock`: a cycle runs
  every ``schedule_interval`` seconds of that clock and right after changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ParamSpec, TypeVar

from fleet.clock import Clock
from fleet.clusters.base import (
    ClusterConflict,
    ClusterError,
    DispatchedJob,
    JobFinished,
    JobStarted,
    JobStopped,
    MemberCluster,
    MemberEvent,
    MemberReadiness,
    NodeHealth,
)
from fleet.core import events, snapshot
from fleet.core.cycle import Admit, Decision, Preempt, Wait, cycle
from fleet.core.jobs import Job
from fleet.core.lifecycle import HOLDING, TERMINAL, JobState
from fleet.core.placement import Placer
from fleet.core.quota import QuotaTree
from fleet.core.resources import Resources, format_quantity
from fleet.core.state import Running, SchedulerState, Transition
from fleet.service.collector import cycle_paused
from fleet.service.failover import Due, Failover
from fleet.service.telemetry import Telemetry
from fleet.store import jobs as job_rows
from fleet.store.database import Database, Session

log = logging.getLogger("fleet.service.loop")

_P = ParamSpec("_P")
_T = TypeVar("_T")
#: Member actions taken between two turns of the event loop.
_ACTIONS_PER_TURN = 64

# The published view ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class QueueView:
    """One node of the quota tree as ``kubectl get queue`` would show it."""

    name: str
    parent: str | None
    leaf: bool
    namespaces: tuple[str, ...]
    min: Mapping[str, str]
    max: Mapping[str, str] | None
    used: Mapping[str, str]
    borrowed: Mapping[str, str]
    admitted: int
    pending: int


@dataclass(frozen=True, slots=True)
class PendingView:
    """A pending job's place in its queue and why it waits."""

    job: str
    priority: int
    priority_class: str
    request: Mapping[str, str]
    reason: str


@dataclass(frozen=True, slots=True)
class ClusterGpus:
    """GPUs of one member cluster, and per virtual cluster: (total, used) each."""

    total: int
    used: int
    vcs: Mapping[str, tuple[int, int]]


@dataclass(frozen=True, slots=True)
class LoopView:
    """What the loop knew after its last iteration (immutable; the API reads it)."""

    ready: bool = False
    time: float = 0.0
    queues: tuple[QueueView, ...] = ()
    pending: Mapping[str, tuple[PendingView, ...]] = field(default_factory=dict)
    reasons: Mapping[str, str] = field(default_factory=dict)
    clusters: Mapping[str, ClusterGpus] = field(default_factory=dict)
    #: cluster -> virtual cluster -> its virtual cells that bad nodes leave no cell for
    doomed: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: 1 for the first view published, then one more per view (the change stream's ids)
    version: int = 0
    #: the last views' versions with the jobs (namespace/name) that changed in each:
    #: submitted, moved to another state, or given another waiting reason; oldest first
    recent: tuple[tuple[int, tuple[str, ...]], ...] = ()
    #: member clusters being drained (removed once their jobs are gone)
    draining: frozenset[str] = frozenset()
    #: member clusters that are not ready (nothing is dispatched to them)
    unready: frozenset[str] = frozenset()


#: Event-loop turns the loop gives members' watches before writing deferred records.
_TURNS_BEFORE_FLUSH = 2

#: Views whose changed jobs the published view remembers (LoopView.recent).
RECENT_VIEWS = 256


def _quantities(values: Resources | Mapping[str, int]) -> dict[str, str]:
    return {r: format_quantity(r, v) for r, v in sorted(values.items()) if v}


def _limits(values: Resources | None) -> dict[str, str] | None:
    """A node's ``max`` as quantities, a limit of 0 included (None: no limit)."""
    if values is None:
        return None
    return {r: format_quantity(r, v) for r, v in sorted(values.items())}


def _paused_cycle(state: SchedulerState) -> list[Decision]:
    """The scheduling cycle, with the collector paused (:mod:`~fleet.service.collector`)."""
    with cycle_paused():
        return cycle(state)


# Inbox items ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Submitted:
    jobs: tuple[Job, ...]  # stored; ``seq`` is the row id


@dataclass(frozen=True, slots=True)
class _Cancel:
    key: str
    reason: str
    intent: int | None = None  # the stored request, marked done once handled


@dataclass(frozen=True, slots=True)
class _FromMember:
    cluster: str
    event: MemberEvent


@dataclass(frozen=True, slots=True)
class _Exclusive:
    """Work that needs the loop's state to itself (administration, :mod:`fleet.service.admin`)."""

    work: Callable[[SchedulerLoop], Awaitable[Any]]
    done: asyncio.Future[Any]


_Item = _Submitted | _Cancel | _FromMember | _Exclusive
#: Extra writes for the transaction of :meth:`SchedulerLoop._record`.
Also = Callable[[Session], Awaitable[None]]


class SchedulerLoop:
    """Owns the core's state; see the module docstring."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        tree: QuotaTree,
        placers: Mapping[str, Placer],
        members: Mapping[str, MemberCluster],
        *,
        interval: float,
        threaded: bool = True,
        vc_sizes: Mapping[str, Mapping[str, int]] | None = None,
        write_behind: bool = False,
    ) -> None:
        self.db = db
        self.clock = clock
        self.state = SchedulerState(tree, placers)
        self.members = dict(members)
        self.interval = interval
        #: Run the cycle in a worker thread (the API stays responsive); off on a
        #: virtual clock, where everything must happen in the event loop's order.
        self.threaded = threaded
        #: What the loop records without acting on it (members' reports, jobs'
        #: moves to Dispatched) waits for its next transaction even while it
        #: waits, instead of being written before; whoever reads the store calls
        #: :meth:`flush` first.  For a store nobody else reads (a replay's).
        self.write_behind = write_behind
        #: cluster -> virtual cluster -> GPUs it is guaranteed there
        self.vc_sizes = {k: dict(v) for k, v in (vc_sizes or {}).items()}
        self._view = LoopView()
        #: the state changed since the view was published (it is made when read)
        self._stale = False
        #: the view was read while stale: publish it at the end of this iteration
        self._wanted = False
        self._iterating = False
        self._thread = threading.get_ident()  # the event loop's: views are made there
        self._waiting_views = 0  # callers of next_view waiting for the next one
        self._inbox: list[_Item] = []
        self._abandoned: Exception | None = None  # see abandon()
        self._taken: list[_Item] = []  # the items of the iteration that runs
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()  # set while the loop waits with nothing to do
        self._task: asyncio.Task[None] | None = None
        self._watchers: list[asyncio.Task[None]] = []
        self._ids: dict[str, int] = {}  # job key -> row id
        self.failover = Failover(db)
        self.iterations = 0
        #: the quota tree in force as its YAML document (the service sets it)
        self.tree_document = ""
        #: run at the end of every iteration (the service's administration, fleet.service.admin)
        self.after_iteration: Callable[[SchedulerLoop], Awaitable[None]] | None = None
        self._changed: set[str] = set()  # jobs changed since the last published view
        #: what acting on members left to record, written with the next transaction
        self._deferred: list[_Deferred] = []
        #: job key -> (its record, its view) in the last published view, to reuse
        self._pending_views: dict[str, tuple[Job, PendingView]] = {}
        self._published = asyncio.Event()  # set (and replaced) when a view is published
        #: traces and metrics (fleet.service.telemetry; the API sets it before the first iteration)
        self.telemetry: Telemetry | None = None

    # Lifecycle --------------------------------------------------------------------------
    async def start(
        self, prepare: Callable[[SchedulerLoop], Awaitable[None]] | None = None
    ) -> None:
        """Rebuild the state from the database (then ``prepare`` it), redo open intents,
        start the loop."""
        await self._rebuild()
        await self.failover.load(self._ids, self.clock.now())
        if prepare is not None:
            await prepare(self)
        for name, member in self.members.items():
            self._watchers.append(asyncio.create_task(self._watch(name, member)))
        await self._redo_intents()
        self._publish()
        self._stale = False
        self._announce()
        self._task = asyncio.create_task(self._run(), name="fleet-scheduler-loop")

    async def stop(self) -> None:
        tasks = [t for t in (self._task, *self._watchers) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._task = None
        self._watchers.clear()
        try:
            await self.flush()
        except Exception:  # the open intents are carried out again at the next start
            log.exception("could not record what the members were told before stopping")

    def abandon(self, error: Exception) -> None:
        """After :meth:`stop`: fail the exclusive work that will never run with ``error``
        (and any asked for later)."""
        self._abandoned = error
        for item in [*self._taken, *self._inbox]:
            if isinstance(item, _Exclusive) and not item.done.done():
                item.done.set_exception(error)
        self._inbox.clear()
        self._taken = []

    # What the API and the members tell the loop ----------------------------------------
    def submitted(self, jobs: Iterable[Job]) -> None:
        """Jobs stored as Queued (their ``seq`` is their row id)."""
        self._post(_Submitted(tuple(jobs)))

    async def cancel(self, job_id: int, key: str, reason: str = "cancelled by the user") -> None:
        """Store the request to cancel job ``key`` (row ``job_id``), then hand it to the loop.

        The request is a ``cancel`` intent: once this returns, a crash does not
        lose it (the next start carries it out).
        """
        async with self.db.write() as session:
            (intent,) = await job_rows.insert_intents(
                session, [(job_id, "cancel", "")], self.clock.now()
            )
        self._post(_Cancel(key, reason, intent))

    def cancel_stored(self, intent: int, key: str, reason: str = "cancelled by the user") -> None:
        """Hand the loop the cancellation of ``key`` that another replica stored as ``intent``."""
        self._post(_Cancel(key, reason, intent))

    async def exclusive(self, work: Callable[[SchedulerLoop], Awaitable[Any]]) -> Any:
        """Run ``work(loop)`` in the loop's next iteration, in order with the inbox; its result.

        ``work`` has the state to itself (no cycle runs meanwhile) and changes
        it only through :func:`fleet.core.events.apply`; what it raises is
        raised here.
        """
        if self._abandoned is not None:
            raise self._abandoned
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._post(_Exclusive(work, done))
        return await done

    def _post(self, item: _Item) -> None:
        self._inbox.append(item)
        self._wake.set()

    def add_member(self, name: str, member: MemberCluster) -> None:
        """Act on and watch a member added while running (its placer comes by event)."""
        self.members[name] = member
        self._watchers.append(asyncio.create_task(self._watch(name, member)))

    async def _watch(self, name: str, member: MemberCluster) -> None:
        async for event in member.watch():
            self._post(_FromMember(name, event))

    # The loop ------------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            try:
                await self.iterate()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad iteration must not stop scheduling
                log.exception("scheduler iteration failed; retrying after the interval")
            await self._sleep()

    async def quiet(self) -> None:
        """Wait until the loop has handled everything it was told and waits again."""
        while not (self._idle.is_set() and not self._wake.is_set()):
            await self._idle.wait()
            await asyncio.sleep(0)

    def is_quiet(self) -> bool:
        """Whether the loop waits with nothing to do (what :meth:`quiet` waits for)."""
        return self._idle.is_set() and not self._wake.is_set()

    async def _sleep(self) -> None:
        if self._wake.is_set():
            return
        if self._deferred and not self.write_behind:
            # Members often answer at once (a simulated one reports a job it
            # created as started): let their watches post it, and record it with
            # what was deferred in one transaction of the next iteration.
            for _ in range(_TURNS_BEFORE_FLUSH):
                await asyncio.sleep(0)
                if self._wake.is_set():
                    return
            try:
                await self.flush()  # nothing waits unwritten while the loop waits
            except Exception:  # kept for the next transaction
                log.exception("could not record what the members were told; retrying")
            if self._wake.is_set():
                return
        self._idle.set()
        waker = asyncio.create_task(self._wake.wait())
        timer = asyncio.create_task(self.clock.sleep(self.interval))
        try:
            await asyncio.wait({waker, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._idle.clear()
            for task in (waker, timer):
                task.cancel()
            for task in (waker, timer):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def iterate(self) -> list[Decision]:
        """One iteration: inbox, cycle, persist, act, publish; the cycle's decisions."""
        with self._span("scheduler iteration"):
            return await self._iterate()

    async def _iterate(self) -> list[Decision]:
        self._iterating = True
        try:
            return await self._iterate_once()
        finally:
            self._iterating = False

    async def _iterate_once(self) -> list[Decision]:
        self._wake.clear()
        items, self._inbox = self._inbox, []
        self._taken = items  # for abandon(), should the iteration be cancelled
        now = self.clock.now()
        events.apply(self.state, events.ClockAdvanced(max(now, self.state.now)))
        await self._apply_inbox(items)
        await self._fail_over()
        decisions = await self._cycle(now)
        actions = await self._persist(decisions)
        if not self.write_behind:
            await self.flush()  # what the inbox deferred, when the cycle wrote nothing
        await self._act(actions)
        if self.after_iteration is not None:
            await self.after_iteration(self)
        self._remember(decisions)
        if self._wanted or self._waiting_views:
            await self._off_loop(self._publish)
            self._announce()
        else:
            self._stale = True
        self.iterations += 1
        return decisions

    async def _cycle(self, now: float) -> list[Decision]:
        """The scheduling cycle, in a span that carries its outcome (and metrics)."""
        with self._span("scheduling cycle") as span:
            started = time.perf_counter()
            decisions = await self._off_loop(_paused_cycle, self.state)
            if self.telemetry is not None:
                self.telemetry.cycle_done(span, decisions, time.perf_counter() - started, now)
        return decisions

    def _span(self, name: str, **attributes: str) -> contextlib.AbstractContextManager[Any]:
        """A span of the telemetry's tracer (nothing without telemetry)."""
        if self.telemetry is None:
            return contextlib.nullcontext()
        return self.telemetry.tracer.start_as_current_span(name, attributes=attributes)

    async def _off_loop(self, work: Callable[_P, _T], *args: _P.args, **kw: _P.kwargs) -> _T:
        """Run CPU-bound work on the core's state in the worker thread when ``threaded``.

        The state has one writer, this loop, which waits for the work to end;
        meanwhile the event loop keeps answering the API (which reads only
        the published view).
        """
        if self.threaded:
            return await asyncio.to_thread(work, *args, **kw)
        return work(*args, **kw)

    # Start-up --------------------------------------------------------------------------
    async def _rebuild(self) -> None:
        holding = [s.value for s in HOLDING]
        async with self.db.read() as session:
            rows = await job_rows.in_states(
                session, [*holding, JobState.PREEMPTED.value, JobState.QUEUED.value]
            )
        running: list[snapshot.RunningRecord] = []
        stopping: list[Job] = []
        pending: list[Job] = []
        for row in rows:
            job = snapshot.job_from_plain(row.record, seq=row.id)
            self._ids[job.key] = row.id
            if row.state in holding and row.cluster is not None:
                units = tuple(snapshot.unit_from_plain(job, u) for u in row.units)
                running.append(snapshot.RunningRecord(job, row.cluster, JobState(row.state), units))
            elif row.state == JobState.PREEMPTED.value:
                stopping.append(job)
            else:
                pending.append(job)
        records = snapshot.Snapshot(
            self.clock.now(), tuple(pending), tuple(stopping), tuple(running)
        )
        self.state = snapshot.restore(records, self.state.tree, self.state.placers)
        log.info(
            "state rebuilt: %d running, %d preempted, %d pending",
            len(running),
            len(stopping),
            len(pending),
        )

    async def _redo_intents(self) -> None:
        """Create every holding job in its member again, and redo unfinished deletions.

        Both are idempotent in a member (the same uid is a no-op), so this is
        safe whether or not the previous run got to act: a crash between
        "decided" and "created" neither loses nor doubles a job, and members
        that live in this process (simulated ones) get their jobs back, still
        counted from when they started.  Cancellations users asked for that
        the previous run did not carry out go to the inbox.
        """
        async with self.db.read() as session:
            intents = await job_rows.open_intents(session)
            holding = await job_rows.in_states(session, [s.value for s in HOLDING])
            started = await job_rows.last_event_times(
                session, [r.id for r in holding], JobState.RUNNING.value
            )
            deleting = {
                r.id: r
                for r in await job_rows.by_ids(
                    session, sorted({i.job_id for i in intents if i.kind in ("delete", "cancel")})
                )
            }
        actions: list[_Action] = [
            _Create(
                None,
                job_rows.JobHead(r.id, r.uid, r.namespace, r.name, r.queue, r.spec_hash, r.state),
                r.manifest,
                started.get(r.id),
            )
            for r in holding
        ]
        for intent in intents:
            row = deleting.get(intent.job_id)
            if row is None:
                continue
            key = f"{row.namespace}/{row.name}"
            if intent.kind == "delete":
                actions.append(_Delete(intent.id, key, intent.cluster))
            elif intent.kind == "cancel":  # requested before the previous run stopped
                self._post(_Cancel(key, "cancelled by the user", intent.id))
        await self._act(actions)
        # Every holding job was created again above; open create intents are done.
        creates = [i.id for i in intents if i.kind == "create"]
        await self._record([], self.clock.now(), done=creates)

    # Applying what happened -------------------------------------------------------------
    async def _apply_inbox(self, items: Sequence[_Item]) -> None:
        if not items:
            return
        now = self.clock.now()
        changes: list[Transition] = []
        deletes: list[tuple[str, str]] = []
        new = sorted(
            (job for item in items if isinstance(item, _Submitted) for job in item.jobs),
            key=lambda job: job.seq,
        )
        for job in new:
            if job.key in self.state.phase:
                continue
            self._ids[job.key] = job.seq
            events.apply(self.state, events.Submitted(job))
            self._changed.add(job.key)
            if self.telemetry is not None:
                self.telemetry.queued([job.key], now)
        done: list[int] = []  # cancellation requests handled
        for item in items:
            if isinstance(item, _Cancel):
                if item.intent is not None:
                    done.append(item.intent)
                run = self.state.running.get(item.key)
                try:
                    out = events.apply(self.state, events.Cancelled(item.key, item.reason))
                except (KeyError, ValueError):
                    continue  # finished or cancelled meanwhile
                if run is not None:
                    deletes.append((item.key, run.cluster))
                changes += _moves(out)
            elif isinstance(item, _FromMember):
                # Only a node going bad preempts (and so deletes) running jobs.
                held = (
                    {k: r.cluster for k, r in self.state.running.items()}
                    if isinstance(item.event, NodeHealth)
                    else {}
                )
                moved = self._from_member(item)
                changes += moved
                deletes += [
                    (t.job, held[t.job])
                    for t in moved
                    if t.new is JobState.PREEMPTED and t.job in held
                ]
        exclusive = any(isinstance(item, _Exclusive) for item in items)
        # Written now: intents to act on, work that reads the rows, or failover's
        # notes (written next, in a transaction of their own: the log stays in order).
        if deletes or done or exclusive or self.failover.noting:
            intents = await self._record(changes, now, deletes=deletes, done=done)
            await self._act(
                [
                    _Delete(intent, key, cluster)
                    for intent, (key, cluster) in zip(intents, deletes, strict=True)
                ]
            )
        elif changes:
            # What members reported (starts, ends) goes with the cycle's transaction,
            # or is written on its own before the iteration ends (_iterate_once).
            self._defer(changes, (), now)
        for item in items:
            if isinstance(item, _Exclusive) and not item.done.done():
                try:
                    result = await item.work(self)
                except Exception as e:  # the caller gets it
                    if not item.done.done():
                        item.done.set_exception(e)
                else:
                    if not item.done.done():
                        item.done.set_result(result)

    def _from_member(self, item: _FromMember) -> list[Transition]:
        event = item.event
        state = self.state
        if not self.failover.observe(item.cluster, event, state):
            return []  # failover's business (restarts, old copies)
        try:
            if isinstance(event, JobStarted):
                return _moves(events.apply(state, events.MemberJobStarted(event.key)))
            elif isinstance(event, JobFinished):
                finished = events.MemberJobFinished(event.key, event.succeeded, event.reason)
                return _moves(events.apply(state, finished))
            elif isinstance(event, JobStopped):
                return _moves(events.apply(state, events.MemberJobStopped(event.key)))
            elif isinstance(event, NodeHealth):
                health = events.NodeHealthChanged(item.cluster, event.node, event.healthy)
                return _moves(events.apply(state, health))
            elif isinstance(event, MemberReadiness):
                events.apply(state, events.ClusterReadiness(item.cluster, event.ready))
        except (KeyError, ValueError) as e:
            log.warning("ignored %s from %s: %s", event, item.cluster, e)
        return []

    async def _fail_over(self) -> None:
        """Fail over jobs unhealthy for too long; purge old copies (:mod:`.failover`)."""
        now = self.clock.now()
        due = await self.failover.due(self.state, self._ids, now)
        changes: list[Transition] = []
        for d in due:
            log.warning("%s: %s", d.key, d.reason)
            changes += _moves(events.apply(self.state, events.FailedOver(d.key, d.reason)))
        if due:
            await self._record(changes, now, also=[self._failover_write(due, now)])
        done = await self.failover.purge(self.state, self.members)
        if done:
            await self._record([], now, done=done)

    def _failover_write(self, due: Sequence[Due], now: float) -> Also:
        """The failed-over jobs' narrowed records and purge intents, for :meth:`_record`."""

        async def write(session: Session) -> None:
            await self.failover.write(session, due, self.state, self._ids, now)

        return write

    # Persisting decisions ----------------------------------------------------------------
    async def _record(
        self,
        changes: Sequence[Transition],
        now: float,
        *,
        deletes: Sequence[tuple[str, str]] = (),
        done: Sequence[int] = (),
        also: Sequence[Also] = (),
    ) -> list[int | None]:
        """Write job transitions (state, units, events), deletion intents, the
        intents carried out and ``also``'s writes, in one transaction; the ids of
        the new intents."""
        if not changes and not deletes and not done and not also and not self._deferred:
            return []
        updates, log_entries = self._transition_rows(changes, now)
        wanted = [(self._ids.get(key), cluster) for key, cluster in deletes]
        async with self._write() as session:
            await job_rows.update_jobs(session, updates)
            await job_rows.insert_events(session, log_entries)
            made = iter(
                await job_rows.insert_intents(
                    session, [(i, "delete", c) for i, c in wanted if i is not None], now
                )
            )
            await job_rows.finish_intents(session, done, now)
            for write in also:
                await write(session)
        self._recorded(changes)
        return [None if i is None else next(made) for i, _ in wanted]

    def _transition_rows(
        self, changes: Sequence[Transition], now: float
    ) -> tuple[list[dict[str, Any]], list[job_rows.EventValues]]:
        """The job column changes and event log entries of ``changes``."""
        updates: list[dict[str, Any]] = []
        log_entries: list[job_rows.EventValues] = []
        for t in changes:
            row_id = self._ids.get(t.job)
            if row_id is None:
                continue
            updates.append(self._state_columns(row_id, t.job, t.new, now))
            log_entries.append(job_rows.EventValues(row_id, now, t.new.value, t.reason))
        return updates, log_entries

    def _recorded(self, changes: Sequence[Transition]) -> None:
        """What the loop does once ``changes`` are stored."""
        self._changed.update(t.job for t in changes)
        for t in changes:  # the loop forgets jobs that ended
            if t.new in TERMINAL:
                self._ids.pop(t.job, None)
                if self.telemetry is not None:
                    self.telemetry.forget([t.job])

    def _defer(self, changes: Sequence[Transition], done: Sequence[int], now: float) -> None:
        """Store ``changes`` and finish intents ``done`` with the loop's next transaction.

        For what creating jobs in members leaves to record (the jobs' moves to
        Dispatched and their create intents) and for what members reported
        (jobs started or ended), when nothing is to be acted on because of it.
        Until they are written, the intents are open, and a restart creates
        the jobs again (idempotently) and records them then, and members
        report again what they report; what the inbox brought is written
        with the cycle's decisions or on its own before the iteration ends,
        what creating left with the next iteration's first write or before
        the loop waits (:meth:`_sleep`).
        """
        updates, log_entries = self._transition_rows(changes, now)
        self._deferred.append(_Deferred(tuple(changes), updates, log_entries, tuple(done), now))

    @contextlib.asynccontextmanager
    async def _write(self) -> AsyncIterator[Session]:
        """A write transaction of the loop that starts with what was deferred (so a
        job's later moves follow its earlier ones); kept for the next one if it fails."""
        deferred, self._deferred = self._deferred, []
        try:
            async with self.db.write() as session:
                if deferred:
                    await job_rows.update_jobs(session, [u for d in deferred for u in d.updates])
                    await job_rows.insert_events(
                        session, [e for d in deferred for e in d.log_entries]
                    )
                    for d in deferred:
                        await job_rows.finish_intents(session, d.done, d.time)
                yield session
        except BaseException:
            self._deferred = deferred + self._deferred
            raise
        for d in deferred:
            self._recorded(d.changes)

    async def flush(self) -> None:
        """Write what the loop deferred (:meth:`_defer`), if anything."""
        if self._deferred:
            await self._record([], self.clock.now())

    def _state_columns(self, row_id: int, key: str, new: JobState, now: float) -> dict[str, Any]:
        """The columns of job ``key`` that change when it moves to ``new``."""
        columns: dict[str, Any] = {"id": row_id, "state": new.value, "updated_at": now}
        run = self.state.running.get(key)
        if new in HOLDING and run is not None:
            columns["cluster"] = run.cluster
            columns["mode"] = run.mode.value
            columns["units"] = [snapshot.unit_to_plain(u) for u in run.units]
        elif new not in HOLDING:
            columns["units"] = []
            if new is JobState.QUEUED:
                columns["cluster"] = None
                columns["mode"] = None
        return columns

    async def _persist(self, decisions: Sequence[Decision]) -> list[_Action]:
        """Write the cycle's decisions in one transaction; the actions they call for."""
        writes = await self._off_loop(self._decision_writes, decisions)
        if writes is None:
            return []
        updates, log_entries, planned, resized = writes
        now = self.state.now
        async with self._write() as session:
            await job_rows.update_jobs(session, updates)
            await job_rows.insert_events(session, log_entries)
            intents = await job_rows.insert_intents(
                session,
                [
                    (row_id, "create" if isinstance(d, Admit) else "delete", d.cluster)
                    for row_id, d in planned
                ],
                now,
            )
            admitted = {row_id for row_id, d in planned if isinstance(d, Admit)}
            heads = await job_rows.dispatch_heads(session, sorted(admitted | set(resized)))
        actions: list[_Action] = [
            _Create(intent, *heads[row_id])
            if isinstance(d, Admit)
            else _Delete(intent, d.job, d.cluster)
            for intent, (row_id, d) in zip(intents, planned, strict=True)
        ]
        return actions + [_Resize(*heads[r]) for r in sorted(set(resized)) if r in heads]

    def _decision_writes(self, decisions: Sequence[Decision]) -> _DecisionWrites | None:
        """The rows, events and intents the decisions call for (None: nothing to write)."""
        now = self.state.now
        updates: list[dict[str, Any]] = []
        log_entries: list[job_rows.EventValues] = []
        planned: list[tuple[int, Admit | Preempt]] = []  # (row id, decision) with an intent
        resized: list[int] = []
        for d in decisions:
            if not isinstance(d, Admit | Preempt):
                continue
            row_id = self._ids.get(d.job)
            if row_id is None:
                continue
            if isinstance(d, Admit):
                phase = self.state.phase.get(d.job, JobState.ADMITTED)
                updates.append({**self._state_columns(row_id, d.job, phase, now), "reason": ""})
                where = ", ".join(f"{p.pod}@{p.node}{list(p.gpus)}" for p in d.pods)
                if d.grown:
                    log_entries.append(
                        job_rows.EventValues(row_id, now, "Grew", f"{where} ({d.mode})")
                    )
                    resized.append(row_id)
                    continue
                message = f"admitted to {d.cluster} as {d.mode}: {where}"
                if d.victims:
                    message += f"; after {', '.join(d.victims)} stop"
                log_entries.append(
                    job_rows.EventValues(row_id, now, JobState.ADMITTED.value, message)
                )
                planned.append((row_id, d))
            elif d.unit:
                run = self.state.running.get(d.job)
                if run is not None:
                    units = [snapshot.unit_to_plain(u) for u in run.units]
                    updates.append({"id": row_id, "units": units})
                    resized.append(row_id)
                log_entries.append(
                    job_rows.EventValues(row_id, now, "Shrunk", d.reason, warning=True)
                )
            else:
                columns = self._state_columns(row_id, d.job, JobState.PREEMPTED, now)
                updates.append({**columns, "reason": d.reason})
                log_entries.append(
                    job_rows.EventValues(
                        row_id, now, JobState.PREEMPTED.value, d.reason, warning=True
                    )
                )
                planned.append((row_id, d))
        if not updates and not log_entries:
            return None
        return updates, log_entries, planned, resized

    # Acting on members ---------------------------------------------------------------------
    async def _act(self, actions: Sequence[_Action]) -> None:
        changes: list[Transition] = []
        done: list[int] = []  # intents carried out
        conflicts: list[Due] = []
        for number, action in enumerate(actions, 1):
            if number % _ACTIONS_PER_TURN == 0:
                await asyncio.sleep(0)  # let the API answer between long runs of actions
            if isinstance(action, _Create):
                head = action.head
                key = f"{head.namespace}/{head.name}"
                run = self.state.running.get(key)
                member = None if run is None else self.members.get(run.cluster)
                if run is not None and member is not None:
                    try:
                        with self._span("dispatch", job=key, cluster=run.cluster):
                            job = _dispatched(head, action.manifest, run, action.started)
                            with self._span("member create", job=key, cluster=run.cluster):
                                await member.create(job)
                    except ClusterConflict as e:
                        # Another object holds the name there: never overwrite it, go elsewhere.
                        why = f"not created in {run.cluster}: {e.message}"
                        changes += _moves(events.apply(self.state, events.FailedOver(key, why)))
                        conflicts.append(Due(key, run.cluster, why, None))
                        if self.telemetry is not None:
                            self.telemetry.dispatch_failed(run.cluster)
                    except ClusterError as e:
                        changes += _moves(
                            events.apply(self.state, events.DispatchFailed(key, str(e)))
                        )
                        if self.telemetry is not None:
                            self.telemetry.dispatch_failed(run.cluster)
                    else:
                        if self.state.phase.get(key) is JobState.ADMITTED:
                            changes += _moves(events.apply(self.state, events.Dispatched(key)))
            elif isinstance(action, _Resize):
                head = action.head
                key = f"{head.namespace}/{head.name}"
                run = self.state.running.get(key)
                member = None if run is None else self.members.get(run.cluster)
                if run is not None and member is not None:
                    try:
                        await member.resize(_dispatched(head, action.manifest, run, None))
                    except ClusterError as e:  # created again with its pods at the next start
                        log.warning("could not resize %s in %s: %s", key, run.cluster, e)
            else:
                member = self.members.get(action.cluster)
                if member is not None:
                    try:
                        with self._span("member delete", job=action.key, cluster=action.cluster):
                            await member.delete(action.key)
                    except ClusterError as e:
                        log.warning("could not delete %s in %s: %s", action.key, action.cluster, e)
                        continue  # the intent stays open and is redone at start
            if action.intent is not None:
                done.append(action.intent)
        now = self.clock.now()
        if conflicts:
            await self._record(changes, now, done=done, also=[self._failover_write(conflicts, now)])
        elif changes or done:
            self._defer(changes, done, now)

    # Publishing ---------------------------------------------------------------------------
    @property
    def view(self) -> LoopView:
        """What the loop knew after its last iteration (immutable; the API reads it).

        A view is made when somebody reads it, not after every iteration: read
        between iterations, it is made at once from the state; read while an
        iteration runs (or from another thread, such as a metrics exporter's),
        the last view is returned and the iteration publishes a new one when
        it ends (as it does for every iteration while somebody waits in
        :meth:`next_view`).  A replay, which reads none, makes none.
        """
        if self._stale:
            if self._iterating or threading.get_ident() != self._thread:
                self._wanted = True
            else:
                self._publish()
                self._announce()
        return self._view

    def _remember(self, decisions: Sequence[Decision]) -> None:
        # The reasons of waiting jobs live in the core (``state.waiting``): the
        # cycle reports a Wait only when a reason changed, and a parked tail
        # has one reason for all its jobs.  Admitted and preempted jobs changed.
        self._changed.update(d.job for d in decisions if not isinstance(d, Wait))

    def _publish(self) -> None:
        self._stale = self._wanted = False
        state = self.state
        tree = state.tree
        pending_by_leaf = {name: q.pending for name, q in state.queues.items()}
        counts: dict[str, int] = {}
        for leaf, jobs in pending_by_leaf.items():
            for node in tree.path_to_root(leaf):
                counts[node] = counts.get(node, 0) + len(jobs)
        queues = tuple(
            QueueView(
                name=node,
                parent=tree.parent(node),
                leaf=tree.is_leaf(node),
                namespaces=tree.namespaces_of(node),
                min=_quantities(tree.min_of(node)),
                max=_limits(tree.max_of(node)),
                used=_quantities(tree.used(node)),
                borrowed=_quantities(tree.borrowed_used(node)),
                admitted=tree.admitted_count(node),
                pending=counts.get(node, 0),
            )
            for node in tree.nodes()
        )
        reasons: dict[str, str] = {}
        pending: dict[str, tuple[PendingView, ...]] = {}
        book = state.waiting
        seen = self._pending_views
        fresh: dict[str, tuple[Job, PendingView]] = {}
        for leaf, jobs in pending_by_leaf.items():
            views = []
            for job in jobs:
                key = job.key
                reason = book.reason_of(job)
                if reason:
                    reasons[key] = reason
                # A job's view is kept while the job (an immutable record) and its
                # reason stay the same: most of them, from one iteration to the next.
                known = seen.get(key)
                if known is not None and known[0] is job and known[1].reason == reason:
                    view = known[1]
                else:
                    view = PendingView(
                        key, job.priority, job.priority_class, _quantities(job.request), reason
                    )
                fresh[key] = (job, view)
                views.append(view)
            pending[leaf] = tuple(views)
        self._pending_views = fresh
        vc_used = state.guaranteed_gpus
        clusters = {
            name: ClusterGpus(
                placer.capacity()["nvidia.com/gpu"],
                placer.allocated()["nvidia.com/gpu"],
                {
                    vc: (size, vc_used.get((name, vc), 0))
                    for vc, size in self.vc_sizes.get(name, {}).items()
                },
            )
            for name, placer in state.placers.items()
        }
        doomed = {
            name: placer.doomed_cells()
            for name, placer in state.placers.items()
            if hasattr(placer, "doomed_cells")
        }
        for key, reason in reasons.items():  # a waiting job's reason changed
            if self._view.reasons.get(key) != reason:
                self._changed.add(key)
        version = self._view.version + 1
        recent = (*self._view.recent, (version, tuple(sorted(self._changed))))[-RECENT_VIEWS:]
        self._changed.clear()
        self._view = LoopView(
            True,
            state.now,
            queues,
            pending,
            reasons,
            clusters,
            doomed,
            version,
            recent,
            frozenset(state.draining),
            frozenset(state.unready),
        )

    def _announce(self) -> None:
        """Wake whoever waits in :meth:`next_view` (in the event loop's thread)."""
        self._published.set()
        self._published = asyncio.Event()

    async def next_view(self, after: int, timeout: float) -> LoopView:
        """The published view once its version is above ``after`` (or after ``timeout`` s)."""
        if self.view.version <= after:
            self._waiting_views += 1
            try:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._published.wait(), timeout)
            finally:
                self._waiting_views -= 1
        return self.view


@dataclass(frozen=True, slots=True)
class _Deferred:
    """Records :meth:`SchedulerLoop._defer` keeps for the loop's next transaction."""

    changes: tuple[Transition, ...]
    updates: list[dict[str, Any]]
    log_entries: list[job_rows.EventValues]
    done: tuple[int, ...]
    time: float


@dataclass(frozen=True, slots=True)
class _Create:
    """Create job ``head`` in its member (``intent``: the intent it carries out)."""

    intent: int | None
    head: job_rows.JobHead
    manifest: dict[str, Any]
    started: float | None = None  # when it started running, before a restart


@dataclass(frozen=True, slots=True)
class _Delete:
    """Delete job ``key`` in member ``cluster``."""

    intent: int | None
    key: str
    cluster: str


@dataclass(frozen=True, slots=True)
class _Resize:
    """Give running job ``head`` its pods as they are now (it grew or shrank)."""

    head: job_rows.JobHead
    manifest: dict[str, Any]
    intent: None = None


_Action = _Create | _Delete | _Resize
#: Job column changes, event log entries, the decisions that need an intent (with row
#: ids), and the running jobs whose pods changed.
_DecisionWrites = tuple[
    list[dict[str, Any]],
    list[job_rows.EventValues],
    list[tuple[int, Admit | Preempt]],
    list[int],  # jobs that grew or shrank (row ids)
]


def _moves(outcomes: Sequence[events.Outcome]) -> list[Transition]:
    """The job transitions among an event's outcomes."""
    return [o for o in outcomes if isinstance(o, Transition)]


def _dispatched(
    head: job_rows.JobHead, manifest: dict[str, Any], run: Running, started: float | None
) -> DispatchedJob:
    return DispatchedJob(
        key=f"{head.namespace}/{head.name}",
        uid=head.uid,
        cluster=run.cluster,
        queue=head.queue,
        pods=tuple(p for u in run.units for p in u.pods),
        manifest=manifest,
        started=started,
    )
