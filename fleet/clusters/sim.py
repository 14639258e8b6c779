"""Simulated member clusters: jobs run in process, on the clock they are given.

Theory of operation: a :class:`SimulatedCluster` implements
:class:`~fleet.clusters.base.MemberCluster` without any real cluster.
Creating a job places all its pods at once, so :class:`JobStarted` is
reported at the creation time; the job then runs for the duration in its
PyTorchJob annotation ``fleet.io/simulated-duration`` (default 60 seconds)
and ends by itself: succeeded, or failed when ``fleet.io/simulated-outcome``
is ``Failed``.  Each running job has one coroutine that sleeps on the
injected :class:`~fleet.clock.Clock` until the job's end and then reports
:class:`JobFinished`; deleting the job cancels that coroutine and reports
:class:`JobStopped` at once.  Nothing here reads the time or sleeps except
through the clock, so on a :class:`~fleet.clock.VirtualClock` the same jobs
give the same events at the same times in the same order every run (jobs
ending at the same time end in the order they were created); on a
:class:`~fleet.clock.RealClock` the same backend serves ``fleet serve``.

Events wait in a queue until :meth:`SimulatedCluster.watch` reads them.  An
ended job stays in the member, as a finished PyTorchJob stays in Kubernetes,
until it is deleted, so creating it again with the same uid still does
nothing; creating a new run of its name (another uid) replaces it, as Fleet
frees a name once its job ended.  A simulator can also mark nodes bad or healthy (reported as
:class:`NodeHealth`; jobs there keep running; :meth:`SimulatedCluster.follow`
says which are bad when the cells change) and make the member
unreachable (:class:`ClusterUnavailable` for create and delete; running jobs
go on).

An invalid duration or outcome annotation is refused at creation with
:class:`ClusterRejected` naming the annotation and the value.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, NoReturn

from fleet.clock import Clock
from fleet.clusters.base import (
    ClusterConflict,
    ClusterHealth,
    ClusterRejected,
    ClusterUnavailable,
    DispatchedJob,
    JobFinished,
    JobStarted,
    JobStopped,
    MemberCluster,
    MemberEvent,
    MemberReadiness,
    NodeHealth,
    QueueWatch,
    split_key,
)

if TYPE_CHECKING:
    from fleet.manifests.topology import Topology

DURATION_ANNOTATION: Final = "fleet.io/simulated-duration"
OUTCOME_ANNOTATION: Final = "fleet.io/simulated-outcome"
#: Seconds a job runs when its PyTorchJob does not say.
DEFAULT_DURATION: Final = 60.0
#: The longest simulated run: ten years of 365 days; longer is a typo.
MAX_DURATION: Final = 10 * 365 * 24 * 3600.0
#: Characters of an offending value that an error message quotes.
MAX_SHOWN: Final = 60

_DURATION = re.compile(r"(?:[0-9]+(?:\.[0-9]+)?(?:ms|s|m|h))+")
_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNIT_SECONDS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _cut(text: str) -> str:
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + "…"


def _show(value: str) -> str:
    """``value`` in double quotes, cut after :data:`MAX_SHOWN` characters."""
    return '"' + _cut(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration: ``90s``, ``5m``, ``2h``, ``1h30m``, ``1.5h``, ``500ms``.

    Numbers (ASCII digits, with an optional fraction), each followed by a
    unit (``ms``, ``s``, ``m``, ``h``), added up: the syntax ``fleet check``
    accepts for the annotation.  Raises ValueError, quoting the text, for anything else,
    and for a duration that is not positive or is longer than
    :data:`MAX_DURATION`.
    """
    if text.startswith("-") and _DURATION.fullmatch(text[1:]):
        raise ValueError(f"{_show(text)} is negative: a duration must be positive")
    if not _DURATION.fullmatch(text):
        raise ValueError(f"{_show(text)} is not a duration (examples: 90s, 5m, 1h30m, 1.5h)")
    seconds = sum(float(n) * _UNIT_SECONDS[unit] for n, unit in _DURATION_PART.findall(text))
    if seconds <= 0:
        raise ValueError(f"{_show(text)} is zero: a duration must be positive")
    if seconds > MAX_DURATION:
        raise ValueError(f"{_show(text)} is longer than ten years")
    return seconds


@dataclass(frozen=True, slots=True)
class SimulatedRun:
    """A job whose pods run in a simulated member: since when, until when, how it ends."""

    job: DispatchedJob
    started: float
    ends: float
    succeeds: bool = True
    reason: str = ""


class SimulatedCluster:
    """A member cluster that runs jobs in process on ``clock``."""

    def __init__(self, name: str, clock: Clock) -> None:
        if not name:
            raise ValueError("a simulated cluster needs a name")
        self._name = name
        self._clock = clock
        self._running: dict[str, SimulatedRun] = {}
        self._timers: dict[str, asyncio.Task[None]] = {}
        self._ended: dict[str, DispatchedJob] = {}
        self._events: asyncio.Queue[MemberEvent | None] = asyncio.Queue()
        self._bad_nodes: set[str] = set()
        self._unreachable: str | None = None
        self._closed = False

    @property
    def name(self) -> str:
        return self._name

    async def create(self, job: DispatchedJob) -> None:
        """Start ``job`` now, as :meth:`.base.MemberCluster.create` says.

        Raises ValueError when the job is dispatched to another cluster.
        """
        self._check_reachable()
        if job.cluster != self._name:
            raise ValueError(f"job {job.key} is dispatched to {job.cluster}, not to {self._name}")
        run = self._running.get(job.key)
        existing = run.job if run is not None else self._ended.get(job.key)
        if existing is not None and run is None and existing.uid != job.uid:
            del self._ended[job.key]  # an ended earlier run of the name: replaced
            existing = None
        if existing is not None:
            if existing.uid == job.uid:
                return
            raise ClusterConflict(
                self._name, f"job {job.key} exists with uid {existing.uid}, not {job.uid}"
            )
        duration, succeeds, reason = self._plan(job)
        now = self._clock.now()
        started = now if job.started is None else min(job.started, now)
        run = SimulatedRun(job, started, started + duration, succeeds, reason)
        self._running[job.key] = run
        self._events.put_nowait(JobStarted(self._name, job.key, job.uid, started))
        self._timers[job.key] = asyncio.create_task(
            self._finish(run), name=f"simulated {self._name}: {job.key}"
        )

    async def resize(self, job: DispatchedJob) -> None:
        """Record the job's new pods; its run keeps its start and end (see the module docstring)."""
        run = self._running.get(job.key)
        if run is not None and run.job.uid == job.uid:
            self._running[job.key] = dataclasses.replace(run, job=job)

    async def delete(self, key: str) -> bool:
        """Delete job ``key``; a running one stops at once and :class:`JobStopped` is reported."""
        split_key(key)
        self._check_reachable()
        self._ended.pop(key, None)
        run = self._running.pop(key, None)
        if run is None:
            return False
        timer = self._timers.pop(key)
        timer.cancel()
        self._events.put_nowait(JobStopped(self._name, key, run.job.uid, self._clock.now()))
        await asyncio.wait([timer])
        return True

    def watch(self) -> QueueWatch:
        """The events of this member in the order they happened; ends after :meth:`close`."""
        return QueueWatch(self._events)

    def status_of(self, key: str) -> None:
        """A simulated member holds no objects: Fleet's own state is the whole status."""
        return None

    async def health(self) -> ClusterHealth:
        if self._closed:
            return ClusterHealth(False, "closed")
        if self._unreachable is not None:
            return ClusterHealth(False, self._unreachable)
        return ClusterHealth(True, f"simulated, {len(self._running)} jobs running")

    async def close(self) -> None:
        """Stop every job's coroutine (the jobs stay as they were); watchers end."""
        if self._closed:
            return
        self._closed = True
        timers = list(self._timers.values())
        self._timers.clear()
        for timer in timers:
            timer.cancel()
        if timers:
            await asyncio.wait(timers)
        self._events.put_nowait(None)

    # Inspection and fault injection, for tests and the simulator.

    def running(self) -> dict[str, SimulatedRun]:
        """The jobs whose pods run, by key, in the order they were created."""
        return dict(self._running)

    def set_node_health(self, node: str, healthy: bool) -> None:
        """Mark ``node`` bad or healthy again; a change is reported as :class:`NodeHealth`."""
        if healthy == (node not in self._bad_nodes):
            return
        if healthy:
            self._bad_nodes.discard(node)
        else:
            self._bad_nodes.add(node)
        self._events.put_nowait(NodeHealth(self._name, node, healthy, self._clock.now()))

    def follow(self, nodes: Sequence[str], topology: Topology | None) -> list[str]:
        """The cells now have ``nodes``: the bad ones among them (a node that left is
        forgotten; :class:`~fleet.clusters.base.FollowsNodes`)."""
        self._bad_nodes &= set(nodes)
        return [n for n in nodes if n in self._bad_nodes]

    def set_reachable(self, reachable: bool, message: str = "unreachable") -> None:
        """Make create and delete fail with ``message`` (or work again); jobs keep running.

        A change is reported as :class:`MemberReadiness` (failover's clock).
        """
        changed = (self._unreachable is None) != reachable
        self._unreachable = None if reachable else message
        if changed:
            why = "" if reachable else message
            self._events.put_nowait(MemberReadiness(self._name, reachable, why, self._clock.now()))

    # Internals.

    def _check_reachable(self) -> None:
        if self._closed:
            raise ClusterUnavailable(self._name, "the simulated cluster is closed")
        if self._unreachable is not None:
            raise ClusterUnavailable(self._name, self._unreachable)

    def _plan(self, job: DispatchedJob) -> tuple[float, bool, str]:
        """How long ``job`` runs, whether it succeeds, and why not; from its annotations."""
        annotations = job.annotations
        duration = DEFAULT_DURATION
        text = annotations.get(DURATION_ANNOTATION)
        if text is not None:
            if not isinstance(text, str):
                self._reject(job, DURATION_ANNOTATION, f"{_cut(repr(text))} is not a string")
            try:
                duration = parse_duration(text)
            except ValueError as e:
                self._reject(job, DURATION_ANNOTATION, str(e))
        outcome = annotations.get(OUTCOME_ANNOTATION)
        if outcome is None or outcome == "Succeeded":
            return duration, True, ""
        if outcome == "Failed":
            return duration, False, f"simulated failure ({OUTCOME_ANNOTATION}: Failed)"
        shown = _show(outcome) if isinstance(outcome, str) else _cut(repr(outcome))
        self._reject(job, OUTCOME_ANNOTATION, f"{shown} is not Succeeded or Failed")

    def _reject(self, job: DispatchedJob, annotation: str, why: str) -> NoReturn:
        raise ClusterRejected(self._name, f"job {job.key}: annotation {annotation}: {why}")

    async def _finish(self, run: SimulatedRun) -> None:
        """Sleep until the job's end, then end it."""
        await self._clock.sleep_until(run.ends)
        key = run.job.key
        del self._running[key]
        del self._timers[key]
        self._ended[key] = run.job
        self._events.put_nowait(
            JobFinished(self._name, key, run.job.uid, self._clock.now(), run.succeeds, run.reason)
        )


if TYPE_CHECKING:
    # mypy checks that a simulated cluster is a member cluster.
    _MEMBER: type[MemberCluster] = SimulatedCluster
