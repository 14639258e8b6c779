"""The scheduler loop: the one writer of the core's state, as a pipeline of stages.

Theory of operation (events in, decisions out, one writer; decide, persist,
act, record — ``docs/design/service-and-store.md``).  The loop orchestrates;
each stage is a module that returns data:

* **Restart** (:mod:`fleet.service.restart`): the core's state rebuilt from
  the store, and the work the previous run left open (jobs to create again,
  deletions, cancellations).
* **Inbox** (:mod:`fleet.service.inbox`): API handlers write to the database
  first and then post what changed (new job ids, cancellations); member
  backends post what happened in the members; administration posts work that
  needs the state to itself.  Every item wakes the loop; many items coalesce
  into one iteration, whose items become core events.
* **Failover** (:mod:`fleet.core.failover`, stored by
  :mod:`fleet.service.failover`): jobs unhealthy too long go elsewhere.
* **Cycle**: the core's scheduling cycle, run as the clock computes
  (:meth:`fleet.clock.Clock.compute`: in a worker thread on the real clock,
  so the event loop keeps serving the API; inline on a virtual clock).
* **Journal** (:mod:`fleet.service.journal`): every decision, transition and
  intent, as the store's typed values, in one transaction — only then:
* **Effects** (:mod:`fleet.service.effects`): create and delete in the
  members; what the calls came to goes back through the inbox as core events.
* **Fair share's memory**: with ``fairSharing`` in the tree, the queues'
  decayed usage (:mod:`fleet.core.fair_share`) is stored every
  :data:`FAIR_SAVE_EVERY` seconds of the clock and when the loop stops, in
  a journal transaction of its own (:func:`fleet.store.admin.replace_queue_usage`);
  :func:`fleet.service.admin.restore` gives it back at the next start.  A
  replay's loop (whose store nothing restarts from) does not store it.
* **Views**: the immutable :class:`LoopView` the API reads, the core's
  projection of the state (:mod:`fleet.core.view`), made when it is read
  (:mod:`fleet.service.views`).

Administration (:mod:`fleet.service.admin`) runs as exclusive work and writes
and acts through :meth:`SchedulerLoop.commit`; so does the rebuilding of a
member's cells from the node list it observed, which the loop hands, after
the inbox's exclusive work, to :attr:`SchedulerLoop.on_nodes` (the service
sets it; until then the last list of each member waits).  **Time** comes from the
injected :class:`fleet.clock.Clock`: a cycle runs every ``schedule_interval``
seconds of that clock and right after changes, and the loop also wakes when
the next running job reaches a run-time limit (:mod:`fleet.core.run_limits`);
each iteration starts by telling the core the time (``ClockAdvanced``), and
the jobs a limit ended are stored and their pods stopped, as a cancelled
job's are, before anything else (:meth:`SchedulerLoop._advance`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

from fleet.clock import Clock
from fleet.clusters.base import MemberCluster, NodesObserved
from fleet.core import events
from fleet.core.cycle import Decision, Wait, cycle
from fleet.core.failover import Due
from fleet.core.jobs import Job
from fleet.core.lifecycle import TERMINAL
from fleet.core.placement import Placer
from fleet.core.quota import QuotaTree
from fleet.core.state import SchedulerState, Transition
from fleet.core.view import LoopView, PendingMemo, project
from fleet.service import effects, inbox, restart, views
from fleet.service.collector import cycle_paused
from fleet.service.failover import Failover
from fleet.service.journal import Also, Journal
from fleet.service.telemetry import Telemetry
from fleet.store import admin as admin_rows
from fleet.store.database import Database, Session

log = logging.getLogger("fleet.service.loop")

#: Event-loop turns the loop gives members' watches before writing deferred records.
_TURNS_BEFORE_FLUSH = 2
#: Seconds of the clock between two stores of the queues' decayed usage (a crash
#: forgets at most this much of it: little against a half-life of hours).
FAIR_SAVE_EVERY = 600.0


def _paused_cycle(state: SchedulerState) -> list[Decision]:
    """The scheduling cycle, with the collector paused (:mod:`~fleet.service.collector`)."""
    with cycle_paused():
        return cycle(state)


class SchedulerLoop:
    """Owns the core's state and runs the stages; see the module docstring."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        tree: QuotaTree,
        placers: Mapping[str, Placer],
        members: Mapping[str, MemberCluster],
        *,
        interval: float,
        vc_sizes: Mapping[str, Mapping[str, int]] | None = None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.state = SchedulerState(tree, placers)
        self.members = dict(members)
        self.interval = interval
        #: cluster -> virtual cluster -> GPUs it is guaranteed there
        self.vc_sizes = {k: dict(v) for k, v in (vc_sizes or {}).items()}
        self.journal = Journal(db, self._recorded)
        self.failover = Failover(db)
        self.publisher = views.Publisher(self._publish)
        self._memo: PendingMemo = {}  # pending views of the last view, to reuse
        self._changed: set[str] = set()  # jobs changed since the last published view
        self.mailbox = inbox.Mailbox()
        self._task: asyncio.Task[None] | None = None
        self._watchers: list[asyncio.Task[None]] = []
        self.iterations = 0
        #: the quota tree in force as its YAML document (the service sets it)
        self.tree_document = ""
        #: run at the end of every iteration (the service's administration, fleet.service.admin)
        self.after_iteration: Callable[[SchedulerLoop], Awaitable[None]] | None = None
        #: traces and metrics (fleet.service.telemetry; the API sets it before the first iteration)
        self.telemetry: Telemetry | None = None
        #: what a member's observed node list comes to (the service sets it:
        #: fleet.service.admin.nodes_observed, then the service's own view)
        self.on_nodes: Callable[[SchedulerLoop, NodesObserved], Awaitable[None]] | None = None
        self._observed: dict[str, NodesObserved] = {}  # waiting for on_nodes
        self._fair_saved = -FAIR_SAVE_EVERY  # when the decayed usage was last stored

    # Lifecycle --------------------------------------------------------------------------
    async def start(
        self, prepare: Callable[[SchedulerLoop], Awaitable[None]] | None = None
    ) -> None:
        """Rebuild the state from the database (then ``prepare`` it), redo open work,
        start the loop."""
        now = self.clock.now()
        self.state, self.journal.ids = await restart.rebuild(
            self.db, self.state.tree, self.state.placers, now
        )
        await self.failover.load(self.journal.ids, now)
        if prepare is not None:
            await prepare(self)
        for name, member in self.members.items():
            self._watchers.append(asyncio.create_task(self._watch(name, member)))
        work = await restart.open_work(self.db)
        for cancel in work.cancels:
            self._post(cancel)
        await self._act(work.actions)
        # Every holding job was created again above; open create intents are done.
        await self.journal.record(self.state, [], self.clock.now(), done=work.creates)
        self._publish()
        self.publisher.announce()
        self._task = asyncio.create_task(self._run(), name="fleet-scheduler-loop")

    async def stop(self) -> None:
        ran = self._task is not None  # a loop that never ran (a follower) has nothing to keep
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
            if ran:
                await self._save_fair(self.state.now)
        except Exception:  # the open intents are carried out again at the next start
            log.exception("could not record what the members were told before stopping")

    def abandon(self, error: Exception) -> None:
        """After :meth:`stop`: fail the exclusive work that will never run with ``error``
        (and any asked for later)."""
        self.mailbox.abandon(error)

    # What the API, the members and administration tell the loop ------------------------
    def submitted(self, jobs: Iterable[Job]) -> None:
        """Jobs stored as Queued (their ``seq`` is their row id)."""
        self._post(inbox.Submitted(tuple(jobs)))

    async def cancel(self, job_id: int, key: str, reason: str = "cancelled by the user") -> None:
        """Store the request to cancel job ``key`` (row ``job_id``), then hand it to the loop.

        The request is a ``cancel`` intent: once this returns, a crash does not
        lose it (the next start carries it out).
        """
        intent = await self.journal.cancel_requested(job_id, self.clock.now())
        self._post(inbox.Cancel(key, reason, intent))

    def cancel_stored(self, intent: int, key: str, reason: str = "cancelled by the user") -> None:
        """Hand the loop the cancellation of ``key`` that another replica stored as ``intent``."""
        self._post(inbox.Cancel(key, reason, intent))

    async def exclusive(self, work: Callable[[SchedulerLoop], Awaitable[Any]]) -> Any:
        """Run ``work(loop)`` in the loop's next iteration, in order with the inbox; its result.

        ``work`` has the state to itself (no cycle runs meanwhile) and changes
        it only through :func:`fleet.core.events.apply`, writing and acting
        through :meth:`commit`; what it raises is raised here.
        """
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._post(inbox.Exclusive(work, done))
        return await done

    async def commit(
        self,
        changes: Sequence[Transition],
        *,
        deletes: Sequence[tuple[str, str]] = (),
        also: Sequence[Also] = (),
    ) -> None:
        """From exclusive work: store ``changes``, deletion intents for ``deletes``
        ((job, cluster)) and ``also``'s writes in one transaction, then delete the jobs."""
        now = self.clock.now()
        intents = await self.journal.record(self.state, changes, now, deletes=deletes, also=also)
        await self._act(
            [
                effects.Delete(intent, key, cluster)
                for intent, (key, cluster) in zip(intents, deletes, strict=True)
            ]
        )

    def follow_nodes(self, hook: Callable[[SchedulerLoop, NodesObserved], Awaitable[None]]) -> None:
        """Hand the members' observed node lists to ``hook`` from now on (see
        :attr:`on_nodes`); those that came before are handed over at once."""
        self.on_nodes = hook
        if self._observed:
            self.mailbox.wake.set()

    def add_member(self, name: str, member: MemberCluster) -> None:
        """Act on and watch a member added while running (its placer comes by event)."""
        self.members[name] = member
        self._watchers.append(asyncio.create_task(self._watch(name, member)))

    def remove_member(self, name: str) -> MemberCluster | None:
        """Stop acting on a member removed (its placer went by event); the member."""
        self.vc_sizes.pop(name, None)
        return self.members.pop(name, None)

    def _post(self, item: inbox.Item) -> None:
        self.mailbox.post(item)

    async def _watch(self, name: str, member: MemberCluster) -> None:
        async for event in member.watch():
            self._post(inbox.FromMember(name, event))

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
        await self.mailbox.until_quiet()

    def is_quiet(self) -> bool:
        """Whether the loop waits with nothing to do (what :meth:`quiet` waits for)."""
        return self.mailbox.quiet

    async def _sleep(self) -> None:
        if self.mailbox.wake.is_set():
            return
        if self.journal.due:
            # Members often answer at once (a simulated one reports a job it
            # created as started): let their watches post it, and record it with
            # what was deferred in one transaction of the next iteration.
            for _ in range(_TURNS_BEFORE_FLUSH):
                await asyncio.sleep(0)
                if self.mailbox.wake.is_set():
                    return
            try:
                await self.flush()  # nothing waits unwritten while the loop waits
            except Exception:  # kept for the next transaction
                log.exception("could not record what the members were told; retrying")
            if self.mailbox.wake.is_set():
                return
        self.mailbox.idle.set()
        waker = asyncio.create_task(self.mailbox.wake.wait())
        timer = asyncio.create_task(self.clock.sleep(self._until_next()))
        try:
            await asyncio.wait({waker, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.mailbox.idle.clear()
            for task in (waker, timer):
                task.cancel()
            for task in (waker, timer):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def _until_next(self) -> float:
        """Seconds until the next timed cycle: the interval, or less when a running
        job reaches its run-time limit before then."""
        due = self.state.dues.next()
        if due is None:
            return self.interval
        return min(self.interval, max(0.0, due - self.clock.now()))

    async def iterate(self) -> list[Decision]:
        """One iteration: inbox, failover, cycle, journal, effects, views; the decisions."""
        with self._span("scheduler iteration"):
            self.publisher.iterating = True
            try:
                return await self._iterate()
            finally:
                self.publisher.iterating = False

    async def _iterate(self) -> list[Decision]:
        items = self.mailbox.take()
        now = self.clock.now()
        await self._advance(max(now, self.state.now))
        await self._take(items)
        if not items and self._observed:
            await self._nodes_observed()  # on_nodes was set since they came
        await self._fail_over()
        decisions = await self._cycle(now)
        rows = await self.clock.compute(self.journal.decisions, self.state, decisions)
        actions = await self.journal.persist(rows, self.state.now)
        if self.journal.due:
            await self.flush()  # what the inbox deferred, when the cycle wrote nothing
        await self._act(actions)
        if self.state.tree.fair_any and now - self._fair_saved >= FAIR_SAVE_EVERY:
            await self._save_fair(now)
        if self.after_iteration is not None:
            await self.after_iteration(self)
        # The reasons of waiting jobs live in the core (``state.waiting``): the
        # cycle reports a Wait only when a reason changed, and a parked tail
        # has one reason for all its jobs.  Admitted and preempted jobs changed.
        self._changed.update(d.job for d in decisions if not isinstance(d, Wait))
        if self.publisher.due:
            await self.clock.compute(self._publish)
            self.publisher.announce()
        else:
            self.publisher.stale = True
        self.iterations += 1
        return decisions

    async def _cycle(self, now: float) -> list[Decision]:
        """The scheduling cycle, in a span that carries its outcome (and metrics)."""
        with self._span("scheduling cycle") as span:
            started = time.perf_counter()
            decisions = await self.clock.compute(_paused_cycle, self.state)
            if self.telemetry is not None:
                self.telemetry.cycle_done(span, decisions, time.perf_counter() - started, now)
        return decisions

    def _span(self, name: str, **attributes: str) -> contextlib.AbstractContextManager[Any]:
        """A span of the telemetry's tracer (nothing without telemetry)."""
        if self.telemetry is None:
            return contextlib.nullcontext()
        return self.telemetry.tracer.start_as_current_span(name, attributes=attributes)

    # Stages -----------------------------------------------------------------------------
    async def _advance(self, now: float) -> None:
        """Tell the core the time; store the jobs a run-time limit ended (failed, or
        preempted to be queued again) and stop their pods in their members."""
        due = self.state.dues.due_by(now)
        held = {k: self.state.running[k].cluster for k in due if k in self.state.running}
        ended = inbox.moves(events.apply(self.state, events.ClockAdvanced(now)))
        if not ended:
            return
        for t in ended:
            log.info("%s: %s", t.job, t.reason)
        deletes = [(t.job, held[t.job]) for t in ended if t.job in held]
        intents = await self.journal.record(self.state, ended, now, deletes=deletes)
        await self._act(
            [
                effects.Delete(intent, key, cluster)
                for intent, (key, cluster) in zip(intents, deletes, strict=True)
            ]
        )

    async def _take(self, items: Sequence[inbox.Item]) -> None:
        """The inbox stage: apply the items, store (and act on) what they changed,
        then run the exclusive work among them."""
        if not items:
            return
        now = self.clock.now()
        taken = inbox.take(self.state, self.failover.book, items)
        for job in taken.submitted:
            self.journal.ids[job.key] = job.seq
            self._changed.add(job.key)
        if self.telemetry is not None and taken.submitted:
            self.telemetry.queued([job.key for job in taken.submitted], now)
        # Written now: intents to act on, work that reads the rows, or failover's
        # notes (written next, in a transaction of their own: the log stays in order).
        if taken.deletes or taken.done or taken.exclusive or self.failover.book.noting:
            intents = await self.journal.record(
                self.state, taken.changes, now, deletes=taken.deletes, done=taken.done
            )
            await self._act(
                [
                    effects.Delete(intent, key, cluster)
                    for intent, (key, cluster) in zip(intents, taken.deletes, strict=True)
                ]
            )
        elif taken.changes:
            # What members reported (starts, ends) goes with the cycle's transaction,
            # or is written on its own before the iteration ends (_iterate).
            self.journal.defer(self.state, taken.changes, (), now)
        await inbox.run_exclusive(taken.exclusive, self)
        self._observed.update(taken.observed)
        await self._nodes_observed()

    async def _nodes_observed(self) -> None:
        """Hand the members' last observed node lists to :attr:`on_nodes`."""
        while self._observed and self.on_nodes is not None:
            name = next(iter(self._observed))
            observed = self._observed.pop(name)
            try:
                await self.on_nodes(self, observed)
            except Exception:  # the member's next change reports its whole list again
                log.exception("could not build the cells of %s from its nodes", name)

    async def _fail_over(self) -> None:
        """Fail over jobs unhealthy for too long; purge old copies (:mod:`.failover`)."""
        now = self.clock.now()
        turn = await self.failover.turn(self.state, self.journal.ids, now)
        if turn.due:
            changes = inbox.failed_over(self.state, turn.due)
            also = [self._failover_write(turn.due, now)]
            await self.journal.record(self.state, changes, now, also=also)
        done = await self.failover.purge(self.state, self.members)
        if done:
            await self.journal.record(self.state, [], now, done=done)

    async def _save_fair(self, now: float) -> None:
        """Store the queues' decayed usage (fair share's memory) as of the state's time
        (not for a replay, whose store nothing restarts from: ``decisions_behind``)."""
        if not self.state.tree.fair_any or self.journal.decisions_behind:
            return
        self._fair_saved = now
        averages = self.state.fair.records(self.state.tree)
        at = self.state.fair.at

        async def write(session: Session) -> None:
            await admin_rows.replace_queue_usage(session, averages, at)

        await self.journal.record(self.state, [], now, also=[write])

    def _failover_write(self, due: Sequence[Due], now: float) -> Also:
        """The failed-over jobs' narrowed records and purge intents, for the journal."""

        async def write(session: Session) -> None:
            await self.failover.write(session, due, self.state, self.journal.ids, now)

        return write

    async def _act(self, actions: Sequence[effects.Action]) -> None:
        """The effects stage: act on members, and take what that came to as core events."""
        if not actions:
            return
        acted = await effects.act(actions, self.state, self.members, self._span)
        changes, conflicts = inbox.outcomes(self.state, acted.outcomes)
        if self.telemetry is not None:
            for outcome in acted.outcomes:
                if not isinstance(outcome, effects.Created):
                    self.telemetry.dispatch_failed(outcome.cluster)
        now = self.clock.now()
        if conflicts:
            also = [self._failover_write(conflicts, now)]
            await self.journal.record(self.state, changes, now, done=acted.done, also=also)
        elif changes or acted.done:
            self.journal.defer(self.state, changes, acted.done, now)

    async def flush(self) -> None:
        """Write what the journal deferred, if anything."""
        await self.journal.flush(self.state, self.clock.now())

    def _recorded(self, changes: Sequence[Transition]) -> None:
        """Once ``changes`` are stored (the journal tells): views and telemetry follow."""
        self._changed.update(t.job for t in changes)
        if self.telemetry is not None:
            ended = [t.job for t in changes if t.new in TERMINAL]
            if ended:
                self.telemetry.forget(ended)
            stopped = [(t.preemption.queue, t.preemption.cause) for t in changes if t.preemption]
            if stopped:
                self.telemetry.preempted(stopped)

    # Views ------------------------------------------------------------------------------
    @property
    def view(self) -> LoopView:
        """What the loop knew after its last iteration (:class:`views.Publisher`)."""
        return self.publisher.read()

    async def next_view(self, after: int, timeout: float) -> LoopView:
        """The published view once its version is above ``after`` (or after ``timeout`` s)."""
        return await self.publisher.next_view(after, timeout)

    def _publish(self) -> None:
        view, self._memo = project(
            self.state, self.vc_sizes, self.publisher.view, self._changed, self._memo
        )
        self._changed.clear()
        self.publisher.publish(view)
