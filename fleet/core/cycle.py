"""The scheduling cycle: which queued jobs start, where, and whom they preempt.

``cycle(state, now) -> list[Decision]`` is deterministic: no clock (``now`` is
passed in and stamped on the decisions), no I/O, no randomness.  It applies its
decisions to ``state`` as it goes, so later jobs of the same cycle see the
quota and cells that earlier admissions took.

Theory of operation:

1. **Three passes.**  First every queue's work that fits within its ``min``
   (guaranteed), then borrowing, then opportunistic jobs on what is left: a
   queue does not borrow what another queue is owed in the same cycle, and
   nothing is started only to be reclaimed by a job behind it.  A job that
   would have to borrow is deferred to the second pass together with every
   job behind it in its queue, so each queue keeps its own order.  If a job
   admitted earlier in the cycle still has to make room for a later one, its
   admission is withdrawn (a ``Wait`` "displaced by ...") rather than
   reported as started and preempted.
2. **Fair order across queues.**  In each pass, queues sit in a heap keyed by
   their *share*: the largest ratio, over the resources the queue's ``min``
   names, of what it uses to what it is guaranteed (a queue without ``min``
   uses its ``max``; without either it sorts last).  The queue furthest below
   its share is served first; its key is recomputed after each admission
   (lazily: a stale key is re-pushed when popped).  Many gangs are admitted
   per cycle, not one head per queue (Kueue's known bottleneck).  Within a
   queue, jobs are taken in priority order, then submission order.  A
   ``StrictFIFO`` queue stops at the first job that cannot start; a
   ``BestEffortFIFO`` queue (the default) lets the jobs behind it try.
3. **Quota** (:class:`~fleet.core.quota.QuotaTree`) classifies the job as
   guaranteed, borrowed or opportunistic.  When a ``max`` blocks a job,
   reclaim (borrowed jobs of other queues, for a job within its ``min``) and
   then priority preemption inside the queue are tried; the chosen victims
   are only preempted if the job then also finds a placement.
4. **Placement**: every member cluster the job's policy allows is asked for a
   gang fit without preemption, least loaded first, stopping early at a fit
   as tight as the gang can be; the tightest fit wins (lowest cell level,
   least fragmentation, least loaded, name).  If none fits, clusters are
   asked again with preemption allowed, least loaded first, until
   :data:`PREEMPTION_CLUSTERS` of them can take the gang; the fit with the
   fewest, then lowest-priority victims wins.  A gang that cannot start
   whole tries its gang minimum (``minAvailable``); a non-gang job starts
   with as many pods as fit and grows in later cycles.
5. **Unfeasible shapes** (Armada): a job that cannot start is remembered by
   its shape (queue, replicas, gang size, priority, SKU, allowed clusters)
   for the rest of the cycle, so identical jobs behind it wait for the same
   reason without asking the quota tree or the placers again.  The memory is
   cleared whenever a preemption releases something.  Admissions only take
   capacity, so an answer stays right, with one exception accepted for speed:
   a borrowed admission later in the cycle can create a reclaim victim that
   an earlier identical job did not see; it is seen next cycle.  Likewise a
   reclaim that failed for a queue blocked at a node and resource is not
   searched again in the cycle for a larger shortfall at the same place
   (until a release or a borrowed admission changes the candidates).  A
   cluster's "does not fit" answer to a placement question is remembered
   until a release in that cluster.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from fleet.core import resources
from fleet.core.jobs import Job, Mode, Pod, sort_key
from fleet.core.placement import BindError, Fit, NoFit, Placer, PodPlacement
from fleet.core.quota import QuotaBlock, QuotaTree
from fleet.core.resources import ONE_JOB, Resources
from fleet.core.state import Charge, Running, SchedulerState


@dataclass(frozen=True, slots=True)
class Admit:
    """Start ``job`` (or, with ``grown``, more of its pods) in ``cluster``."""

    job: str
    queue: str
    cluster: str
    mode: Mode
    priority: int
    pods: tuple[PodPlacement, ...]
    at: float = 0.0
    grown: bool = False


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop running ``job`` and queue it again."""

    job: str
    queue: str
    reason: str
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Wait:
    """``job`` stays queued; ``reason`` names the limit that blocks it."""

    job: str
    queue: str
    reason: str
    at: float = 0.0


Decision = Admit | Preempt | Wait


@runtime_checkable
class LevelHint(Protocol):
    """Optional placer extension: the tightest level a gang could possibly get."""

    def lowest_level(self, job: Job, pods: Sequence[Pod]) -> int: ...


_NO_SHARE = (2, 0.0)
#: With preemption, the least loaded clusters are asked until this many can take
#: the gang; the one with the fewest, then lowest-priority victims wins.
PREEMPTION_CLUSTERS = 2
_GUARANTEED, _BORROWED, _OPPORTUNISTIC = 0, 1, 2


class _Defer:
    """Marker: the job must borrow; try it again in the borrowing pass."""


_DEFER = _Defer()


@dataclass(slots=True)
class _Plan:
    """A job's way in: its mode, pods, fit, and the victims it needs."""

    mode: Mode
    pods: tuple[Pod, ...]
    fit: Fit
    quota_victims: tuple[str, ...] = ()


@dataclass(slots=True)
class _Cycle:
    state: SchedulerState
    now: float
    decisions: list[Decision] = field(default_factory=list)
    unfeasible: dict[tuple[object, ...], tuple[str, QuotaBlock | None]] = field(
        default_factory=dict
    )
    #: The quota block of the last attempt when nothing could make room (else None).
    last_block: QuotaBlock | None = None
    admitted: dict[str, set[str]] = field(default_factory=dict)  # queue -> keys
    requeued: list[Job] = field(default_factory=list)
    #: (queue, blocking node, resource) -> smallest shortfall reclaim failed for
    reclaim_failed: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: cluster -> (free resources, load), until a bind or release there changes it
    room: dict[str, tuple[dict[str, int], float]] = field(default_factory=dict)
    #: cluster -> placement question -> why it does not fit without preemption.
    #: Admissions only take capacity, so an answer holds until a release there.
    nofit: dict[str, dict[tuple[object, ...], str]] = field(default_factory=dict)
    displaced: set[str] = field(default_factory=set)  # admitted, then preempted, this cycle
    admitted_keys: set[str] = field(default_factory=set)
    blocked: set[str] = field(default_factory=set)  # StrictFIFO queues stopped this cycle
    phase: int = 0
    shares: dict[str, tuple[int, float]] = field(default_factory=dict)

    # Fairness ----------------------------------------------------------------
    def share(self, queue: str) -> tuple[int, float]:
        """The queue's fairness key; cached until its usage changes (:meth:`touch`)."""
        known = self.shares.get(queue)
        if known is None:
            known = self.shares[queue] = self._share(queue)
        return known

    def touch(self, queue: str) -> None:
        """The usage of ``queue`` changed: forget its fairness key."""
        self.shares.pop(queue, None)

    def _share(self, queue: str) -> tuple[int, float]:
        tree = self.state.tree
        used = tree.used(queue)
        basis: Resources | None = tree.min_of(queue)
        if not basis:
            basis = tree.max_of(queue)
        if not basis:
            return _NO_SHARE
        ratio = 0.0
        for name, amount in basis.items():
            if amount > 0:
                ratio = max(ratio, used[name] / amount)
        return (0 if ratio < 1.0 else 1, ratio)

    # The loop ----------------------------------------------------------------
    def run(self) -> list[Decision]:
        state = self.state
        # Three passes in fair order: work within every queue's min first, then
        # borrowing, then opportunistic jobs on what is left.  So a queue does
        # not borrow what another queue is owed in the same cycle, and nothing
        # is started only to be reclaimed by a job behind it.
        guaranteed: dict[str, list[Job]] = {}
        opportunistic: dict[str, list[Job]] = {}
        for name, queue in state.queues.items():
            split = next(
                (i for i, j in enumerate(queue.pending) if j.opportunistic), len(queue.pending)
            )
            if split:
                guaranteed[name] = queue.pending[:split]
            if split < len(queue.pending):
                opportunistic[name] = queue.pending[split:]
        self.phase = _GUARANTEED
        borrowing = self.serve(guaranteed)
        self.phase = _BORROWED
        self.serve(borrowing)
        self.phase = _OPPORTUNISTIC
        self.serve({k: v for k, v in opportunistic.items() if k not in self.blocked})
        for name, keys in self.admitted.items():
            state.drop_pending(name, keys)
        if self.displaced:
            self.decisions = [
                d for d in self.decisions if not (isinstance(d, Admit) and d.job in self.displaced)
            ]
        for job in self.requeued:
            state.submit(job)
        self.grow()
        return self.decisions

    def serve(self, work: dict[str, list[Job]]) -> dict[str, list[Job]]:
        """One pass over ``work`` (queue -> jobs in order) in fair order.

        Returns, per queue, the jobs deferred to the borrowing pass: from the
        first job that must borrow on, in order, so that a queue's own order
        holds.  A StrictFIFO queue stops at its first job that cannot start;
        the rest wait behind it.
        """
        state = self.state
        order = {name: i for i, name in enumerate(state.queues)}
        heap = [(self.share(name), order[name], name) for name in work]
        heapq.heapify(heap)
        cursors = dict.fromkeys(work, 0)
        deferred: dict[str, list[Job]] = {}
        while heap:
            key, rank, name = heapq.heappop(heap)
            current = self.share(name)
            if current != key:
                heapq.heappush(heap, (current, rank, name))
                continue
            jobs = work[name]
            i = cursors[name]
            if i >= len(jobs):
                continue
            job = jobs[i]
            cursors[name] = i + 1
            outcome = self.admit(job)
            if outcome is None:
                heapq.heappush(heap, (self.share(name), rank, name))
                continue
            if isinstance(outcome, _Defer):
                # The queue's order holds: this job and every job behind it
                # wait for the borrowing pass.
                deferred[name] = jobs[i:]
                continue
            self.decisions.append(Wait(job.key, name, outcome, self.now))
            strict = state.queues[name].strict_fifo
            block = self.last_block
            if not strict and block is not None and self.wait_all(name, jobs[i + 1 :], block):
                cursors[name] = len(jobs)
                continue
            if strict:
                self.blocked.add(name)
                for rest in state.queues[name].pending:
                    if sort_key(rest) > sort_key(job) and rest.key not in self.admitted_keys:
                        why = f"behind {job.key} in StrictFIFO queue {name}"
                        self.decisions.append(Wait(rest.key, name, why, self.now))
                continue
            heapq.heappush(heap, (key, rank, name))
        return deferred

    def wait_all(self, queue: str, rest: list[Job], block: QuotaBlock) -> bool:
        """Wait every job in ``rest`` at once if ``block`` provably stops each of them.

        ``block`` is a ``max`` at some node that nothing could make room under
        for the job before.  A job behind it is stopped by the same node unless
        its smallest start fits the node's room, or it is within its queue's
        ``min`` (reclaim may help it), or the queue runs preemptible jobs of
        lower priority (it may preempt them).  When none of these holds for any
        job, they all wait for the same reason without being tried one by one:
        a full fleet with a deep backlog costs one pass over the backlog, not
        one admission attempt per job.  (A release later in the same cycle is
        seen next cycle, as with unfeasible shapes.)
        """
        if not rest:
            return False
        tree = self.state.tree
        r = block.resource
        limit = tree.max_of(block.node)
        if limit is None or r not in limit:
            return False
        room = limit[r] - tree.used(block.node)[r]
        leaf_min = tree.min_of(queue)
        if leaf_min and r not in leaf_min:
            return False  # the guarantee does not depend on r: cannot rule reclaim out
        guaranteed = tree.guaranteed_used(queue)[r]
        lowest = tree.lowest_preemptible_priority(queue)
        for job in rest:
            need = job.gang_request[r]
            if (
                job.opportunistic
                or not job.preemptible
                or need <= room
                or (leaf_min and guaranteed + need <= leaf_min[r])
                or (lowest is not None and job.priority > lowest)
            ):
                return False
        reasons: dict[int, str] = {}  # one text per distinct need
        for job in rest:
            need = job.gang_request[r]
            why = reasons.get(need)
            if why is None:
                why = reasons[need] = replace(block, request=need).reason
            self.decisions.append(Wait(job.key, queue, why, self.now))
        return True

    # Admission -----------------------------------------------------------------
    def admit(self, job: Job) -> str | _Defer | None:
        """Admit ``job`` if it can start; else say why it waits (or defer it)."""
        shape = job.shape
        known = self.unfeasible.get(shape)
        if known is not None:
            self.last_block = known[1]
            return known[0]
        attempts: list[tuple[Pod, ...]] = [job.pods]
        if job.gang_size < job.size:
            attempts += _smaller(job)
        reason = ""
        deferred = False
        for pods in attempts:
            plan = self.plan(job, pods)
            if isinstance(plan, _Plan):
                return self.commit(job, plan)
            if isinstance(plan, _Defer):
                deferred = True
            else:
                reason = reason or plan
        if deferred:
            return _DEFER
        self.unfeasible[shape] = (reason, self.last_block)
        return reason

    def plan(self, job: Job, pods: tuple[Pod, ...]) -> _Plan | str | _Defer:
        self.last_block = None
        tree = self.state.tree
        request = job.request_of(pods)
        verdict = tree.classify(
            job.queue, request, priority=job.priority, preemptible=job.preemptible
        )
        if verdict is Mode.BORROWED and self.phase == _GUARANTEED:
            return _DEFER
        if isinstance(verdict, Mode):
            fit = self.place(job, pods, verdict, frozenset())
            if isinstance(fit, Fit):
                return _Plan(verdict, pods, fit)
            return fit
        return self.plan_with_victims(job, pods, request, verdict)

    def plan_with_victims(
        self, job: Job, pods: tuple[Pod, ...], request: Resources, block: QuotaBlock
    ) -> _Plan | str | _Defer:
        """Reclaim or preempt inside the queue to get under ``max``; roll back on failure."""
        tree = self.state.tree
        if block.kind != "max" or job.opportunistic:
            return block.reason
        memo = (job.queue, block.node, block.resource)
        shortfall = block.used + block.request - block.limit
        failed = self.reclaim_failed.get(memo)
        victims: list[str] | None = None
        if failed is None or shortfall < failed:
            victims = tree.reclaim_victims(job.queue, request)
            if victims is None:
                self.reclaim_failed[memo] = shortfall if failed is None else min(failed, shortfall)
        if not victims:
            victims = tree.queue_victims(job.queue, request, job.priority)
        if not victims:
            self.last_block = block
            return block.reason
        removed = [self.uncharge(key) for key in victims]
        try:
            verdict = tree.classify(
                job.queue, request, priority=job.priority, preemptible=job.preemptible
            )
            if not isinstance(verdict, Mode):
                return block.reason
            if verdict is Mode.BORROWED and self.phase == _GUARANTEED:
                return _DEFER
            fit = self.place(job, pods, verdict, frozenset(victims))
            if isinstance(fit, Fit):
                return _Plan(verdict, pods, fit, tuple(victims))
            return f"{block.reason}; after preemption: {fit}"
        finally:
            for charges in removed:
                for charge, run in charges:
                    _charge(tree, run.job, charge)

    def uncharge(self, key: str) -> list[tuple[Charge, Running]]:
        run = self.state.running[key]
        for charge in run.charges:
            self.state.tree.release(charge.key)
        return [(charge, run) for charge in run.charges]

    def place(
        self, job: Job, pods: tuple[Pod, ...], mode: Mode, released: frozenset[str]
    ) -> Fit | str:
        placers = self.candidates(job)
        if not placers:
            return "no member cluster is allowed by the job's placement policy"
        need = _sum(pods)
        best: tuple[tuple[int, float, float, str], Fit] | None = None
        misses: list[str] = []
        question = (
            tuple(p.request for p in pods),
            mode,
            job.gpu_sku,
            job.pinned_cell_id,
            job.queue if mode is Mode.GUARANTEED else None,
        )
        for load, placer in placers:
            name = placer.cluster
            known = self.nofit.setdefault(name, {})
            # A queue-blind placer answers the same for every queue.
            key = question[:-1] if getattr(placer, "queue_blind", False) else question
            here = frozenset(k for k in released if placer.holds(k))
            if not here:
                if not _may_fit(self.room[name][0], need):
                    misses.append(f"{name}: not enough free capacity")
                    continue
                why = known.get(key)
                if why is not None:
                    misses.append(why)
                    continue
            fit = placer.fit(job, pods, mode, released=here)
            if isinstance(fit, NoFit):
                misses.append(f"{name}: {fit.reason}")
                if not here:
                    known[key] = misses[-1]
                continue
            rank = (fit.level, fit.fragmentation, load, placer.cluster)
            if best is None or rank < best[0]:
                best = (rank, fit)
            if isinstance(placer, LevelHint) and fit.level <= placer.lowest_level(job, pods):
                break
        if best is not None:
            return best[1]
        if mode is not Mode.OPPORTUNISTIC:
            victim_fit = self.place_with_preemption(job, pods, mode, released, placers)
            if victim_fit is not None:
                return victim_fit
        reason = "no cluster fits the gang: " + "; ".join(misses[:3])
        if len(misses) > 3:
            reason += f"; and {len(misses) - 3} more"
        return reason

    def place_with_preemption(
        self,
        job: Job,
        pods: tuple[Pod, ...],
        mode: Mode,
        released: frozenset[str],
        placers: list[tuple[float, Placer]],
    ) -> Fit | None:
        running = self.state.running
        best: tuple[tuple[int, int, int, float, str], Fit] | None = None
        found = 0
        # A borrowed job may preempt only opportunistic jobs, whatever its queue
        # and priority, and none start before the last pass: a failed question
        # holds for the cycle until a release in that cluster.
        question = ("preempt", tuple(p.request for p in pods), job.gpu_sku, job.pinned_cell_id)
        for load, placer in placers:
            if found >= PREEMPTION_CLUSTERS:
                break
            known = self.nofit.setdefault(placer.cluster, {})
            here = frozenset(k for k in released if placer.holds(k))
            memo = mode is Mode.BORROWED and not here
            if memo and question in known:
                continue
            fit = placer.fit(job, pods, mode, preempt=True, released=here)
            if isinstance(fit, NoFit):
                if memo:
                    known[question] = fit.reason
                continue
            found += 1
            top = max((running[v].job.priority for v in fit.victims if v in running), default=0)
            rank = (len(fit.victims), top, fit.level, load, placer.cluster)
            if best is None or rank < best[0]:
                best = (rank, fit)
            if len(fit.victims) <= 1 and top < 0:
                break  # one opportunistic victim: no cluster can do better on victims
        return best[1] if best else None

    def candidates(self, job: Job) -> list[tuple[float, Placer]]:
        out: list[tuple[float, Placer]] = []
        for name, placer in self.state.placers.items():
            if job.clusters is not None and name not in job.clusters:
                continue
            room = self.room.get(name)
            if room is None:
                room = self.room[name] = _room(placer)
            out.append((room[1], placer))
        out.sort(key=lambda lp: (lp[0], lp[1].cluster))
        return out

    def commit(self, job: Job, plan: _Plan) -> str | None:
        """Preempt the victims and start ``job``; a reason if the placer refused after all."""
        state = self.state
        victims = list(plan.quota_victims)
        victims += [v for v in plan.fit.victims if v not in victims]
        for key in victims:
            run = state.running[key]
            if key in self.admitted.get(run.job.queue, ()):
                # Started earlier in this very cycle: it never ran, so it simply
                # stays queued (its Admit is withdrawn) instead of being preempted.
                self.displaced.add(key)
                why = f"displaced by {job.key} in the same cycle"
                self.decisions.append(Wait(key, run.job.queue, why, self.now))
            else:
                if run.job.queue != job.queue and key in plan.quota_victims:
                    why = f"reclaimed for {job.key} of queue {job.queue}"
                else:
                    why = f"preempted by {job.key} (priority {job.priority})"
                self.decisions.append(Preempt(key, run.job.queue, why, self.now))
            self.room.pop(run.cluster, None)
            self.nofit.pop(run.cluster, None)
            self.touch(run.job.queue)
            self.requeued.append(state.finish(key))
            self.unfeasible.clear()
            self.reclaim_failed.clear()
        placer = state.placers[plan.fit.cluster]
        fit = _bind(placer, job, plan)
        if isinstance(fit, str):
            return fit
        request = job.request_of(plan.pods)
        charge = Charge(job.key, request, plan.mode)
        _charge(state.tree, job, charge)
        if plan.mode is Mode.BORROWED:
            self.reclaim_failed.clear()  # a new borrowed job is a new reclaim candidate
        self.room.pop(fit.cluster, None)
        if plan.mode is Mode.OPPORTUNISTIC:
            self.nofit.pop(fit.cluster, None)  # a new victim for borrowed jobs
        run = state.start(job, fit.cluster, plan.mode, fit.pods)
        run.charges.append(charge)
        self.touch(job.queue)
        self.admitted.setdefault(job.queue, set()).add(job.key)
        self.admitted_keys.add(job.key)
        self.decisions.append(
            Admit(
                job.key,
                job.queue,
                fit.cluster,
                plan.mode,
                job.priority,
                fit.pods,
                self.now,
            )
        )
        return None

    # Incremental growth ----------------------------------------------------------
    def grow(self) -> None:
        """Give running jobs that started partially the pods that now fit."""
        state = self.state
        for run in list(state.running.values()):
            if run.complete:
                continue
            job = run.job
            placed = {p.pod for p in run.pods}
            missing = tuple(p for p in job.pods if p.name not in placed)
            placer = state.placers[run.cluster]
            for count in _counts(len(missing)):
                pods = missing[:count]
                request = job.request_of(pods) - ONE_JOB
                verdict = state.tree.classify(
                    job.queue, request, priority=job.priority, preemptible=job.preemptible
                )
                if not isinstance(verdict, Mode):
                    continue
                fit = placer.fit(job, pods, verdict)
                if isinstance(fit, NoFit):
                    continue
                charge = Charge(f"{job.key}#{len(run.charges) + 1}", request, verdict)
                _charge(state.tree, job, charge)
                placer.bind(job, verdict, fit)
                run.pods.extend(fit.pods)
                run.charges.append(charge)
                self.decisions.append(
                    Admit(
                        job.key,
                        job.queue,
                        run.cluster,
                        verdict,
                        job.priority,
                        fit.pods,
                        self.now,
                        grown=True,
                    )
                )
                break


def _bind(placer: Placer, job: Job, plan: _Plan) -> Fit | str:
    """Bind ``plan`` in its placer; the fit bound, or why it could not be.

    A fit that planned preemption is bound after its victims left; if the
    placer refuses it then, the job is placed afresh without preemption.
    """
    try:
        placer.bind(job, plan.mode, plan.fit)
        return plan.fit
    except BindError as refused:
        again = placer.fit(job, plan.pods, plan.mode)
        if isinstance(again, Fit):
            try:
                placer.bind(job, plan.mode, again)
                return again
            except BindError:
                pass
        return f"{placer.cluster} refused the placement after making room: {refused}"


def _charge(tree: QuotaTree, job: Job, charge: Charge) -> None:
    """Charge one quota charge of ``job`` to the tree."""
    tree.admit(
        charge.key,
        job.queue,
        charge.request,
        charge.mode,
        priority=job.priority,
        seq=job.seq,
        preemptible=job.preemptible,
    )


def _smaller(job: Job) -> list[tuple[Pod, ...]]:
    """Smaller pod sets to try for a job that may start below its full size."""
    return [job.pods[:n] for n in _counts(job.size)[1:] if n >= job.gang_size]


def _counts(n: int) -> list[int]:
    """``n``, then halves down to 1: the pod counts tried for partial starts."""
    out: list[int] = []
    while n >= 1:
        out.append(n)
        n //= 2
    if out and out[-1] != 1:
        out.append(1)
    return out


def _sum(pods: Sequence[Pod]) -> dict[str, int]:
    total: dict[str, int] = {}
    for pod in pods:
        for name, amount in pod.request.items():
            total[name] = total.get(name, 0) + amount
    return total


def _room(placer: Placer) -> tuple[dict[str, int], float]:
    """Free resources of a cluster and its load (share of GPUs, else cpu, in use)."""
    capacity = placer.capacity()
    allocated = placer.allocated()
    free = {name: amount - allocated[name] for name, amount in capacity.items()}
    load = 0.0
    for name in (resources.GPU, resources.CPU):
        if capacity[name]:
            load = allocated[name] / capacity[name]
            break
    return free, load


def _may_fit(free: dict[str, int], need: dict[str, int]) -> bool:
    """Cheap necessary condition: the cluster has that much free in total."""
    for name in (resources.GPU, resources.CPU, resources.MEMORY):
        amount = need.get(name, 0)
        if amount and name in free and free[name] < amount:
            return False
    return True


def cycle(state: SchedulerState, now: float = 0.0) -> list[Decision]:
    """Run one scheduling cycle over ``state`` and return its decisions."""
    return _Cycle(state, now).run()
