"""Events in: the one way anything outside the cycle changes the scheduler state.

Theory of operation (dask's worker state machine, h11): the shell tells the
core what happened as frozen event values, and :func:`apply` changes the
:class:`~fleet.core.state.SchedulerState` accordingly and returns what
followed: the job :class:`~fleet.core.state.Transition` s it caused (each
through :func:`fleet.core.lifecycle.transition`, for the shell to persist).
What members report comes in as ``MemberJob*`` events, which hold the
rules for late and repeated reports (a report that no longer applies
changes nothing), so that the shell only translates.
Decisions come out of :func:`fleet.core.cycle.cycle`; nothing else changes
the state, and the placers' own mutators are reached only through here and
the cycle.  An event that cannot be applied raises and changes nothing.
Time moves only by ``ClockAdvanced``, which also ends the running jobs
whose run time reached their deadline or their queue's ``maxRuntime``
(:func:`_expire`, :mod:`fleet.core.run_limits`): failed, or preempted to be
queued again, each transition carrying the event reason
(``DeadlineExceeded``, ``MaxRuntimeExceeded``); the shell stops their pods.
A change of clusters or node health counts the members' capacity again
and gives a root of ``capacity: auto`` its new figures (:func:`_recounted`,
:mod:`fleet.core.inventory`); a replaced tree's auto root is filled in too.
A running job an event stops (a bad node, its cells evicted, a failover
of a job its member had created, its member removed) carries why on its
transition (:class:`~fleet.core.decisions.Preemption`: ``NodeHealth``,
``Evicted``, ``Failover``, ``ClusterRemoved``; no preemptor, no quota path)
for the shell to record as the cycle's preemptions are.
Every transition an event causes carries its message in plain words
(:mod:`fleet.core.wording`), which the shell logs with the job's event:
``Dispatched`` names the cluster, the pods and the GPUs; ``Running`` that
all the pods run, and where; ``Succeeded`` and ``Failed`` how long the job
ran (its run time over all its runs) and what its member said.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from fleet.core import inventory, lifecycle, run_limits, wording
from fleet.core.decisions import (
    CLUSTER_REMOVED,
    EVICTED,
    FAILOVER,
    MAX_RUNTIME,
    NODE_HEALTH,
    Preemption,
)
from fleet.core.jobs import Job
from fleet.core.lifecycle import JobState
from fleet.core.placement import Placer, RestoreError, restore_order
from fleet.core.quota import UNCHANGED, MaxRuntimeAction, QuotaNodeSpec, QuotaTree, _Unchanged
from fleet.core.resources import GPU, Resources
from fleet.core.state import Running, SchedulerState, Transition, Unit, UnknownJob


@dataclass(frozen=True, slots=True)
class Submitted:
    """A new job to queue."""

    job: Job


@dataclass(frozen=True, slots=True)
class Dispatched:
    """The admitted job was created in its member cluster."""

    key: str


@dataclass(frozen=True, slots=True)
class Started:
    """The dispatched job's pods are running."""

    key: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The running job ended by itself: succeeded, or failed."""

    key: str
    succeeded: bool = True
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Cancelled:
    """A user cancelled the job (pending, running or being preempted)."""

    key: str
    reason: str = "cancelled"


@dataclass(frozen=True, slots=True)
class DispatchFailed:
    """The member refused the admitted job: queue it again (not a preemption)."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class FailedOver:
    """The job was unhealthy in its member for too long: queue it again, away from that member.

    Its cells and quota are released; the job is queued with the member it
    ran in taken out of its allowed clusters (all clusters when it had no
    affinity), so the next admission places it elsewhere.
    """

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class Stopped:
    """The preempted job's pods are gone: queue it again."""

    key: str


@dataclass(frozen=True, slots=True)
class MemberJobStarted:
    """A member reports the job's pods running.  Reports arrive late and twice (watches
    relist, restarts): the job is Started only while Dispatched; otherwise nothing."""

    key: str


@dataclass(frozen=True, slots=True)
class MemberJobFinished:
    """A member reports the job ended by itself.  A job still Admitted (the member
    created and finished it before its creation was recorded) is Dispatched first;
    a job that holds cells is Finished; a report about any other job changes nothing."""

    key: str
    succeeded: bool = True
    reason: str = ""


@dataclass(frozen=True, slots=True)
class MemberJobStopped:
    """A member reports the job's pods gone: a preempted job being stopped is Stopped;
    a report about any other job (an old copy, a cancelled one) changes nothing."""

    key: str


@dataclass(frozen=True, slots=True)
class NodeHealthChanged:
    """A node of a member cluster went bad, or is healthy again (``reason``: why)."""

    cluster: str
    node: str
    healthy: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Evicted:
    """A running job loses its cells (a new cell config of its member cannot hold
    it again): preempted at once, as on a bad node, with ``reason``."""

    key: str
    reason: str


@dataclass(frozen=True, slots=True)
class QuotaTreeReplaced:
    """A whole new quota tree."""

    root: QuotaNodeSpec


@dataclass(frozen=True, slots=True)
class QuotaNodePatched:
    """One node's ``min``, ``max`` (None: unlimited) or ``namespaces`` changed."""

    name: str
    min: Resources | None = None
    max: Resources | object | None = UNCHANGED
    namespaces: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ClusterAdded:
    """A new member cluster, with its (empty) placer."""

    placer: Placer


@dataclass(frozen=True, slots=True)
class ClusterReplaced:
    """A member cluster's cell config changed: its new (empty) placer.

    Refused (:class:`ClusterInUse`, nothing changes) unless every unit
    running there is held again at the same cells by the new placer.
    """

    placer: Placer


@dataclass(frozen=True, slots=True)
class ClusterDraining:
    """Admit nothing new to a member cluster; its running jobs finish there."""

    name: str


@dataclass(frozen=True, slots=True)
class ClusterReadiness:
    """A member cluster is ready, or not (unreachable, refusing Fleet, no CRD).

    Nothing new is admitted to a member that is not ready; its running jobs
    stay (failover, in the shell, decides when they go elsewhere).
    """

    name: str
    ready: bool


class ClusterInUse(ValueError):
    """A cluster change that running jobs forbid; ``jobs`` names them."""

    def __init__(self, message: str, jobs: list[str]) -> None:
        super().__init__(message)
        self.jobs = jobs


@dataclass(frozen=True, slots=True)
class ClusterRemoved:
    """A member cluster is gone: its running jobs are queued again."""

    name: str


@dataclass(frozen=True, slots=True)
class ClockAdvanced:
    """Time moved on to ``now`` (seconds; never backwards).  Running jobs whose run
    time reached a limit by then end (:func:`_expire`)."""

    now: float


@dataclass(frozen=True, slots=True)
class FairUsageRestored:
    """After a restart: each queue's decayed average held (:mod:`fleet.core.fair_share`)
    as stored at ``at``; the next ``ClockAdvanced`` decays it to its time."""

    averages: Mapping[str, Mapping[str, float]]
    at: float


@dataclass(frozen=True, slots=True)
class QuotaCutsRestored:
    """After a restart: the grace in force before a cut node's newest over-limit jobs
    are preempted (``--quota-cut-grace``; None: never), and since when each node was
    over its limits as stored; nodes no longer over are forgotten."""

    grace: float | None
    since: Mapping[str, float]


Event = (
    Submitted
    | Dispatched
    | Started
    | Finished
    | Cancelled
    | DispatchFailed
    | FailedOver
    | Stopped
    | NodeHealthChanged
    | Evicted
    | QuotaTreeReplaced
    | QuotaNodePatched
    | ClusterAdded
    | ClusterReplaced
    | ClusterDraining
    | ClusterReadiness
    | ClusterRemoved
    | ClockAdvanced
    | FairUsageRestored
    | QuotaCutsRestored
    | MemberJobStarted
    | MemberJobFinished
    | MemberJobStopped
)

#: What followed from an event: the job transitions it caused.
Outcome = Transition


def apply(state: SchedulerState, event: Event) -> list[Outcome]:
    """Apply one event to ``state``; what followed from it."""
    match event:
        case Submitted():
            return _submitted(state, event)
        case Dispatched():
            return _dispatched(state, event)
        case Started():
            return _started(state, event)
        case Finished():
            return _finished(state, event)
        case Cancelled():
            return _cancelled(state, event)
        case DispatchFailed():
            return _dispatch_failed(state, event)
        case FailedOver():
            return _failed_over(state, event)
        case Stopped():
            return _stopped(state, event)
        case NodeHealthChanged():
            return _recounted(state, _node_health(state, event))
        case Evicted():
            if event.key not in state.running:
                raise UnknownJob(event.key)
            return [_preempt_at_once(state, event.key, event.reason, EVICTED)]
        case QuotaTreeReplaced():
            return _tree_replaced(state, event)
        case QuotaNodePatched():
            return _node_patched(state, event)
        case ClusterAdded():
            return _recounted(state, _cluster_added(state, event))
        case ClusterReplaced():
            return _recounted(state, _cluster_replaced(state, event))
        case ClusterDraining():
            return _recounted(state, _cluster_draining(state, event))
        case ClusterReadiness():
            return _cluster_readiness(state, event)
        case ClusterRemoved():
            return _recounted(state, _cluster_removed(state, event))
        case ClockAdvanced():
            return _clock(state, event)
        case QuotaCutsRestored():
            return _cuts_restored(state, event)
        case FairUsageRestored():
            state.fair.restore(event.averages, event.at)
            state.refresh_fair_keys()
            return []
        case MemberJobStarted():
            if state.phase.get(event.key) is JobState.DISPATCHED:
                return _started(state, Started(event.key))
            return []
        case MemberJobFinished():
            if state.phase.get(event.key) is JobState.ADMITTED:
                _dispatched(state, Dispatched(event.key))  # recorded by the finish
            if state.phase.get(event.key) in lifecycle.HOLDING:
                return _finished(state, Finished(event.key, event.succeeded, event.reason))
            return []
        case MemberJobStopped():
            if event.key in state.stopping:
                return _stopped(state, Stopped(event.key))
            return []
    raise TypeError(f"not an event: {event!r}")


def _submitted(state: SchedulerState, event: Submitted) -> list[Outcome]:
    return [state.submit(event.job)]


def _phase_of(state: SchedulerState, key: str) -> JobState:
    phase = state.phase.get(key)
    if phase is None:
        raise UnknownJob(key)
    return phase


def _dispatched(state: SchedulerState, event: Dispatched) -> list[Outcome]:
    run = state.running.get(event.key)
    why = ""
    if run is not None:
        pods = run.pods
        gpus = sum(len(p.gpus) for p in pods)
        why = (
            f"created in cluster {run.cluster}: {wording.count(len(pods), 'pod')}, "
            f"{wording.amount(GPU, gpus)}"
        )
    return [state.move(event.key, JobState.DISPATCHED, why)]


def _started(state: SchedulerState, event: Started) -> list[Outcome]:
    run = state.running.get(event.key)
    why = ""
    if run is not None:
        n = len(run.pods)
        pods = "its pod is" if n == 1 else f"all {n} pods are"
        why = f"{pods} running in cluster {run.cluster}"
    return [state.move(event.key, JobState.RUNNING, why)]


def _finished(state: SchedulerState, event: Finished) -> list[Outcome]:
    new = JobState.SUCCEEDED if event.succeeded else JobState.FAILED
    lifecycle.transition(event.key, _phase_of(state, event.key), new)
    ran = wording.duration(state.run_time(event.key))
    state.release(event.key)
    why = f"{'succeeded' if event.succeeded else 'failed'} after running {ran}"
    if event.reason:
        why += f": {event.reason}"
    return [state.move(event.key, new, why)]


def _cancelled(state: SchedulerState, event: Cancelled) -> list[Outcome]:
    key = event.key
    lifecycle.transition(key, _phase_of(state, key), JobState.CANCELLED)
    if key in state.running:
        state.release(key)
    elif key in state.stopping:
        del state.stopping[key]
    else:
        state.unqueue(key)
    return [state.move(key, JobState.CANCELLED, event.reason)]


def _dispatch_failed(state: SchedulerState, event: DispatchFailed) -> list[Outcome]:
    key = event.key
    lifecycle.transition(key, _phase_of(state, key), JobState.QUEUED)
    job = state.release(key).job
    state.enqueue(job)
    return [state.move(key, JobState.QUEUED, event.reason)]


def _failed_over(state: SchedulerState, event: FailedOver) -> list[Outcome]:
    key = event.key
    old = _phase_of(state, key)
    lifecycle.transition(key, old, JobState.QUEUED)
    run = state.release(key)
    allowed = run.job.clusters if run.job.clusters is not None else frozenset(state.placers)
    state.enqueue(dataclasses.replace(run.job, clusters=allowed - {run.cluster}))
    # Its member had created it: its pods are stopped there (a create refused is not).
    ran = old in (JobState.DISPATCHED, JobState.RUNNING)
    stopped = Preemption(FAILOVER, run.job.queue) if ran else None
    return [state.move(key, JobState.QUEUED, event.reason, preemption=stopped)]


def _stopped(state: SchedulerState, event: Stopped) -> list[Outcome]:
    key = event.key
    if key not in state.stopping:
        raise UnknownJob(key)
    job = state.stopping[key]
    if job.queue not in state.queues:
        del state.stopping[key]
        why = f"queue {job.queue} is no longer in the quota tree"
        return [state.move(key, JobState.CANCELLED, why)]
    del state.stopping[key]
    state.enqueue(job)
    return [state.move(key, JobState.QUEUED, "queued again: its pods stopped after the preemption")]


def _node_health(state: SchedulerState, event: NodeHealthChanged) -> list[Outcome]:
    """Take the node's cells out of (or back into) allocation; preempt the jobs on a bad node.

    Each running job with a pod on a node gone bad is preempted at once (it
    holds nothing any more and waits for its pods to stop, then is queued
    again), whatever its priority, mode or protection: its cells are gone.
    """
    placer = state.placers.get(event.cluster)
    if placer is None:
        raise KeyError(f"no member cluster named {event.cluster!r}")
    units = placer.set_node_health(event.node, event.healthy)
    jobs = dict.fromkeys(state.units[u].job.key for u in units if u in state.units)
    why = f"node {event.node} of {event.cluster} went bad"
    if event.reason:
        why += f": {event.reason}"
    return [_preempt_at_once(state, key, why, NODE_HEALTH) for key in jobs]


def _preempt_at_once(state: SchedulerState, key: str, why: str, cause: str) -> Outcome:
    """Running job ``key`` holds nothing any more and waits for its pods to stop."""
    job = state.release(key).job
    state.stopping[key] = job
    return state.move(key, JobState.PREEMPTED, why, preemption=Preemption(cause, job.queue))


def _cluster_added(state: SchedulerState, event: ClusterAdded) -> list[Outcome]:
    name = event.placer.cluster
    if name in state.placers:
        raise ValueError(f"member cluster {name!r} already exists")
    state.placers[name] = event.placer
    return []


def _cluster_replaced(state: SchedulerState, event: ClusterReplaced) -> list[Outcome]:
    placer = event.placer
    name = placer.cluster
    if name not in state.placers:
        raise KeyError(f"no member cluster named {name!r}")
    units = sorted(
        (
            (run, unit)
            for run in state.running.values()
            if run.cluster == name
            for unit in run.units
        ),
        key=lambda ru: (restore_order(ru[0].job), ru[1].charge.key),
    )
    lost: list[str] = []
    why: list[str] = []
    for run, unit in units:
        try:
            placer.restore(run.job_for(unit), unit.charge, unit.pods)
        except RestoreError as e:
            if run.job.key not in lost:
                lost.append(run.job.key)
                why.append(f"{run.job.key}: {e}")
    if lost:
        raise ClusterInUse(
            f"the new cell config of {name} does not hold running jobs: " + "; ".join(why[:10]),
            lost,
        )
    state.placers[name] = placer
    state.draining.discard(name)  # a new config puts a drained cluster back in service
    return []


def _cluster_draining(state: SchedulerState, event: ClusterDraining) -> list[Outcome]:
    if event.name not in state.placers:
        raise KeyError(f"no member cluster named {event.name!r}")
    state.draining.add(event.name)
    return []


def _cluster_readiness(state: SchedulerState, event: ClusterReadiness) -> list[Outcome]:
    if event.name not in state.placers:
        raise KeyError(f"no member cluster named {event.name!r}")
    if event.ready:
        state.unready.discard(event.name)
    else:
        state.unready.add(event.name)
    return []


def _cluster_removed(state: SchedulerState, event: ClusterRemoved) -> list[Outcome]:
    if event.name not in state.placers:
        raise KeyError(f"no member cluster named {event.name!r}")
    state.draining.discard(event.name)
    state.unready.discard(event.name)
    out: list[Outcome] = []
    why = f"member cluster {event.name} was removed"
    for key in [k for k, run in state.running.items() if run.cluster == event.name]:
        job = state.release(key).job
        state.enqueue(job)
        out.append(
            state.move(key, JobState.QUEUED, why, preemption=Preemption(CLUSTER_REMOVED, job.queue))
        )
    del state.placers[event.name]
    return out


def _clock(state: SchedulerState, event: ClockAdvanced) -> list[Outcome]:
    if event.now < state.now:
        raise ValueError(f"the clock cannot go back from {state.now} to {event.now}")
    state.now = event.now
    state.advance_fair(event.now)
    if state.cut_since:
        still = {b.node for b in state.tree.over_limits()}
        state.cut_since = {n: t for n, t in state.cut_since.items() if n in still}
    return _expire(state)


def _expire(state: SchedulerState) -> list[Outcome]:
    """End the running jobs due by now (:mod:`fleet.core.run_limits`), earliest first.

    A job at its own deadline, or at its queue's ``maxRuntime`` with the action
    ``Fail``, fails; with ``Requeue`` it is preempted at once (it holds nothing
    and is queued again once its pods stopped) and its run time starts afresh.
    """
    out: list[Outcome] = []
    for key in state.dues.pop_due(state.now):
        run = state.running.get(key)
        limit = None if run is None else state.run_limit(run.job)
        if run is None or limit is None:
            continue  # pragma: no cover - a due job runs and has a limit
        job = run.job
        why = run_limits.reason(limit, state.run_time(key), job.queue)
        state.release(key)
        if limit.action is MaxRuntimeAction.REQUEUE:
            state.stopping[key] = job
            requeued = Preemption(MAX_RUNTIME, job.queue)
            out.append(state.move(key, JobState.PREEMPTED, why, limit.event, requeued))
            state.ran.pop(key, None)  # a fresh count
        else:
            out.append(state.move(key, JobState.FAILED, why, limit.event))
    return out


def _tree_replaced(state: SchedulerState, event: QuotaTreeReplaced) -> list[Outcome]:
    return _retree(state, QuotaTree.build(inventory.with_capacity(event.root, state.inventory)))


def _recounted(state: SchedulerState, out: list[Outcome]) -> list[Outcome]:
    """After a change of clusters or node health: count the inventory again and, when
    it changed under a root of ``capacity: auto``, give the root the new figures.

    The members' capacity changed, not the administrator's tree: a root left
    over its new ``max`` (a member draining with its jobs still running)
    admits nothing new until it is within it, but no quota cut starts, so
    ``--quota-cut-grace`` never preempts for it.
    """
    if not state.refresh_inventory() or not state.tree.auto:
        return out
    root = state.tree.to_spec()
    filled = inventory.with_capacity(root, state.inventory)
    if filled.min == root.min and filled.max == root.max:
        return out
    cut = state.cut_since.get(root.name)
    out = out + _retree(state, QuotaTree.build(filled))
    if cut is None:
        state.cut_since.pop(root.name, None)
    else:
        state.cut_since[root.name] = cut
    return out


def _node_patched(state: SchedulerState, event: QuotaNodePatched) -> list[Outcome]:
    tree = state.tree.copy()
    new_max = event.max
    if not isinstance(new_max, Resources | _Unchanged | None):
        raise TypeError("max must be Resources, None or UNCHANGED")
    tree.set_node(
        event.name,
        min=event.min,
        max=new_max,
        namespaces=event.namespaces,
    )
    return _retree(state, QuotaTree.build(tree.to_spec()))


def _route(tree: QuotaTree, job: Job) -> str | None:
    """The leaf ``job`` belongs to under ``tree`` (None: no leaf takes it)."""
    if job.queue_from_namespace:
        return tree.queue_for_namespace(job.namespace)
    return job.queue if tree.has_node(job.queue) and tree.is_leaf(job.queue) else None


def _homeless(job: Job) -> str:
    return f"no leaf of the quota tree takes queue {job.queue} or namespace {job.namespace}"


def _retree(state: SchedulerState, tree: QuotaTree) -> list[Outcome]:
    """Switch to the validated ``tree``: carry running charges over, re-route the rest.

    * A running job whose leaf still exists keeps its charges there (usage
      above a lowered ``max`` is grandfathered), even if its namespace moved.
    * A running job whose leaf is gone is held again, at the same cells, in
      the leaf its namespace now belongs to; if there is none, or its placer
      cannot hold it there, it is failed with the reason (its pods stop).
    * Pending and preempted jobs follow their namespace (or keep their named
      queue); a job no leaf takes any more is failed with the reason.
    """
    out: list[Outcome] = []
    old = state.tree
    state.tree = tree
    for key in list(state.running):
        run = state.running[key]
        if tree.has_node(run.job.queue) and tree.is_leaf(run.job.queue):
            for unit in run.units:
                tree.admit(unit.charge)
            continue
        leaf = _route(tree, run.job) if run.job.queue_from_namespace else None
        why = _homeless(run.job)
        if leaf is not None:
            moved = _rehome(state, run, leaf)
            if moved is None:
                continue
            why = moved
        for unit in run.units:
            state.placers[run.cluster].release(unit.charge.key)
            del state.units[unit.charge.key]
            state.count_unit(run.cluster, unit, -1)
        del state.running[key]
        out.append(state.move(key, JobState.FAILED, why))
    del old  # its usage is not carried: every kept unit was charged to ``tree``
    tree.grandfather()
    state.refresh_fair_keys()  # the decayed usage is kept by queue name
    # A node still over since an earlier change keeps that change's time.
    state.cut_since = {b.node: state.cut_since.get(b.node, state.now) for b in tree.over_limits()}
    pending = state.pending()
    for job in pending:
        state.unqueue(job.key)
    state.sync_queues()
    for job in pending:
        leaf = _route(tree, job)
        if leaf is None:
            out.append(state.move(job.key, JobState.FAILED, _homeless(job)))
            continue
        state.enqueue(job if leaf == job.queue else dataclasses.replace(job, queue=leaf))
    for key, job in list(state.stopping.items()):
        leaf = _route(tree, job)
        if leaf is None:
            del state.stopping[key]
            out.append(state.move(key, JobState.FAILED, _homeless(job)))
        elif leaf != job.queue:
            state.stopping[key] = dataclasses.replace(job, queue=leaf)
    for run in state.running.values():  # the tree's maxRuntime may have changed
        state.schedule_due(run)
    return out


def _rehome(state: SchedulerState, run: Running, leaf: str) -> str | None:
    """Hold a running job's units again under queue ``leaf`` at the same cells.

    Returns None when done, else why not (then the job holds nothing in its
    placer and is not charged, and the caller fails it).
    """
    placer = state.placers[run.cluster]
    units = list(run.units)
    for unit in units:
        placer.release(unit.charge.key)
        del state.units[unit.charge.key]
        state.count_unit(run.cluster, unit, -1)
    run.units.clear()
    run.job = dataclasses.replace(run.job, queue=leaf)
    held: list[Unit] = []
    for unit in units:
        charge = dataclasses.replace(unit.charge, queue=leaf)
        moved = Unit(charge, unit.pods)
        try:
            placer.restore(run.job_for(moved), charge, unit.pods)
        except RestoreError as e:
            for done in held:
                placer.release(done.charge.key)
                state.tree.release(done.charge.key)
                del state.units[done.charge.key]
                state.count_unit(run.cluster, done, -1)
            run.units.clear()
            return f"its queue was removed and {leaf} cannot hold its cells: {e}"
        state.hold(run, charge, unit.pods)
        held.append(moved)
    return None


def _cuts_restored(state: SchedulerState, event: QuotaCutsRestored) -> list[Outcome]:
    state.cut_grace = event.grace
    over = {b.node for b in state.tree.over_limits()}
    state.cut_since = {node: since for node, since in event.since.items() if node in over}
    return []
