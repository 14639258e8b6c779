"""Accepting submitted jobs: idempotent, all or nothing, written before the loop hears of them.

Theory of operation: a submission has already been parsed and validated into
:class:`NewJob` values.  Storing it is one write transaction: a job whose
``namespace/name`` exists with the same spec hash is returned as it is (a
resubmission, not a new job); with another hash the whole submission is
refused with :class:`NameTaken` and nothing of it is written.  **Names come
back**, as ``kubectl delete`` frees a name: a name whose job was cancelled,
with any spec, or whose job Succeeded or Failed, with another spec, starts a
new run (a new row and uid); the old run keeps its row and events under its
uid (:func:`fleet.store.jobs.supersede`).  New jobs get a
row (state ``Queued``), whose id is their submission order (the core job's
``seq``), a uid, and a first event.  Only after the commit is the loop told
of them, so the loop never sees a job the database does not hold.  A job
submitted again while it is still Queued is handed to the loop again (the
loop ignores jobs it knows): when a commit's answer is lost, the client's
retry is what tells the loop.

**Group commit.**  :class:`Intake` stores the submissions that arrive while
a transaction is running together, in the next one: one query for the names
they use, one multi-row insert for their jobs and one for their events, one
commit.  Under load this turns many small transactions into a few large
ones; alone, a submission waits for nobody.  Each submission of a batch is
still decided on its own, in arrival order (a later submission of the same
batch sees the earlier ones' jobs), and when a batch fails in the database,
its submissions are stored again one by one, so that one bad submission
cannot take the others with it.

**Stored ahead.**  :func:`accept_each` stores submissions made at given
times in one transaction, each decided and recorded (rows, first event) at
its own time: for a replay, which knows its submissions before their time
and tells the loop of each when it comes.

**Policies.**  A submission may carry the PropagationPolicies it stores
(:class:`NewPolicy`): they are written in the transaction that stores its
jobs and its audit record, only when the submission is accepted (a
submission refused with :class:`NameTaken` stores nothing), every
submission's of the batch in one upsert (a later submission's document of a
name wins); after the commit, ``on_policies`` is given what was stored.

**Other replicas.**  With ``also``, each transaction also runs
``also(session, new job ids)``: on PostgreSQL, where any replica takes
submissions and one leads the scheduler, that puts the new jobs in the
leader's inbox in the same transaction (:mod:`fleet.store.leases`).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from fleet.clock import Clock
from fleet.core import snapshot
from fleet.core.jobs import Job
from fleet.core.lifecycle import JobState
from fleet.store import admin as admin_rows
from fleet.store import configuration
from fleet.store import jobs as job_rows
from fleet.store.database import Database, Session

#: Most submissions stored in one transaction.
MAX_BATCH = 256


@dataclass(frozen=True, slots=True)
class NewJob:
    """One validated job of a submission."""

    job: Job  # its ``seq`` is replaced by the row id
    manifest: dict[str, Any]
    policy: dict[str, Any] | None
    spec_hash: str
    suspended: bool = False
    #: where ``policy`` came from: ``submission`` or ``stored`` (None: no policy)
    policy_source: str | None = None

    @property
    def namespace(self) -> str:
        return self.job.namespace

    @property
    def name(self) -> str:
        return self.job.key.partition("/")[2]


@dataclass(frozen=True, slots=True)
class NewPolicy:
    """A PropagationPolicy (its plain document) a submission stores once accepted."""

    namespace: str
    name: str
    document: dict[str, Any]
    #: who stores it
    author: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Accepted:
    """A job of the submission as stored: new, or the same job submitted before."""

    head: job_rows.JobHead
    created: bool
    #: the core job (``seq`` = row id) of a new job, or of a resubmitted one that
    #: is still Queued; None for the others
    job: Job | None = None


class NameTaken(Exception):
    """Jobs of the submission exist already with another spec."""

    def __init__(self, keys: Sequence[str]) -> None:
        super().__init__(
            f"job(s) {', '.join(keys)} exist already with another spec; "
            "delete them or choose other names"
        )
        self.keys = list(keys)


async def accept(db: Database, new: Sequence[NewJob], now: float) -> list[Accepted]:
    """Store one submission on its own (see the module docstring); its jobs in order."""
    async with db.write() as session:
        (outcome,) = await _store(session, [new], [now])
    if isinstance(outcome, NameTaken):
        raise outcome
    return outcome


async def accept_each(
    db: Database, submissions: Sequence[tuple[Sequence[NewJob], float]]
) -> list[list[Accepted] | NameTaken]:
    """Store submissions made at the given times (in order) in one transaction; what
    became of each, as :func:`accept` decides it for one.

    For a replay, which knows its submissions ahead: each is decided and
    recorded (rows, first event) at its own time, and a later one sees the
    earlier ones' jobs, but as they were stored, not as they are when its time
    comes (a name two of them use is one job, or taken).
    """
    if not submissions:
        return []
    async with db.write() as session:
        return await _store(session, [new for new, _ in submissions], [t for _, t in submissions])


class Intake:
    """Stores submissions with group commit; tells ``notify`` of new jobs after each commit."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        notify: Callable[[Sequence[Job]], None],
        *,
        max_batch: int = MAX_BATCH,
        also: Callable[[Session, list[int]], Awaitable[None]] | None = None,
        on_policies: Callable[[dict[str, dict[str, Any]]], None] | None = None,
    ) -> None:
        self.db = db
        #: more writes in each transaction, given the ids of the jobs it creates
        self.also = also
        #: told after each commit of the policies it stored (documents by ``namespace/name``)
        self.on_policies = on_policies
        self.clock = clock
        self.notify = notify
        self.max_batch = max_batch
        self._waiting: list[_Waiting] = []
        self._writer: asyncio.Task[None] | None = None
        #: transactions written, and submissions stored in them (for the benchmark's log)
        self.batches = 0
        self.submissions = 0

    async def accept(
        self,
        new: Sequence[NewJob],
        audit: Mapping[str, Any] | None = None,
        *,
        changes: bool = False,
        policies: Sequence[NewPolicy] = (),
    ) -> list[Accepted]:
        """Store ``new`` and ``policies`` in the next batch; its jobs in order, or
        :class:`NameTaken` (and then no policy is stored).

        ``audit``: the submission's audit record but its time, status and detail,
        written in the same transaction with the status its answer has (201 when
        it created a job, stored a policy, or ``changes`` something else, such as
        a training runtime; 200 when every job existed; 409 with the reason when
        a name is taken)."""
        waiting = _Waiting(
            list(new),
            asyncio.get_running_loop().create_future(),
            audit,
            changes or bool(policies),
            list(policies),
        )
        self._waiting.append(waiting)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_all(), name="fleet-intake")
        return await asyncio.shield(waiting.result)

    async def close(self) -> None:
        """Wait for the batch being written (submissions after this are not stored)."""
        if self._writer is not None:
            await self._writer

    async def _write_all(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[: self.max_batch], self._waiting[self.max_batch :]
            if not await self._write(batch) and len(batch) > 1:
                for one in batch:  # one bad submission must not fail the others
                    await self._write([one])

    async def _write(self, batch: list[_Waiting]) -> bool:
        """Store ``batch`` in one transaction; False if the database refused it."""
        try:
            async with self.db.write() as session:
                now = self.clock.now()
                outcomes = await _store(session, [w.jobs for w in batch], [now] * len(batch))
                stored = _stored_policies(batch, outcomes)
                await configuration.put_policies(
                    session,
                    [
                        configuration.PolicyValues(
                            p.namespace,
                            p.name,
                            str(p.document.get("apiVersion") or ""),
                            json.dumps(p.document, separators=(",", ":"), sort_keys=True),
                            p.author,
                        )
                        for p in stored.values()
                    ],
                    now,
                )
                records = [
                    _audit_record(w.audit, outcome, now, w.changes)
                    for w, outcome in zip(batch, outcomes, strict=True)
                    if w.audit is not None
                ]
                await admin_rows.insert_audits(session, records)
                if self.also is not None:
                    created = [
                        a.head.id for o in outcomes if isinstance(o, list) for a in o if a.created
                    ]
                    await self.also(session, created)
        except Exception as e:
            if len(batch) == 1:
                _settle(batch[0].result, e)
            return False
        self.batches += 1
        self.submissions += len(batch)
        if stored and self.on_policies is not None:
            self.on_policies({key: p.document for key, p in stored.items()})
        told = [a.job for o in outcomes if isinstance(o, list) for a in o if a.job is not None]
        if told:
            self.notify(sorted(told, key=lambda job: job.seq))
        for waiting, outcome in zip(batch, outcomes, strict=True):
            _settle(waiting.result, outcome)
        return True


@dataclass(frozen=True, slots=True)
class _Waiting:
    jobs: list[NewJob]
    result: asyncio.Future[list[Accepted]]
    audit: Mapping[str, Any] | None = None
    changes: bool = False
    policies: list[NewPolicy] = field(default_factory=list)


def _stored_policies(
    batch: Sequence[_Waiting], outcomes: Sequence[list[Accepted] | NameTaken]
) -> dict[str, NewPolicy]:
    """The policies of the accepted submissions of ``batch``, by key (a later one wins)."""
    return {
        p.key: p
        for w, outcome in zip(batch, outcomes, strict=True)
        if not isinstance(outcome, NameTaken)
        for p in w.policies
    }


def _audit_record(
    values: Mapping[str, Any], outcome: list[Accepted] | NameTaken, now: float, changes: bool
) -> dict[str, Any]:
    """The audit record of a submission stored with ``outcome``: the status and the
    detail its answer has."""
    if isinstance(outcome, NameTaken):
        status, detail = 409, str(outcome)[:1000]
    else:
        status, detail = 201 if changes else answer_status(outcome), ""
    return {**values, "time": now, "status": status, "detail": detail}


def answer_status(accepted: Sequence[Accepted]) -> int:
    """201 when the submission created a job, 200 when every job existed already."""
    return 201 if any(a.created for a in accepted) else 200


def _settle(future: asyncio.Future[list[Accepted]], outcome: list[Accepted] | Exception) -> None:
    if future.done():  # its caller went away
        return
    if isinstance(outcome, Exception):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)


async def _store(
    session: Session, submissions: Sequence[Sequence[NewJob]], times: Sequence[float]
) -> list[list[Accepted] | NameTaken]:
    """Decide and write each submission in order, at its time; what became of each."""
    names = [(n.namespace, n.name) for new in submissions for n in new]
    stored = await job_rows.heads_by_names(session, names)
    # A resubmitted job that is still Queued is handed to the loop again (which
    # ignores jobs it knows): its first submission may have been stored by a
    # commit whose answer was lost, before the loop was told.
    queued = await job_rows.records(
        session, [h.id for h in stored.values() if h.state == JobState.QUEUED.value]
    )
    #: jobs this batch creates: key -> (spec hash, index into ``rows``)
    claimed: dict[str, tuple[str, int]] = {}
    rows: list[dict[str, Any]] = []
    #: ended runs whose names this batch gives to new runs
    superseded: list[int] = []
    plans: list[list[tuple[NewJob, job_rows.JobHead | int]] | NameTaken] = []
    for new, now in zip(submissions, times, strict=True):
        taken = [
            n.job.key
            for n in new
            if (n.job.key in claimed and claimed[n.job.key][0] != n.spec_hash)
            or (
                n.job.key not in claimed
                and n.job.key in stored
                and _holds_name(stored[n.job.key], n.spec_hash)
                and stored[n.job.key].spec_hash != n.spec_hash
            )
        ]
        if taken:
            plans.append(NameTaken(taken))
            continue
        plan: list[tuple[NewJob, job_rows.JobHead | int]] = []
        for item in new:
            key = item.job.key
            if key in claimed:
                plan.append((item, -1 - claimed[key][1]))  # created earlier in this batch
            elif key in stored and _holds_name(stored[key], item.spec_hash):
                plan.append((item, stored[key]))
            else:
                if key in stored:
                    superseded.append(stored[key].id)
                claimed[key] = (item.spec_hash, len(rows))
                plan.append((item, len(rows)))
                rows.append(_row(item, now))
        plans.append(plan)
    await job_rows.supersede(session, superseded)
    ids = await job_rows.insert_jobs(session, rows)
    await job_rows.insert_events(
        session,
        [
            job_rows.EventValues(
                i, row["created_at"], JobState.QUEUED.value, f"queued in {row['queue']}"
            )
            for i, row in zip(ids, rows, strict=True)
        ],
    )
    out: list[list[Accepted] | NameTaken] = []
    for decided in plans:
        if isinstance(decided, NameTaken):
            out.append(decided)
            continue
        accepted: list[Accepted] = []
        for item, where in decided:
            if isinstance(where, job_rows.JobHead):
                record = queued.get(where.id)
                again = None if record is None else snapshot.job_from_plain(record, seq=where.id)
                accepted.append(Accepted(where, created=False, job=again))
                continue
            index = where if where >= 0 else -1 - where
            row = rows[index]
            head = job_rows.JobHead(
                ids[index],
                row["uid"],
                item.namespace,
                item.name,
                row["queue"],
                row["spec_hash"],
                JobState.QUEUED.value,
            )
            if where >= 0:
                accepted.append(Accepted(head, True, replace(item.job, seq=ids[index])))
            else:
                accepted.append(Accepted(head, created=False))
        out.append(accepted)
    return out


def _holds_name(head: job_rows.JobHead, spec_hash: str) -> bool:
    """Whether the stored run ``head`` answers a submission of its name with
    ``spec_hash`` (same spec: unchanged; another: 409) rather than giving the name
    to a new run: a live job always does, a cancelled one never, one that
    Succeeded or Failed only for the same spec."""
    if head.state == JobState.CANCELLED.value:
        return False
    if head.state in _ENDED:
        return head.spec_hash == spec_hash
    return True


_ENDED = frozenset({JobState.SUCCEEDED.value, JobState.FAILED.value})


def _row(item: NewJob, now: float) -> dict[str, Any]:
    job = item.job
    return {
        "uid": str(uuid.uuid4()),
        "namespace": item.namespace,
        "name": item.name,
        "spec_hash": item.spec_hash,
        "manifest": item.manifest,
        "policy": item.policy,
        "policy_source": item.policy_source,
        # ``seq`` is the row id, given when the job is read back (snapshot.job_from_plain)
        "record": snapshot.job_to_plain(replace(job, seq=0)),
        "queue": job.queue,
        "priority_class": job.priority_class,
        "priority": job.priority,
        "state": JobState.QUEUED.value,
        "units": [],
        "reason": "",
        "suspended": item.suspended,
        "created_at": now,
        "updated_at": now,
    }
