"""The scheduler's in-memory world: queues of pending jobs and running jobs.

Theory of operation: :class:`SchedulerState` owns the quota tree, one placer
per member cluster, the pending jobs of every leaf queue (kept sorted by
priority, then submission), the running jobs with what they hold, the jobs
whose preemption the shell has not yet confirmed, and every known job's
lifecycle state (:mod:`fleet.core.lifecycle`).  Two things change it, and
nothing else: :func:`fleet.core.events.apply` (what happened: submissions,
completions, confirmations, health, quota and cluster changes, the clock)
and :func:`fleet.core.cycle.cycle` (what to do: admissions and preemptions).
The methods below are their shared primitives; each moves a job through
:func:`fleet.core.lifecycle.transition` and keeps quota, placers and queues
in step.  Nothing here performs I/O.

A running job holds quota and cells in *units* (:class:`Unit`): the job
itself, and for a job that grew later, one unit per growth step
(:mod:`fleet.core.charges`).  The unit's :class:`~fleet.core.charges.Charge`
is the one record of its mode; the quota tree and the placer hold the same
object.

The state also keeps the members' healthy capacity (:attr:`SchedulerState.inventory`,
:mod:`fleet.core.inventory`), counted from the placers' nodes by
:meth:`SchedulerState.refresh_inventory`, which the cluster and node-health
events call; a root of ``capacity: auto`` gets it as its ``min`` and ``max``
when the state is built.

What each user's holding jobs hold per leaf (:attr:`SchedulerState.users`,
:mod:`fleet.core.user_limits`) is counted with the units, in
:meth:`SchedulerState.count_unit`, through which every unit comes and goes.
The state also keeps each job's run time (:mod:`fleet.core.run_limits`): the
seconds of its earlier runs (``ran``), when its current run was admitted
(``run_start``, the ``since`` of its first unit, set by :meth:`hold`), and the
due times of the running jobs that have a limit (``dues``).  :meth:`move`
adds a run's seconds when the job stops holding quota (a terminal state
forgets them); :meth:`schedule_due` sets a running job's due time.

A job of several GPU types runs narrowed to the one it was admitted on
(``Running.job``: :meth:`~fleet.core.jobs.Job.on`) and is queued again
asking for all of them (:meth:`SchedulerState.enqueue`).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fleet.core import checks, inventory, lifecycle, run_limits
from fleet.core.charges import Charge
from fleet.core.checks import InvariantError, require
from fleet.core.decisions import Preemption
from fleet.core.fair_share import FairUsage
from fleet.core.inventory import Inventory
from fleet.core.jobs import Job, Mode, position, sort_key
from fleet.core.lifecycle import JobState
from fleet.core.placement import Placer, PodPlacement
from fleet.core.quota import QuotaTree
from fleet.core.reason_texts import ReasonTexts
from fleet.core.resources import Resources
from fleet.core.unknown_job import UnknownJob as UnknownJob
from fleet.core.user_limits import UserUse
from fleet.core.waiting import IdleKey, WaitBook, idle_key


class DuplicateJob(ValueError):
    """A job key that is already known (pending, running or stopping)."""


@dataclass(frozen=True, slots=True)
class Transition:
    """A job moved from ``old`` to ``new`` (the shell persists it as an event).

    ``event``, when set, is the reason word of an event the shell records with
    it (``DeadlineExceeded``: :mod:`fleet.core.run_limits`).
    ``preemption``: why, when an event stopped the running job (its cause,
    preemptor and quota path, :mod:`fleet.core.decisions`); None otherwise.
    """

    job: str
    old: JobState | None  # None: the job was not known before (submitted)
    new: JobState
    reason: str = ""
    event: str = ""
    preemption: Preemption | None = None

    def __init__(
        self,
        job: str,
        old: JobState | None,
        new: JobState,
        reason: str = "",
        event: str = "",
        preemption: Preemption | None = None,
    ) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "old", old)
        object.__setattr__(self, "new", new)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "event", event)
        object.__setattr__(self, "preemption", preemption)


@dataclass(frozen=True, slots=True)
class Unit:
    """One unit of a running job: its charge record and the pods it placed."""

    charge: Charge
    pods: tuple[PodPlacement, ...]

    def __init__(self, charge: Charge, pods: tuple[PodPlacement, ...]) -> None:
        object.__setattr__(self, "charge", charge)
        object.__setattr__(self, "pods", pods)


@dataclass(slots=True)
class Running:
    """A running (admitted) job: where it runs and the units it holds."""

    job: Job
    cluster: str
    units: list[Unit] = field(default_factory=list)
    #: when it was (last) recorded as running: growth visits partial jobs in this order
    order: int = 0

    def __init__(
        self, job: Job, cluster: str, units: list[Unit] | None = None, order: int = 0
    ) -> None:
        self.job = job
        self.cluster = cluster
        self.units = [] if units is None else units
        self.order = order

    @property
    def mode(self) -> Mode:
        """The mode of the job's first unit (growth steps may differ)."""
        return self.units[0].charge.mode

    @property
    def pods(self) -> list[PodPlacement]:
        return [p for unit in self.units for p in unit.pods]

    @property
    def complete(self) -> bool:
        return sum(len(unit.pods) for unit in self.units) >= self.job.size

    def job_for(self, unit: Unit) -> Job:
        """The job as its placer holds ``unit`` (a growth step under its own key)."""
        if not unit.charge.is_growth:
            return self.job
        return dataclasses.replace(self.job, key=unit.charge.key)


#: An opportunistic question (or None: jobs tried one by one) -> the queues with a
#: group of jobs asking it, in the order their groups came.
IdleIndex = dict[IdleKey | None, dict[str, None]]


@dataclass(slots=True)
class QueueState:
    """One leaf queue: its policy and its pending jobs in order.

    It also counts its non-opportunistic pending jobs by their smallest
    start's request (``needs``: resource -> amount -> jobs) and how many of
    them are not preemptible (``rigid``), so that the cycle can tell in a
    few lookups whether a full ``max`` stops a whole tail of the queue.

    Its non-preemptible, non-opportunistic jobs (*rigid*: they start only
    within the queue's ``min``) are also kept in queue order, all together
    (``rigid_jobs``) and grouped by their smallest start's request
    (``rigid_groups``), so that the cycle can tell in a few bisections how far
    a run of them that the ``min`` stops goes (:func:`fleet.core.bulk_wait.rigid_run`).

    Its opportunistic jobs are also kept grouped by their placement question
    (``idle``: :func:`idle_key` -> the jobs in queue order), so that the
    cycle's last pass can leave out, without looking at them, every job whose
    question no cluster can answer (:func:`fleet.core.cycle.idle_pass`).
    """

    name: str
    strict_fifo: bool = False
    pending: list[Job] = field(default_factory=list)
    needs: dict[str, dict[int, int]] = field(default_factory=dict)
    rigid: int = 0
    rigid_jobs: list[Job] = field(default_factory=list)
    rigid_groups: dict[Resources, list[Job]] = field(default_factory=dict)
    idle: dict[IdleKey | None, list[Job]] = field(default_factory=dict)
    #: opportunistic job key -> when it was queued here: jobs of equal
    #: priority and submission keep the pending list's order across groups
    stamps: dict[str, int] = field(default_factory=dict)
    _queued: int = 0
    #: resource -> :meth:`least_need`'s answer, until the counters change
    _least: dict[str, tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)
    #: :meth:`rigid_least`'s answer, until a group of rigid jobs comes or goes
    _rigid_least: dict[str, int] | None = field(default=None, compare=False, repr=False)
    #: the scheduler's index of opportunistic groups (:attr:`SchedulerState.idle_index`),
    #: kept as this queue's groups come and go
    index: IdleIndex | None = field(default=None, compare=False, repr=False)
    #: how many jobs at the head of ``pending`` are rigid: they are the first
    #: of ``rigid_jobs``, in the same order (the most often so, as rigid jobs
    #: tend to come with the highest priorities)
    rigid_head: int = 0

    def add(self, job: Job) -> None:
        pending = self.pending
        at = bisect.bisect_right(pending, job)
        pending.insert(at, job)
        if at <= self.rigid_head:
            self.rigid_head = self.rigid_head + 1 if _rigid(job) else at
        self.count(job, 1)
        if job.opportunistic:
            key = idle_key(job)
            group = self.idle.get(key)
            if group is None:
                group = self.idle[key] = []
                if self.index is not None:
                    self.index.setdefault(key, {})[self.name] = None
            bisect.insort(group, job)
            self._queued += 1
            self.stamps[job.key] = self._queued

    def remove_at(self, i: int) -> Job:
        """Take the job at position ``i`` out of the queue and its counters."""
        pending = self.pending
        job = pending[i]
        self.count(job, -1)
        self.forget_idle(job)
        del pending[i]
        head = self.rigid_head
        if i < head:
            self.rigid_head = head - 1
        elif i == head:
            # The job that ended the rigid head went: the head may go on.
            while head < len(pending) and _rigid(pending[head]):
                head += 1
            self.rigid_head = head
        return job

    def idle_order(self, job: Job) -> tuple[int, int, int]:
        """An opportunistic job's place in the pending list (queue order, then queued)."""
        return (*sort_key(job), self.stamps[job.key])

    def forget_idle(self, job: Job) -> None:
        """Take the opportunistic ``job`` out of its group (it left the queue)."""
        if not job.opportunistic:
            return
        key = idle_key(job)
        group = self.idle[key]
        i = position(group, job)
        while group[i] is not job and group[i].key != job.key:
            i += 1
        del group[i]
        del self.stamps[job.key]
        if not group:
            del self.idle[key]
            if self.index is not None:
                queues = self.index[key]
                del queues[self.name]
                if not queues:
                    del self.index[key]

    def count(self, job: Job, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) ``job`` in the tail counters."""
        if job.opportunistic:
            return
        if self._least:
            self._least.clear()
        for r, amount in job.gang_request.amounts.items():
            counts = self.needs.get(r)
            if counts is None:
                counts = self.needs[r] = {}
            left = counts.get(amount, 0) + sign
            if left:
                counts[amount] = left
            else:
                del counts[amount]
        if not job.preemptible:
            self.rigid += sign
            group = self.rigid_groups.get(job.gang_request)
            if group is None:
                group = self.rigid_groups[job.gang_request] = []
                self._rigid_least = None  # a new group
            for jobs in (self.rigid_jobs, group):
                if sign > 0:
                    bisect.insort(jobs, job)
                else:
                    _remove_job(jobs, job)
            if not group:
                del self.rigid_groups[job.gang_request]
                self._rigid_least = None  # a group gone

    def least_need(self, r: str) -> tuple[int, int]:
        """How many of the counted jobs ask some ``r``, and the least one asks (-1 when
        none does), from ``needs``; kept until the counters change."""
        known = self._least.get(r)
        if known is None:
            asking = 0
            least = -1
            counts = self.needs.get(r)
            if counts is not None:
                for need, n in counts.items():
                    asking += n
                    if least < 0 or need < least:
                        least = need
            known = self._least[r] = (asking, least)
        return known

    def rigid_least(self) -> dict[str, int]:
        """The least any rigid group's request asks of each resource some group asks
        (0 where a group asks none of it); kept until a group comes or goes."""
        known = self._rigid_least
        if known is None:
            names: set[str] = set()
            for request in self.rigid_groups:
                names.update(request.amounts)
            known = {}
            for r in sorted(names):
                known[r] = min(request.amounts.get(r, 0) for request in self.rigid_groups)
            self._rigid_least = known
        return known

    def rigid_rank(self, job: Job, lo: int = 0, hi: int = -1) -> int:
        """The position of the rigid ``job`` in ``rigid_jobs``, looked for in
        ``[lo, hi)`` only (``hi`` -1: to the end): ``hi`` when it is not there."""
        jobs = self.rigid_jobs
        end = len(jobs) if hi < 0 else hi
        i = position(jobs, job, lo, end)
        while i < end and jobs[i] is not job:
            i += 1
        return i

    def rigid_behind(self, job: Job) -> bool:
        """Whether a rigid job comes after ``job`` in queue order."""
        jobs = self.rigid_jobs
        return bool(jobs) and bisect.bisect_right(jobs, job) < len(jobs)

    def split(self) -> int:
        """The position of the first opportunistic job (they sort last): every
        opportunistic job has a stamp."""
        return len(self.pending) - len(self.stamps)


def _rigid(job: Job) -> bool:
    """Whether ``job`` starts only within its queue's ``min`` (not preemptible, not
    opportunistic)."""
    return not job.preemptible and not job.opportunistic


def _remove_job(jobs: list[Job], job: Job) -> None:
    """Take ``job`` out of ``jobs`` (sorted in queue order)."""
    i = position(jobs, job)
    while jobs[i] is not job and jobs[i].key != job.key:
        i += 1
    del jobs[i]


def _opportunistic(job: Job) -> int:
    return 1 if job.opportunistic else 0


class SchedulerState:
    """Quota tree + placers + queues + running jobs; see the module docstring."""

    def __init__(
        self,
        tree: QuotaTree,
        placers: Mapping[str, Placer],
        *,
        strict_fifo: Iterable[str] = (),
        now: float = 0.0,
    ) -> None:
        self.tree = tree
        self.placers: dict[str, Placer] = dict(placers)
        self.strict_fifo: frozenset[str] = frozenset(strict_fifo)
        self.queues: dict[str, QueueState] = {}
        #: opportunistic question -> the queues with a group of jobs asking it
        self.idle_index: IdleIndex = {}
        self.sync_queues()
        self.running: dict[str, Running] = {}
        #: unit key -> the running job that holds it
        self.units: dict[str, Running] = {}
        #: (cluster, queue) -> GPUs the guaranteed units of running jobs hold there
        #: (what the service shows as a VC's usage; kept by :meth:`hold` and
        #: :meth:`release_unit`, and by :meth:`count_unit` where units move otherwise)
        self.guaranteed_gpus: dict[tuple[str, str], int] = {}
        #: per leaf and user, what the units of the user's holding jobs request
        #: (kept by :meth:`count_unit`, as :attr:`guaranteed_gpus` is)
        self.users = UserUse()
        #: preempted jobs whose pods the shell has not yet confirmed stopped
        self.stopping: dict[str, Job] = {}
        self.phase: dict[str, JobState] = {}
        self._pending_keys: dict[str, str] = {}  # job key -> queue
        self.now = now
        #: node -> when a tree change left it over its limits (only nodes still over)
        self.cut_since: dict[str, float] = {}
        #: seconds after a cut before its newest over-limit jobs are preempted (None: never)
        self.cut_grace: float | None = None
        #: member clusters being drained: nothing new is admitted there
        self.draining: set[str] = set()
        #: member clusters that are not ready (as their members say): nothing new is admitted
        self.unready: set[str] = set()
        #: why each pending job waits, as the last cycle left it (:mod:`fleet.core.waiting`)
        self.waiting = WaitBook()
        #: the reasons' texts by the figures they are worded from, kept from one
        #: cycle to the next (:mod:`fleet.core.reason_texts`)
        self.texts = ReasonTexts()
        #: running jobs that may hold fewer pods than they can run (a superset)
        self.partial: set[str] = set()
        #: job key -> seconds it ran in earlier runs (:mod:`fleet.core.run_limits`)
        self.ran: dict[str, float] = {}
        #: running job key -> when its current run was admitted
        self.run_start: dict[str, float] = {}
        #: when each running job with a run-time limit reaches it
        self.dues = run_limits.DueTimes()
        self._order = 0
        #: the healthy capacity of the clusters in service (:meth:`refresh_inventory`)
        self.inventory = Inventory()
        #: cluster -> (its placer, that placer's node capacities), read once per placer
        self._node_caps: dict[str, tuple[Placer, dict[str, Resources]]] = {}
        #: each queue's decayed usage (:mod:`fleet.core.fair_share`)
        self.fair = FairUsage(now)
        self.refresh_fair_keys()
        self.refresh_inventory()
        if tree.auto:  # capacity: auto: the root holds what the members hold
            root = inventory.with_capacity(tree.to_spec(), self.inventory)
            tree.set_node(root.name, min=root.min, max=root.max)
        checks.built(self)

    def advance_fair(self, now: float) -> None:
        """Decay the queues' usage to ``now`` (:meth:`FairUsage.advance`); the reclaim
        order follows the new keys."""
        if self.fair.advance(self.tree, now) or not self.tree.fair_any:
            self.refresh_fair_keys()

    def refresh_fair_keys(self) -> None:
        """Give the tree every leaf's fairness key for its reclaim order (none without
        fair share's memory or weights: it orders by what leaves borrow)."""
        tree = self.tree
        if not tree.fair_any:
            if tree._lend.figures is not None:
                tree.set_fair_keys(None)
            return
        self.fair.seed(tree)
        keys: dict[str, float] = {}
        for leaf in tree.leaves():
            key = self.fair.key(tree, leaf)
            keys[leaf] = math.inf if key is None else key
        tree.set_fair_keys(keys)

    def entered(self, charge: Charge) -> None:
        """A unit was admitted by the cycle: its queue's entry penalty
        (:meth:`FairUsage.entered`), with fair share's memory on."""
        tree = self.tree
        if tree.fair_any and charge.mode is not Mode.OPPORTUNISTIC:
            self.fair.entered(tree, charge.queue, charge.request)
            key = self.fair.key(tree, charge.queue)
            tree.fair_key_moved(charge.queue, math.inf if key is None else key)

    def refresh_inventory(self) -> bool:
        """Count the members' healthy capacity again (:mod:`fleet.core.inventory`: the
        placers' nodes, without their bad nodes and the draining clusters); whether it
        changed.  Events call it after every change of clusters or node health."""
        caps: dict[str, dict[str, Resources]] = {}
        for name, placer in self.placers.items():
            known = self._node_caps.get(name)
            if known is None or known[0] is not placer:
                known = (placer, placer.node_capacities())
                self._node_caps[name] = known
            caps[name] = known[1]
        for name in [n for n in self._node_caps if n not in self.placers]:
            del self._node_caps[name]
        bad = {name: placer.bad_nodes() for name, placer in self.placers.items()}
        found = inventory.total(caps, bad, self.draining)
        changed = found != self.inventory
        self.inventory = found
        return changed

    def sync_queues(self) -> None:
        """One queue per leaf of the tree, in the tree's order (pending jobs kept)."""
        old = self.queues
        self.queues = {
            leaf: old.get(leaf) or QueueState(leaf, leaf in self.strict_fifo)
            for leaf in self.tree.leaves()
        }
        # Which queues have a group of opportunistic jobs for each question, kept
        # by the queues from here on (:func:`fleet.core.cycle.idle_pass`).
        self.idle_index = {}
        for name, queue in self.queues.items():
            queue.index = self.idle_index
            for key in queue.idle:
                self.idle_index.setdefault(key, {})[name] = None

    # Lifecycle -----------------------------------------------------------------
    def move(
        self,
        key: str,
        new: JobState,
        reason: str = "",
        event: str = "",
        preemption: Preemption | None = None,
    ) -> Transition:
        """Move job ``key`` to ``new`` through the lifecycle table; forget terminal jobs
        (``preemption``: why an event stopped it, carried on the transition).

        A job that stops holding quota ends its run (:meth:`end_run`).
        """
        old = self.phase.get(key)
        if old is None:
            raise UnknownJob(key)
        lifecycle.transition(key, old, new)
        if old in lifecycle.HOLDING and new not in lifecycle.HOLDING:
            self.end_run(key)
        if new in lifecycle.TERMINAL:
            del self.phase[key]
            self.ran.pop(key, None)
        else:
            self.phase[key] = new
        return Transition(key, old, new, reason, event, preemption)

    # Run time ----------------------------------------------------------------------
    def end_run(self, key: str) -> None:
        """Job ``key`` no longer holds quota: add its run's seconds to its run time."""
        start = self.run_start.pop(key, None)
        self.dues.drop(key)
        if start is not None:
            self.ran[key] = self.ran.get(key, 0.0) + max(0.0, self.now - start)

    def run_time(self, key: str) -> float:
        """Seconds job ``key`` has run, over all its runs, at the core's clock."""
        start = self.run_start.get(key)
        current = 0.0 if start is None else max(0.0, self.now - start)
        return self.ran.get(key, 0.0) + current

    def run_limit(self, job: Job) -> run_limits.Limit | None:
        """The run-time limit that ends ``job`` first: its deadline or its queue's
        ``maxRuntime`` (None: neither)."""
        seconds, action = self.tree.max_runtime(job.queue)
        return run_limits.first_limit(job.active_deadline, seconds, action)

    def schedule_due(self, run: Running) -> None:
        """Set when the running job ``run`` reaches its run-time limit (if it has one)."""
        key = run.job.key
        limit = self.run_limit(run.job)
        start = self.run_start.get(key)
        if limit is None or start is None:
            self.dues.drop(key)
            return
        self.dues.set(key, start + limit.seconds - self.ran.get(key, 0.0))

    # Pending jobs ------------------------------------------------------------------
    def submit(self, job: Job) -> Transition:
        """Queue a new ``job``; its queue must be a leaf of the tree."""
        if job.key in self.phase:
            raise DuplicateJob(f"job {job.key} is already known ({self.phase[job.key]})")
        if job.queue not in self.queues:
            raise ValueError(f"job {job.key}: queue {job.queue!r} is not a leaf of the quota tree")
        self.enqueue(job)
        self.phase[job.key] = JobState.QUEUED
        return Transition(job.key, None, JobState.QUEUED, f"queued in {job.queue}")

    def enqueue(self, job: Job) -> None:
        """Put ``job`` in its queue's pending list (in order); no lifecycle move.

        A job of several GPU types that ran on one of them is queued asking for
        all of them again (:meth:`~fleet.core.jobs.Job.asked`).
        """
        job = job.asked()
        self.queues[job.queue].add(job)
        self._pending_keys[job.key] = job.queue
        self.waiting.queued(job)

    def is_pending(self, key: str) -> bool:
        return key in self._pending_keys

    def pending(self) -> list[Job]:
        return [job for q in self.queues.values() for job in q.pending]

    def pending_count(self) -> int:
        return len(self._pending_keys)

    def unqueue(self, key: str) -> Job:
        """Take a pending job out of its queue; no lifecycle move."""
        queue = self._pending_keys.pop(key, None)
        if queue is None:
            raise UnknownJob(key)
        state = self.queues[queue]
        pending = state.pending
        for i, job in enumerate(pending):
            if job.key == key:
                return state.remove_at(i)
        raise UnknownJob(key)  # pragma: no cover - the index and the queue agree

    def drop_pending(self, queue: str, keys: set[str], where: dict[str, int] | None = None) -> None:
        """Remove admitted jobs (running now) from a queue's pending list.

        ``where`` may say where a job is in the list (the cycle knows where it
        took it from); that is checked against the job found there.  Otherwise
        each is found by a bisection on queue order (the cycle may admit a job
        from deep in a long queue), then among the jobs of equal order.
        """
        state = self.queues[queue]
        pending = state.pending
        found: list[int] = []
        for key in keys:
            if where is not None:
                at = where.get(key, -1)
                if 0 <= at < len(pending) and pending[at].key == key:
                    found.append(at)
                    continue
            run = self.running.get(key)
            i = len(pending)
            if run is not None:
                i = position(pending, run.job)
                while i < len(pending) and pending[i].key != key:
                    i += 1
            if i == len(pending):  # not where its order says: look everywhere
                i = next((k for k, job in enumerate(pending) if job.key == key), i)
            if i < len(pending):
                found.append(i)
        found.sort()
        for i in reversed(found):
            state.remove_at(i)
        for key in keys:
            self._pending_keys.pop(key, None)

    # Running jobs ------------------------------------------------------------------
    def start(self, job: Job, cluster: str) -> Running:
        """Record ``job`` as running in ``cluster`` (its units are added next)."""
        run = Running(job, cluster)
        self.track(run)
        return run

    def track(self, run: Running) -> None:
        """Record ``run`` as running (again), last in growth order."""
        self._order += 1
        run.order = self._order
        self.running[run.job.key] = run
        self.partial.add(run.job.key)

    def partial_jobs(self) -> list[Running]:
        """Running jobs that hold fewer pods than they may run, in growth order."""
        found: list[Running] = []
        for key in list(self.partial):
            run = self.running.get(key)
            if run is None or run.complete:
                self.partial.discard(key)
            else:
                found.append(run)
        found.sort(key=lambda r: r.order)
        return found

    def hold(self, run: Running, charge: Charge, pods: Iterable[PodPlacement]) -> Unit:
        """Charge ``charge`` to the tree and record the unit (its pods are already bound).

        The job's first unit starts its run (its ``since``) and sets its due time.
        """
        self.tree.admit(charge)
        unit = Unit(charge, tuple(pods))
        run.units.append(unit)
        self.units[charge.key] = run
        self.count_unit(run.cluster, unit, 1)
        if not charge.is_growth:
            self.run_start[charge.job] = charge.since
            self.schedule_due(run)
        return unit

    def count_unit(self, cluster: str, unit: Unit, sign: int) -> None:
        """Add (``sign`` 1) or take away (-1) ``unit``'s GPUs in :attr:`guaranteed_gpus`,
        and its request in its user's counters (:attr:`users`)."""
        charge = unit.charge
        if charge.user:
            self.users.count(charge.queue, charge.user, charge.request, sign)
        if charge.mode is not Mode.GUARANTEED:
            return
        gpus = sum(len(pod.gpus) for pod in unit.pods)
        if not gpus:
            return
        where = (cluster, unit.charge.queue)
        left = self.guaranteed_gpus.get(where, 0) + sign * gpus
        if left:
            self.guaranteed_gpus[where] = left
        else:
            del self.guaranteed_gpus[where]

    def release_unit(self, run: Running, unit: Unit) -> None:
        """Free one unit's cells and quota (the job keeps its other units)."""
        self.placers[run.cluster].release(unit.charge.key)
        self.tree.release(unit.charge.key)
        run.units.remove(unit)
        del self.units[unit.charge.key]
        self.count_unit(run.cluster, unit, -1)
        self.partial.add(run.job.key)

    def release(self, key: str) -> Running:
        """Free everything running job ``key`` holds and forget it as running."""
        run = self.running.pop(key, None)
        if run is None:
            raise UnknownJob(key)
        for unit in reversed(list(run.units)):
            self.release_unit(run, unit)
        return run

    def check_invariants(self) -> None:
        """Quota and placers agree with the running jobs; queues and phases are exact."""
        self.tree.check_invariants()
        for placer in self.placers.values():
            placer.check_invariants()
        for key, run in self.running.items():
            require(bool(run.units), f"running job {key} holds no unit")
            require(
                self.phase.get(key) in lifecycle.HOLDING,
                f"running job {key} is in state {self.phase.get(key)}",
            )
            for unit in run.units:
                ukey = unit.charge.key
                require(self.units.get(ukey) is run, f"unit {ukey} is not indexed to {key}")
                require(unit.charge.job == key, f"unit {ukey} names job {unit.charge.job}")
                require(
                    self.placers[run.cluster].holds(ukey),
                    f"running job {key} is not held by its cluster {run.cluster}"
                    + ("" if ukey == key else f" (unit {ukey})"),
                )
                require(self.tree.holds(ukey), f"charge {ukey} missing from the quota tree")
                for other, placer in self.placers.items():
                    require(
                        other == run.cluster or not placer.holds(ukey),
                        f"{ukey} held by {other} and {run.cluster}",
                    )
            require(len(run.pods) >= run.job.gang_size, f"partial gang {key} is running")
        require(
            sum(len(r.units) for r in self.running.values()) == len(self.units),
            "unit index has stale entries",
        )
        gpus: dict[tuple[str, str], int] = {}
        for run in self.running.values():
            for unit in run.units:
                if unit.charge.mode is Mode.GUARANTEED:
                    where = (run.cluster, unit.charge.queue)
                    gpus[where] = gpus.get(where, 0) + sum(len(p.gpus) for p in unit.pods)
        gpus = {where: n for where, n in gpus.items() if n}
        if gpus != self.guaranteed_gpus:
            raise InvariantError(
                f"guaranteed GPUs per cluster and queue drifted: kept "
                f"{sorted(self.guaranteed_gpus.items())}, recount {sorted(gpus.items())}"
            )
        self.users.check(
            (unit.charge.queue, unit.charge.user, unit.charge.request)
            for run in self.running.values()
            for unit in run.units
        )
        queued = [j.key for q in self.queues.values() for j in q.pending]
        keys = {j.key: q.name for q in self.queues.values() for j in q.pending}
        if len(keys) != len(queued):
            twice = sorted(k for k, n in Counter(queued).items() if n > 1)
            raise InvariantError(f"jobs pending twice in the queues: {twice}")
        if keys != self._pending_keys:
            missing = sorted(keys.keys() - self._pending_keys.keys())
            stale = sorted(self._pending_keys.keys() - keys.keys())
            moved = sorted(
                f"{k} (indexed to {self._pending_keys[k]}, queued in {keys[k]})"
                for k in keys.keys() & self._pending_keys.keys()
                if keys[k] != self._pending_keys[k]
            )
            drift = {"not indexed": missing, "indexed, not queued": stale, "misfiled": moved}
            raise InvariantError(
                "pending index differs from the queues: "
                + "; ".join(f"{what} {jobs}" for what, jobs in drift.items() if jobs)
            )
        for key in keys:
            require(self.phase.get(key) is JobState.QUEUED, f"pending job {key} is not Queued")
        for q in self.queues.values():
            recount = QueueState(q.name)
            for job in q.pending:
                recount.count(job, 1)
            require(
                (recount.needs, recount.rigid)
                == ({r: c for r, c in q.needs.items() if c}, q.rigid),
                f"queue {q.name}: tail counters differ from a recount",
            )
            rigid = [j for j in q.pending if _rigid(j)]
            head = next((i for i, j in enumerate(q.pending) if not _rigid(j)), len(q.pending))
            require(
                q.rigid_head == head,
                f"queue {q.name}: {q.rigid_head} rigid jobs kept at its head, {head} there",
            )
            require(
                all(a is b for a, b in zip(q.rigid_jobs, rigid, strict=False))
                and len(q.rigid_jobs) == len(rigid)
                and {k: [j.key for j in g] for k, g in q.rigid_groups.items()}
                == {k: [j.key for j in g] for k, g in recount.rigid_groups.items()},
                f"queue {q.name}: rigid jobs differ from its pending jobs (or their order)",
            )
            groups: dict[IdleKey | None, list[str]] = {}
            for job in q.pending:
                if job.opportunistic:
                    groups.setdefault(idle_key(job), []).append(job.key)
            require(
                groups == {k: [j.key for j in g] for k, g in q.idle.items()},
                f"queue {q.name}: opportunistic groups differ from its pending jobs",
            )
            first = bisect.bisect_left(q.pending, 1, key=_opportunistic)
            require(
                q.split() == first,
                f"queue {q.name}: {len(q.stamps)} opportunistic jobs stamped, "
                f"{len(q.pending) - first} queued",
            )
            for question in q.idle:
                require(
                    q.name in self.idle_index.get(question, {}),
                    f"queue {q.name}: an opportunistic group is missing from the index",
                )
            merged = sorted((j for g in q.idle.values() for j in g), key=q.idle_order)
            require(
                [j.key for j in merged] == [j.key for j in q.pending if j.opportunistic],
                f"queue {q.name}: opportunistic groups merged are not in queue order",
            )
        require(
            sum(len(queues) for queues in self.idle_index.values())
            == sum(len(q.idle) for q in self.queues.values()),
            "the index of opportunistic groups names a group no queue has",
        )
        for key, run in self.running.items():
            require(run.complete or key in self.partial, f"partial job {key} is not tracked")
        for key in self.stopping:
            require(self.phase.get(key) is JobState.PREEMPTED, f"stopping {key} not Preempted")
        for key in self.running:
            require(key in self.run_start, f"running job {key} has no run start")
        dues = self.dues.items()
        for key, run in self.running.items():
            limit = self.run_limit(run.job)
            if limit is None:
                require(key not in dues, f"job {key} without a run-time limit is due")
                continue
            due = self.run_start[key] + limit.seconds - self.ran.get(key, 0.0)
            require(dues.get(key) == due, f"job {key} is due at {dues.get(key)}, not {due}")
        require(dues.keys() <= self.running.keys(), "a job that does not run is due")
        require(self.ran.keys() <= self.phase.keys(), "run time kept for a job no longer known")
        known = len(keys) + len(self.running) + len(self.stopping)
        require(
            len({*keys, *self.running, *self.stopping}) == known == len(self.phase),
            "a job is in two places, or a phase belongs to no job",
        )
        for q in self.queues.values():
            order = [sort_key(j) for j in q.pending]
            if order != sorted(order):
                i = next(i for i in range(1, len(order)) if order[i] < order[i - 1])
                raise InvariantError(
                    f"queue {q.name} is out of order: "
                    f"{q.pending[i - 1].key} before {q.pending[i].key}"
                )
