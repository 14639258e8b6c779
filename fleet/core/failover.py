"""Application failover's clocks and decisions: jobs unhealthy too long go elsewhere.

Theory of operation (Karmada's application failover): a running job is
*unhealthy* while its member is not ready, while a node one of its pods is
planned on is bad, or while its job in the member keeps restarting.  The
:class:`FailoverBook` remembers since when (the first time; the shell stores
each clock, so a restart of Fleet does not reset it) and, once a job has been
unhealthy for its rule's toleration (a PropagationPolicy's
``failover.application.decisionConditions.tolerationSeconds``, default 300),
:meth:`FailoverBook.due` returns it as :class:`Due`: the shell applies
:class:`fleet.core.events.FailedOver` (the core queues the job again without
that member) and the old copy is purged per the rule's ``purgeMode``:

* ``Directly``: deleted in the old member at once (retried until the member
  confirms it is gone);
* ``Gracefully``: deleted once the new copy runs elsewhere (or has ended);
* ``Never``: left where it is.

A purge (:class:`Purge`) is an intent of kind ``purge-directly`` or
``purge-gracefully``, kept open until the old member reports the copy stopped
(or had nothing to delete); :meth:`FailoverBook.purges_due` says which to ask
for now.  A job with no other allowed member is not failed over; it waits
where it is.  A job's reason names a member that is not ready without the
member's own message, which only admin tokens read.

What members report goes through the book first: the news of a job that no
longer runs in the reporting member (an old copy) is failover's business, not
the core's, and :meth:`FailoverBook.job_report` and
:meth:`FailoverBook.job_stopped` say to drop it; a job that restarts, and one
that runs well again, becomes a :class:`Note` for the job's event log (the
job stays Running).  After a restart of Fleet, a restored clock is kept
until the job's member has said whether it is ready (or
:data:`RESTART_GRACE` has passed), so a member that is still down keeps its
old clock.

Everything here is pure: the shell (:mod:`fleet.service.failover`) loads the
clocks, rules and purges from the store, hands the book what members say, and
writes what :meth:`FailoverBook.due` returns.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from fleet.core.jobs import Job
from fleet.core.lifecycle import JobState
from fleet.core.state import SchedulerState

DEFAULT_TOLERATION: Final = 300
PURGE_DIRECTLY: Final = "purge-directly"
PURGE_GRACEFULLY: Final = "purge-gracefully"
PURGE_KINDS: Final = frozenset({PURGE_DIRECTLY, PURGE_GRACEFULLY})
_PURGE_OF_MODE: Final = {"Directly": PURGE_DIRECTLY, "Gracefully": PURGE_GRACEFULLY}
_OLD_SPELLINGS: Final = {"Immediately": "Directly", "Graciously": "Gracefully"}
#: Seconds after start within which a restored clock waits for its member to report.
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
class Clock:
    """Job unhealthy in ``cluster`` since ``since``, because ``why``."""

    cluster: str
    since: float
    why: str


@dataclass(frozen=True, slots=True)
class Due:
    """Fail job ``key`` over from ``cluster``; ``purge``: the intent kind for its old copy."""

    key: str
    cluster: str
    reason: str
    purge: str | None


@dataclass(frozen=True, slots=True)
class Note:
    """An entry for job ``key``'s event log (a warning)."""

    key: str
    at: float
    reason: str
    message: str


@dataclass(slots=True)
class Purge:
    """Deleting the old copy of ``key`` in ``cluster`` (intent ``intent`` of kind ``kind``)."""

    intent: int
    key: str
    cluster: str
    kind: str
    asked: bool = False  # the member was asked to delete; waiting for it to stop
    done: bool = False  # the member reported the copy stopped


@dataclass(frozen=True, slots=True)
class Turn:
    """What one turn of failover decided: jobs to fail over, clocks set or cleared
    (None: cleared), and notes for the event log."""

    due: tuple[Due, ...] = ()
    clocks: Mapping[str, Clock | None] = field(default_factory=dict)
    notes: tuple[Note, ...] = ()


class FailoverBook:
    """Failover clocks, signals, rules and purges; see the module docstring."""

    def __init__(self, started_at: float = 0.0) -> None:
        self.since: dict[str, Clock] = {}
        self.not_ready: dict[str, str] = {}  # cluster -> why
        self.reported: set[str] = set()  # clusters that said whether they are ready
        self.bad_nodes: dict[str, set[str]] = {}
        self.restarting: dict[str, tuple[str, str]] = {}  # key -> (cluster, why)
        self.rules: dict[str, Rule] = {}
        self.purges: list[Purge] = []
        self.started_at = started_at
        self._notes: list[Note] = []

    def restore(self, clocks: Mapping[str, Clock], purges: Sequence[Purge], now: float) -> None:
        """Take the stored clocks and open purges at a start at ``now``."""
        self.started_at = now
        self.since.update(clocks)
        self.purges.extend(purges)

    # What members say ----------------------------------------------------------------

    @property
    def noting(self) -> bool:
        """Whether notes wait for the next :meth:`due`."""
        return bool(self._notes)

    def member_ready(self, cluster: str, ready: bool, reason: str) -> None:
        self.reported.add(cluster)
        if ready:
            self.not_ready.pop(cluster, None)
        else:
            self.not_ready[cluster] = reason

    def node_health(self, cluster: str, node: str, healthy: bool) -> None:
        bad = self.bad_nodes.setdefault(cluster, set())
        (bad.discard if healthy else bad.add)(node)

    def job_report(self, cluster: str, key: str, state: SchedulerState) -> bool:
        """A job started or ended in ``cluster``: whether the core hears it (not an old copy's)."""
        run = state.running.get(key)
        return run is None or run.cluster == cluster

    def job_stopped(self, cluster: str, key: str, state: SchedulerState) -> bool:
        """A job's pods stopped in ``cluster``: its purge is done; whether the core hears it."""
        for purge in self.purges:
            if purge.key == key and purge.cluster == cluster and purge.asked:
                purge.asked = False
                purge.done = True
        if not self.job_report(cluster, key, state):
            return False
        return not any(p.key == key and p.cluster == cluster for p in self.purges)

    def job_restarting(
        self,
        cluster: str,
        key: str,
        restarting: bool,
        reason: str,
        at: float,
        state: SchedulerState,
    ) -> None:
        """A job keeps restarting in ``cluster`` (or runs well again): a signal and a note."""
        if not self.job_report(cluster, key, state):
            return  # the old copy of a job that failed over
        if restarting:
            why = reason or "its PyTorchJob keeps restarting"
            self.restarting[key] = (cluster, why)
            self._notes.append(Note(key, at, "Restarting", f"in {cluster}: {why}"))
        elif self.restarting.pop(key, None) is not None:
            self._notes.append(Note(key, at, "Recovered", f"runs again in {cluster}"))

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

    # Each iteration -------------------------------------------------------------------

    def _signals(self) -> bool:
        return bool(self.not_ready or self.restarting or any(self.bad_nodes.values()))

    def unhealthy(self, state: SchedulerState) -> dict[str, tuple[str, str]]:
        """The running jobs that are unhealthy now: key -> (cluster, why)."""
        if not self._signals():
            return {}
        found: dict[str, tuple[str, str]] = {}
        for key, run in state.running.items():
            why = self.why_unhealthy(key, run.cluster, [p.node for u in run.units for p in u.pods])
            if why:
                found[key] = (run.cluster, why)
        return found

    def due(
        self,
        state: SchedulerState,
        now: float,
        unhealthy: Mapping[str, tuple[str, str]] | None = None,
    ) -> Turn:
        """Update the clocks and return the jobs whose time is up, with the notes taken.

        ``unhealthy``: :meth:`unhealthy` of ``state``, when the caller has it
        already (the shell reads the rules of those jobs first).
        """
        notes, self._notes = tuple(self._notes), []
        if not self._signals() and not self.since:
            return Turn(notes=notes)
        if unhealthy is None:
            unhealthy = self.unhealthy(state)
        changed: dict[str, Clock | None] = {}
        for key, (cluster, why) in unhealthy.items():
            old = self.since.get(key)
            if old is None or old.cluster != cluster:
                self.since[key] = changed[key] = Clock(cluster, now, why)
        for key in [k for k in self.since if k not in unhealthy]:
            cluster = self.since[key].cluster
            waiting = cluster not in self.reported and now - self.started_at < RESTART_GRACE
            if key in state.running and waiting:
                continue  # restored clock: wait until the member says how it is
            del self.since[key]
            changed[key] = None
        self.restarting = {k: v for k, v in self.restarting.items() if k in state.running}
        due: list[Due] = []
        for key, clock in sorted(self.since.items()):
            if key not in unhealthy:
                continue
            rule = self.rules.get(key, Rule())
            if now - clock.since < rule.toleration:
                continue
            job = state.running[key].job
            allowed = job.clusters if job.clusters is not None else frozenset(state.placers)
            if not allowed - {clock.cluster}:
                continue  # nowhere else to go: it stays
            reason = (
                f"failed over from {clock.cluster}: unhealthy for {now - clock.since:.0f}s "
                f"(tolerationSeconds {rule.toleration:.0f}): {clock.why}"
            )
            due.append(Due(key, clock.cluster, reason, _PURGE_OF_MODE.get(rule.purge_mode)))
            del self.since[key]
            self.restarting.pop(key, None)
            changed[key] = None
        return Turn(tuple(due), changed, notes)

    # Purges ---------------------------------------------------------------------------

    def purges_due(
        self, state: SchedulerState, members: Collection[str]
    ) -> tuple[list[Purge], list[int]]:
        """The purges to ask the old members for now, and the intents done already
        (the copy stopped, or its member is gone)."""
        ask: list[Purge] = []
        done: list[int] = []
        for purge in self.purges:
            if purge.done:
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
            if purge.cluster not in members:
                done.append(purge.intent)
                continue
            ask.append(purge)
        return ask, done

    def purges_finished(self, intents: Collection[int]) -> None:
        """Forget the purges whose intents are done."""
        self.purges = [p for p in self.purges if p.intent not in intents]


def pending_job(state: SchedulerState, key: str) -> Job | None:
    """Job ``key``'s record while it waits in a queue (None: it does not wait)."""
    for queue in state.queues.values():
        for job in queue.pending:
            if job.key == key:
                return job
    return None
