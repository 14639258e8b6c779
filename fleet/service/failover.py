"""Application failover: jobs unhealthy in their member for too long go elsewhere.

Theory of operation (Karmada's application failover, with the clock kept in
the database): a running job is *unhealthy* while its member is not ready
(:class:`~fleet.clusters.base.MemberReadiness`), while a node one of its pods
is planned on is bad (:class:`~fleet.clusters.base.NodeHealth`), or while
its PyTorchJob keeps restarting (:class:`~fleet.clusters.base.JobRestarting`).
:class:`Failover` remembers since when (the first time; a table row, read
and written through :mod:`fleet.store.jobs`, so a restart of Fleet does not
reset the clock) and, once the job has been
unhealthy for its policy's ``failover.application.decisionConditions.
tolerationSeconds`` (default 300), tells the loop to fail it over: the core
queues it again without that member (:class:`fleet.core.events.FailedOver`),
and the old copy is purged per ``purgeMode``:

* ``Directly``: deleted in the old member at once (retried until the
  member confirms it is gone);
* ``Gracefully``: deleted once the new copy runs elsewhere (or has ended);
* ``Never``: left where it is.

A PyTorchJob that restarts, and one that runs well again, is recorded as a
job event (``Restarting``, ``Recovered``); the job stays ``Running``.

A purge is an intent of kind ``purge-directly`` or ``purge-gracefully``,
kept open until the old member reports the copy stopped (or had nothing to
delete), and taken up again after a restart.  A job with no other allowed
member is not failed over; it waits where it is.  A job's reason names a
member that is not ready without the member's own message, which only admin
tokens read (``GET /api/v1/clusters``).

The events of a member about a job that no longer runs there (an old copy)
are this module's business, not the core's: :meth:`Failover.observe` tells
the loop to drop them.  After a restart, a stored clock is kept until the
job's member has said whether it is ready, so a member that is still down
keeps its old clock.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from fleet.clusters.base import (
    ClusterError,
    JobRestarting,
    JobStopped,
    MemberCluster,
    MemberEvent,
    MemberReadiness,
    NodeHealth,
)
from fleet.core import snapshot
from fleet.core.jobs import Job
from fleet.core.lifecycle import JobState
from fleet.core.state import SchedulerState
from fleet.store import jobs as job_rows
from fleet.store.database import Database, Session
from fleet.store.models import JobRow

log = logging.getLogger("fleet.service.failover")

DEFAULT_TOLERATION: Final = 300
PURGE_DIRECTLY: Final = "purge-directly"
PURGE_GRACEFULLY: Final = "purge-gracefully"
_PURGE_KINDS: Final = {"Directly": PURGE_DIRECTLY, "Gracefully": PURGE_GRACEFULLY}
_OLD_SPELLINGS: Final = {"Immediately": "Directly", "Graciously": "Gracefully"}
#: Seconds after start within which a stored clock waits for its member to report.
RESTART_GRACE: Final = 30.0


@dataclass(frozen=True, slots=True)
class Rule:
    """A job's failover rule: how long it may be unhealthy, and how its old copy goes."""

    toleration: float = DEFAULT_TOLERATION
    purge_mode: str = "Gracefully"


def rule_of(policy: Mapping[str, Any] | None) -> Rule:
    """The rule of a stored PropagationPolicy (validated at submission; defaults else)."""
    spec = (policy or {}).get("spec") or {}
    application = ((spec.get("failover") or {}).get("application")) or {}
    conditions = application.get("decisionConditions") or {}
    toleration = conditions.get("tolerationSeconds", DEFAULT_TOLERATION)
    mode = application.get("purgeMode", "Gracefully")
    mode = _OLD_SPELLINGS.get(mode, mode)
    if not isinstance(toleration, int) or isinstance(toleration, bool) or toleration < 0:
        toleration = DEFAULT_TOLERATION
    if mode not in ("Directly", "Gracefully", "Never"):
        mode = "Gracefully"
    return Rule(float(toleration), mode)


@dataclass(frozen=True, slots=True)
class Due:
    """Fail job ``key`` over from ``cluster``; ``purge``: the intent kind for its old copy."""

    key: str
    cluster: str
    reason: str
    purge: str | None


@dataclass(slots=True)
class _Purge:
    intent: int
    key: str
    cluster: str
    kind: str
    asked: bool = False  # the member was asked to delete; waiting for JobStopped


class Failover:
    """Failover clocks and purges; see the module docstring.  Only the loop calls it."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.since: dict[str, tuple[str, float, str]] = {}  # key -> (cluster, since, why)
        self.not_ready: dict[str, str] = {}  # cluster -> why
        self.reported: set[str] = set()  # clusters that said whether they are ready
        self.bad_nodes: dict[str, set[str]] = {}
        self.restarting: dict[str, tuple[str, str]] = {}  # key -> (cluster, why)
        self.rules: dict[str, Rule] = {}
        self.purges: list[_Purge] = []
        self.started_at = 0.0
        self._stored: dict[str, int] = {}  # key -> job row id, for the keys with a row
        self._notes: list[tuple[str, float, str, str]] = []  # job events to record

    # Start ---------------------------------------------------------------------------

    async def load(self, ids: Mapping[str, int], now: float) -> None:
        """Stored clocks of the running jobs (``ids``: key -> row id) and open purges."""
        self.started_at = now
        keys = {row_id: key for key, row_id in ids.items()}
        async with self.db.read() as session:
            rows = await job_rows.unhealthy(session)
            intents = await job_rows.open_intents(session)
            purging = [i for i in intents if i.kind in (PURGE_DIRECTLY, PURGE_GRACEFULLY)]
            named = {
                r.id: f"{r.namespace}/{r.name}"
                for r in await job_rows.by_ids(session, sorted({i.job_id for i in purging}))
            }
        orphans: list[int] = []
        for row in rows:
            key = keys.get(row.job_id)
            if key is not None:
                self.since[key] = (row.cluster, row.since, row.reason)
                self._stored[key] = row.job_id
            else:
                orphans.append(row.job_id)  # the job ended before its clock was cleared
        if orphans:
            async with self.db.write() as session:
                await job_rows.forget_unhealthy(session, orphans)
        for intent in purging:
            if intent.job_id in named:
                self.purges.append(
                    _Purge(intent.id, named[intent.job_id], intent.cluster, intent.kind)
                )
        if self.since or self.purges:
            log.info(
                "failover: %d clocks and %d purges restored", len(self.since), len(self.purges)
            )

    # What members say --------------------------------------------------------------

    @property
    def noting(self) -> bool:
        """Whether job events observed are waiting to be written (by :meth:`due`)."""
        return bool(self._notes)

    def observe(self, cluster: str, event: MemberEvent, state: SchedulerState) -> bool:
        """Note ``event``; False when the core must not see it (an old copy's news)."""
        if isinstance(event, MemberReadiness):
            self.reported.add(cluster)
            if event.ready:
                self.not_ready.pop(cluster, None)
            else:
                self.not_ready[cluster] = event.reason
            return True  # the core admits nothing new to a member that is not ready
        if isinstance(event, NodeHealth):
            bad = self.bad_nodes.setdefault(cluster, set())
            (bad.discard if event.healthy else bad.add)(event.node)
            return True
        run = state.running.get(event.key)
        if isinstance(event, JobStopped):
            for purge in self.purges:
                if purge.key == event.key and purge.cluster == cluster and purge.asked:
                    purge.asked = False
                    purge.kind = "done"
            if run is not None and run.cluster != cluster:
                return False
            return not any(p.key == event.key and p.cluster == cluster for p in self.purges)
        if run is not None and run.cluster != cluster:
            return False  # the old copy of a job that failed over
        if isinstance(event, JobRestarting):
            if event.restarting:
                why = event.reason or "its PyTorchJob keeps restarting"
                self.restarting[event.key] = (cluster, why)
                self._notes.append((event.key, event.at, "Restarting", f"in {cluster}: {why}"))
            elif self.restarting.pop(event.key, None) is not None:
                self._notes.append((event.key, event.at, "Recovered", f"runs again in {cluster}"))
            return False
        return True

    # Each iteration ------------------------------------------------------------------

    async def due(self, state: SchedulerState, ids: Mapping[str, int], now: float) -> list[Due]:
        """Update the clocks (stored) and return the jobs whose time is up."""
        if self._notes:
            await self._store({}, ids)
        unhealthy: dict[str, tuple[str, str]] = {}
        signals = self.not_ready or self.restarting or any(self.bad_nodes.values())
        if not signals and not self.since:
            return []
        for key, run in state.running.items() if signals else ():
            why = self.why_unhealthy(key, run.cluster, [p.node for u in run.units for p in u.pods])
            if why:
                unhealthy[key] = (run.cluster, why)
        changed: dict[str, tuple[str, float, str] | None] = {}
        for key, (cluster, why) in unhealthy.items():
            old = self.since.get(key)
            if old is None or old[0] != cluster:
                self.since[key] = (cluster, now, why)
                changed[key] = self.since[key]
        for key in [k for k in self.since if k not in unhealthy]:
            cluster = self.since[key][0]
            waiting = cluster not in self.reported and now - self.started_at < RESTART_GRACE
            if key in state.running and waiting:
                continue  # restored clock: wait until the member says how it is
            del self.since[key]
            changed[key] = None
        self.restarting = {k: v for k, v in self.restarting.items() if k in state.running}
        await self._rules(ids, [k for k in unhealthy if k not in self.rules])
        due: list[Due] = []
        for key, (cluster, since, why) in sorted(self.since.items()):
            if key not in unhealthy:
                continue
            rule = self.rules.get(key, Rule())
            if now - since < rule.toleration:
                continue
            job = state.running[key].job
            allowed = job.clusters if job.clusters is not None else frozenset(state.placers)
            if not allowed - {cluster}:
                continue  # nowhere else to go: it stays
            reason = (
                f"failed over from {cluster}: unhealthy for {now - since:.0f}s "
                f"(tolerationSeconds {rule.toleration:.0f}): {why}"
            )
            purge = _PURGE_KINDS.get(rule.purge_mode)
            due.append(Due(key, cluster, reason, purge))
            del self.since[key]
            self.restarting.pop(key, None)
            changed[key] = None
        await self._store(changed, ids)
        return due

    def why_unhealthy(self, key: str, cluster: str, nodes: Sequence[str]) -> str:
        """Why job ``key``, running in ``cluster`` on ``nodes``, is unhealthy ("" if it is not)."""
        if cluster in self.not_ready:
            # The member's own text (an API server's answer) is for admins (GET
            # /api/v1/clusters) and the log; the job's reason, read by its team, has none.
            return f"member {cluster} is not ready"
        bad = sorted(set(nodes) & self.bad_nodes.get(cluster, set()))
        if bad:
            return f"node {', '.join(bad)} of {cluster} is bad"
        where, why = self.restarting.get(key, ("", ""))
        return why if where == cluster else ""

    async def _rules(self, ids: Mapping[str, int], keys: Sequence[str]) -> None:
        wanted = [ids[k] for k in keys if k in ids]
        if not wanted:
            return
        async with self.db.read() as session:
            rows: list[JobRow] = await job_rows.by_ids(session, wanted)
        for row in rows:
            self.rules[f"{row.namespace}/{row.name}"] = rule_of(row.policy)

    async def _store(
        self, changed: Mapping[str, tuple[str, float, str] | None], ids: Mapping[str, int]
    ) -> None:
        notes, self._notes = self._notes, []
        if not changed and not notes:
            return
        async with self.db.write() as session:
            for key, at, reason, message in notes:
                if key in ids:
                    job_rows.add_event(session, ids[key], at, reason, message, warning=True)
            for key, value in sorted(changed.items()):
                stored = self._stored.pop(key, None)
                if stored is not None:
                    await job_rows.forget_unhealthy(session, [stored])
                row_id = ids.get(key)
                if value is not None and row_id is not None:
                    cluster, since, why = value
                    job_rows.add_unhealthy(session, row_id, cluster, since, why[:2000])
                    self._stored[key] = row_id

    # Purges ---------------------------------------------------------------------------

    async def write(
        self,
        session: Session,
        done: Sequence[Due],
        state: SchedulerState,
        ids: Mapping[str, int],
        now: float,
    ) -> None:
        """Store the failed-over jobs' new allowed clusters and their purge intents
        (in the caller's transaction, with the jobs' transitions)."""
        rows = {
            r.id: r
            for r in await job_rows.by_ids(session, [ids[d.key] for d in done if d.key in ids])
        }
        for d in done:
            row = rows.get(ids.get(d.key, -1))
            if row is None:
                continue
            job = _pending_job(state, d.key)
            if job is not None:
                row.record = snapshot.job_to_plain(job)
            if d.purge is not None:
                intent = job_rows.add_intent(session, row.id, d.purge, d.cluster, now)
                await session.flush()
                self.purges.append(_Purge(intent.id, d.key, d.cluster, d.purge))

    async def purge(self, state: SchedulerState, members: Mapping[str, MemberCluster]) -> list[int]:
        """Ask old members to delete old copies whose time has come; the intents done."""
        done: list[int] = []
        for purge in self.purges:
            if purge.kind == "done":
                done.append(purge.intent)
                continue
            if purge.asked:
                continue
            if purge.kind == PURGE_GRACEFULLY:
                run = state.running.get(purge.key)
                elsewhere = run is not None and run.cluster != purge.cluster
                moved_on = state.phase.get(purge.key) is JobState.RUNNING and elsewhere
                if not moved_on and purge.key in state.phase:
                    continue  # the new copy does not run yet
            member = members.get(purge.cluster)
            if member is None:
                done.append(purge.intent)
                continue
            try:
                stopping = await member.delete(purge.key)
            except ClusterError as e:
                log.info("purging %s in %s: %s; retrying", purge.key, purge.cluster, e)
                continue
            if stopping:
                purge.asked = True
                log.info("purging the old copy of %s in %s", purge.key, purge.cluster)
            else:
                done.append(purge.intent)
        self.purges = [p for p in self.purges if p.intent not in done]
        return done


def _pending_job(state: SchedulerState, key: str) -> Job | None:
    for queue in state.queues.values():
        for job in queue.pending:
            if job.key == key:
                return job
    return None
