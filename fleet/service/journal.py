"""The loop's journal: every row, intent and deferred record the loop writes.

Theory of operation: the loop decides, *persists*, acts and records
(``docs/design/service-and-store.md``).  :class:`Journal`
turns what the core did into the store's typed values — a
:class:`~fleet.store.jobs.JobUpdate` and an
:class:`~fleet.store.jobs.EventValues` per job transition, an intent per
member action — and writes them.  A preemption (a cycle's
:class:`~fleet.core.decisions.Preempt`, or a transition that carries a
:class:`~fleet.core.decisions.Preemption`) also appends its record to the
job's ``preemptions`` (:func:`fleet.store.jobs.preemption_record`), and its
event's message names the cause, the preemptor and the quota path
(:func:`fleet.core.decisions.explain`).  An ``Admitted`` event's message names
the cluster, the queue, the GPUs and whether the job borrows
(:func:`admitted_message`); the transitions' own messages come from the
core (:mod:`fleet.core.events`):

* :meth:`Journal.record` writes transitions, deletion intents, the intents
  carried out and extra writes (``also``) in one transaction, at once (for
  what must be stored before the loop acts on it);
* :meth:`Journal.defer` keeps them for the loop's next transaction (for what
  acting on members left to record, and for what members reported when
  nothing is acted on because of it): until written, the intents stay open,
  a restart creates the jobs again (idempotently) and members report again;
* :meth:`Journal.decisions` builds the rows and intents of a cycle's
  decisions (CPU work the loop may run off the event loop) and
  :meth:`Journal.persist` writes them, returning the member actions they call
  for (:mod:`fleet.service.effects`).

Every write transaction starts with what was deferred, so a job's later moves
follow its earlier ones; a transaction that fails keeps it for the next.
For a store nobody else reads (a replay's), :attr:`Journal.write_behind`
lets deferred records wait while the loop is idle too (readers flush
first), up to :data:`MAX_BEHIND` batches, and :attr:`Journal.decisions_behind`
lets a cycle's decisions wait with them, without intents (nothing restarts
from that store), the jobs to create being read ahead (:data:`READ_AHEAD`).
Once changes are stored, ``recorded`` (the loop's) is told.  The journal also
keeps the row id of every job the loop holds (``ids``), forgetting a job once
its end is stored.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fleet.core import snapshot, wording
from fleet.core.cycle import Admit, Decision, Preempt
from fleet.core.decisions import explain
from fleet.core.jobs import Mode
from fleet.core.lifecycle import HOLDING, TERMINAL, JobState
from fleet.core.resources import GPU
from fleet.core.state import SchedulerState, Transition
from fleet.service.effects import Action, Create, Delete, Resize
from fleet.store import jobs as job_rows
from fleet.store.database import Database, Session

#: With :attr:`Journal.decisions_behind`, jobs whose heads are read ahead of their creation.
READ_AHEAD = 256
#: A stored document.
Plain = dict[str, Any]
#: With :attr:`Journal.write_behind`, batches of deferred records written together at most.
MAX_BEHIND = 4096
#: Extra writes for the transaction of :meth:`Journal.record`.
Also = Callable[[Session], Awaitable[None]]


#: How an admitted job is charged, in the words of its Admitted event.
_MODE_WORDS = {
    Mode.GUARANTEED: "within its queue's guarantee (min)",
    Mode.BORROWED: "borrowing beyond its queue's guarantee (min): it may be reclaimed",
    Mode.OPPORTUNISTIC: "opportunistic, on idle GPUs: it may be preempted",
}


def admitted_message(d: Admit, where: str) -> str:
    """The message of an Admitted event: cluster, queue, GPUs, borrowing or not, pods."""
    gpus = wording.amount(GPU, sum(len(p.gpus) for p in d.pods))
    message = (
        f"admitted to {d.cluster} in queue {d.queue}: {gpus}, {_MODE_WORDS.get(d.mode, d.mode)}; "
        f"{wording.count(len(d.pods), 'pod')}: {where}"
    )
    if d.victims:
        message += f"; starts after {', '.join(d.victims)} stop"
    return message


def grew_message(d: Admit, where: str) -> str:
    """The message of a Grew event: the pods and GPUs the job gained, and where."""
    gpus = wording.amount(GPU, sum(len(p.gpus) for p in d.pods))
    return f"grew by {wording.count(len(d.pods), 'pod')} ({gpus}, {d.mode}) in {d.cluster}: {where}"


@dataclass(frozen=True, slots=True)
class Deferred:
    """Records :meth:`Journal.defer` keeps for the loop's next transaction."""

    changes: tuple[Transition, ...]
    updates: list[job_rows.JobUpdate]
    log_entries: list[job_rows.EventValues]
    done: tuple[int, ...]
    time: float


@dataclass(frozen=True, slots=True)
class DecisionRows:
    """What a cycle's decisions write: job updates, event log entries, the decisions
    that need an intent (with their row ids), and the running jobs whose pods changed."""

    updates: list[job_rows.JobUpdate]
    log_entries: list[job_rows.EventValues]
    planned: list[tuple[int, Admit | Preempt]]
    resized: list[int]


class Journal:
    """The loop's writes; see the module docstring."""

    def __init__(self, db: Database, recorded: Callable[[Sequence[Transition]], None]) -> None:
        self.db = db
        self.ids: dict[str, int] = {}  # job key -> row id
        self._recorded = recorded
        self._deferred: list[Deferred] = []
        #: What was deferred waits for the next transaction even while the loop
        #: waits, instead of being written before; whoever reads the store calls
        #: :meth:`flush` first.  For a store nobody else reads (a replay's).
        self.write_behind = False
        #: A cycle's decisions wait with what was deferred too, and no intent is
        #: written: for a store that nothing ever restarts from and that only
        #: readers who flush first read (a replay's, with write_behind).
        self.decisions_behind = False
        #: with decisions_behind: heads and manifests read ahead, by row id, and the
        #: highest id read ahead so far
        self._heads: dict[int, tuple[job_rows.JobHead, Plain]] = {}
        self._read_to = 0

    @property
    def due(self) -> bool:
        """Whether deferred records are to be written before the loop waits (with
        :attr:`write_behind`: once :data:`MAX_BEHIND` batches of them wait)."""
        if self.write_behind:
            return len(self._deferred) >= MAX_BEHIND
        return bool(self._deferred)

    def forget(self, changes: Sequence[Transition]) -> None:
        """Once ``changes`` are stored: tell the loop, and forget the jobs that ended."""
        self._recorded(changes)
        for t in changes:
            if t.new in TERMINAL:
                self.ids.pop(t.job, None)

    async def cancel_requested(self, job_id: int, now: float) -> int:
        """Store a user's request to cancel job row ``job_id`` (a ``cancel`` intent); its id.

        Once stored, a crash does not lose it: the next start carries it out.
        """
        async with self.db.write() as session:
            (intent,) = await job_rows.insert_intents(session, [(job_id, "cancel", "")], now)
        return intent

    # Rows -------------------------------------------------------------------------------

    def update_of(
        self, state: SchedulerState, row_id: int, key: str, new: JobState, now: float
    ) -> job_rows.JobUpdate:
        """The columns of job ``key`` that change when it moves to ``new``."""
        run = state.running.get(key)
        if new in HOLDING and run is not None:
            units = snapshot.units_to_plain(run.units, state.ran.get(key, 0.0))
            return job_rows.JobUpdate(
                row_id, new.value, now, placement=(run.cluster, run.mode.value), units=units
            )
        if new in HOLDING:
            return job_rows.JobUpdate(row_id, new.value, now)
        placement = (None, None) if new is JobState.QUEUED else None
        return job_rows.JobUpdate(row_id, new.value, now, placement=placement, units=[])

    def rows(
        self, state: SchedulerState, changes: Sequence[Transition], now: float
    ) -> tuple[list[job_rows.JobUpdate], list[job_rows.EventValues]]:
        """The job updates and event log entries of ``changes``.

        A transition that names an event (``DeadlineExceeded``: a run-time limit
        ended the job) is logged as that event, a warning, before the move, and
        its reason becomes the job's.
        """
        updates: list[job_rows.JobUpdate] = []
        log_entries: list[job_rows.EventValues] = []
        for t in changes:
            row_id = self.ids.get(t.job)
            if row_id is None:
                continue
            update = self.update_of(state, row_id, t.job, t.new, now)
            message = t.reason
            why = t.preemption
            if why is not None:
                message = explain(t.reason, why.cause, why.preemptor, why.quota_path)
                record = job_rows.preemption_record(
                    now, why.cause, why.preemptor, why.quota_path, message
                )
                update = dataclasses.replace(update, preemption=record)
            if t.event:
                update = dataclasses.replace(update, reason=message)
                log_entries.append(
                    job_rows.EventValues(row_id, now, t.event, t.reason, warning=True)
                )
            updates.append(update)
            log_entries.append(job_rows.EventValues(row_id, now, t.new.value, message))
        return updates, log_entries

    # Writing ----------------------------------------------------------------------------

    async def record(
        self,
        state: SchedulerState,
        changes: Sequence[Transition],
        now: float,
        *,
        deletes: Sequence[tuple[str, str]] = (),
        done: Sequence[int] = (),
        also: Sequence[Also] = (),
    ) -> list[int | None]:
        """Write job transitions, deletion intents ((job, cluster)), the intents carried
        out and ``also``'s writes in one transaction; the ids of the new intents."""
        if not changes and not deletes and not done and not also and not self._deferred:
            return []
        updates, log_entries = self.rows(state, changes, now)
        wanted = [(self.ids.get(key), cluster) for key, cluster in deletes]
        async with self.write() as session:
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
        self.forget(changes)
        return [None if i is None else next(made) for i, _ in wanted]

    def defer(
        self, state: SchedulerState, changes: Sequence[Transition], done: Sequence[int], now: float
    ) -> None:
        """Store ``changes`` and finish intents ``done`` with the next transaction."""
        updates, log_entries = self.rows(state, changes, now)
        self._deferred.append(Deferred(tuple(changes), updates, log_entries, tuple(done), now))

    @contextlib.asynccontextmanager
    async def write(self) -> AsyncIterator[Session]:
        """A write transaction that starts with what was deferred; kept for the next
        one if it fails."""
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
            self.forget(d.changes)

    async def flush(self, state: SchedulerState, now: float) -> None:
        """Write what was deferred, if anything."""
        if self._deferred:
            await self.record(state, [], now)

    # A cycle's decisions ------------------------------------------------------------------

    def decisions(
        self, state: SchedulerState, decisions: Sequence[Decision]
    ) -> DecisionRows | None:
        """The rows, events and intents the decisions call for (None: nothing to write)."""
        now = state.now
        updates: list[job_rows.JobUpdate] = []
        log_entries: list[job_rows.EventValues] = []
        planned: list[tuple[int, Admit | Preempt]] = []
        resized: list[int] = []
        for d in decisions:
            if not isinstance(d, Admit | Preempt):
                continue
            row_id = self.ids.get(d.job)
            if row_id is None:
                continue
            if isinstance(d, Admit):
                phase = state.phase.get(d.job, JobState.ADMITTED)
                update = self.update_of(state, row_id, d.job, phase, now)
                updates.append(dataclasses.replace(update, reason=""))
                where = ", ".join(f"{p.pod}@{p.node}{list(p.gpus)}" for p in d.pods)
                if d.grown:
                    log_entries.append(
                        job_rows.EventValues(row_id, now, "Grew", grew_message(d, where))
                    )
                    resized.append(row_id)
                    continue
                message = admitted_message(d, where)
                log_entries.append(
                    job_rows.EventValues(row_id, now, JobState.ADMITTED.value, message)
                )
                planned.append((row_id, d))
            elif d.unit:
                message = d.message
                record = job_rows.preemption_record(
                    now, d.cause, d.preemptor, d.quota_path, message
                )
                run = state.running.get(d.job)
                units = None if run is None else [snapshot.unit_to_plain(u) for u in run.units]
                updates.append(job_rows.JobUpdate(row_id, units=units, preemption=record))
                if run is not None:
                    units = snapshot.units_to_plain(run.units, state.ran.get(d.job, 0.0))
                    updates.append(job_rows.JobUpdate(row_id, units=units))
                    resized.append(row_id)
                log_entries.append(
                    job_rows.EventValues(row_id, now, "Shrunk", message, warning=True)
                )
            else:
                message = d.message
                record = job_rows.preemption_record(
                    now, d.cause, d.preemptor, d.quota_path, message
                )
                update = self.update_of(state, row_id, d.job, JobState.PREEMPTED, now)
                updates.append(dataclasses.replace(update, reason=message, preemption=record))
                log_entries.append(
                    job_rows.EventValues(
                        row_id, now, JobState.PREEMPTED.value, message, warning=True
                    )
                )
                planned.append((row_id, d))
        if not updates and not log_entries:
            return None
        return DecisionRows(updates, log_entries, planned, resized)

    async def persist(self, rows: DecisionRows | None, now: float) -> list[Action]:
        """Write a cycle's decision rows in one transaction; the actions they call for.

        With :attr:`decisions_behind`, the rows wait with what was deferred and
        no intent is written: the jobs to create are only read (read ahead).
        """
        if rows is None:
            return []
        planned = rows.planned
        if self.decisions_behind:
            self._deferred.append(Deferred((), rows.updates, rows.log_entries, (), now))
            wanted = {r for r, d in planned if isinstance(d, Admit)} | set(rows.resized)
            return self._actions(await self._read_ahead(wanted), [None] * len(planned), rows)
        async with self.write() as session:
            await job_rows.update_jobs(session, rows.updates)
            await job_rows.insert_events(session, rows.log_entries)
            intents = await job_rows.insert_intents(
                session,
                [
                    (row_id, "create" if isinstance(d, Admit) else "delete", d.cluster)
                    for row_id, d in planned
                ],
                now,
            )
            admitted = {row_id for row_id, d in planned if isinstance(d, Admit)}
            heads = await job_rows.dispatch_heads(session, sorted(admitted | set(rows.resized)))
        return self._actions(heads, intents, rows)

    async def _read_ahead(self, ids: set[int]) -> dict[int, tuple[job_rows.JobHead, Plain]]:
        """Heads and manifests of jobs ``ids`` to create, for :attr:`decisions_behind`: read
        with those of the next :data:`READ_AHEAD` jobs by id, which are kept until
        their turn comes (stored jobs' heads and manifests never change)."""
        missing = sorted(i for i in ids if i not in self._heads)
        if missing:
            async with self.db.read() as session:
                earlier = [i for i in missing if i <= self._read_to]
                self._heads.update(await job_rows.dispatch_heads(session, earlier))
                if missing[-1] > self._read_to:
                    found = await job_rows.dispatch_heads_between(
                        session, self._read_to, missing[-1] + READ_AHEAD
                    )
                    self._heads.update(found)
                    self._read_to = max(missing[-1], *found)  # the jobs stored so far
        return {i: self._heads.pop(i) for i in sorted(ids) if i in self._heads}

    @staticmethod
    def _actions(
        heads: dict[int, tuple[job_rows.JobHead, Plain]],
        intents: Sequence[int | None],
        rows: DecisionRows,
    ) -> list[Action]:
        """The member actions of a cycle's decisions (``intents``: one per planned one)."""
        actions: list[Action] = [
            Create(intent, *heads[row_id])
            if isinstance(d, Admit)
            else Delete(intent, d.job, d.cluster)
            for intent, (row_id, d) in zip(intents, rows.planned, strict=True)
        ]
        return actions + [Resize(*heads[r]) for r in sorted(set(rows.resized)) if r in heads]
