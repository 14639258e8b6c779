"""Admitting one job: its quota verdict, the victims it needs, and the commit.

Theory of operation:

* :func:`admit` tries the job at its start size (all its pods, or its
  elastic target), and if that cannot start and the job may start smaller
  (``minAvailable``, elastic ``minReplicas``, or a non-gang job), the
  largest size between its gang minimum and the start size that can start,
  found by bisection (a few questions, not one per size).  A job that could
  not start is remembered by its shape (:class:`fleet.core.cycle_memory.ShapeMemo`).
* :func:`plan` asks the quota tree how the pods would be charged
  (guaranteed, borrowed, opportunistic) and the member clusters where they
  would go (:mod:`fleet.core.cluster_choice`).  In the first pass a job that
  would have to borrow is deferred to the borrowing pass; there it borrows
  only room that guaranteed jobs still ahead in the pass are not owed
  (:mod:`fleet.core.owed`), asked before any placement.  When a ``max``
  blocks it, :func:`plan_with_victims` looks for reclaim victims (borrowed
  units of other queues, for a job within its ``min``) and then for
  lower-priority units of its own queue, and asks again as if they were
  gone.  Planning is a pure query: every charge it takes off the tree to ask
  "what if" is put back, whatever happens.
* :func:`commit` is all or nothing: it releases the victims, binds the job,
  and only then reports the preemptions and the admission.  If the placer
  refuses the bind, the victims are put back exactly where they were and
  the job is placed afresh without preemption, or waits.

A job of several GPU types (``Job.gpu_skus``) is admitted one type at a
time, in its order (:func:`admit`): each try is the job narrowed to that type
(:meth:`~fleet.core.jobs.Job.on`), asked of the tree with its GPUs typed
``gpu.fleet.io/<type>`` (so a typed ``max`` holds for the type it would use)
and placed on that type's cells or nodes alone; the first type it starts on
is the one it runs on and is charged for.  If none starts, it waits with
every type's reason, under the GPUs it asked for (types and terms); if one
try must borrow in the first pass and no other starts, it is deferred.

A job whose user (:attr:`~fleet.core.jobs.Job.user`) is capped in its queue
(``limits.perUser``, :mod:`fleet.core.user_limits`) is tried as any job is;
the cap is the last question, asked of the start found: a start over it is
narrowed to the largest start within it that can start (a bisection among
the smaller sizes, :func:`_within_user_cap`), and when there is none the
job waits (:class:`OverUserLimit`), preempting nobody.  So a job that cannot
start anyway keeps the reason it would have without the cap, worded from
the same figures, and everything the cycle remembers from a try (the shape
memory, the reclaim and victim memories, the bulk waits behind it) is what
any user's job of that shape would have met: a job stopped by its user's
cap stops or parks no other job.  A job that names no user, or whose queue
has no per-user limit, pays one attribute test.

A victim is a unit (:mod:`fleet.core.charges`): a job's first unit stops the
whole job; a growth step of an elastic job stops only the pods it grew
into, and the job keeps running with the rest.  Each :class:`Preempt` names
its cause (:mod:`fleet.core.decisions`): ``Reclaim`` for a reclaim victim of
another queue, or another queue's borrowed cells; ``InQueuePriority`` for a
victim of the same queue; ``Opportunistic`` for another queue's
opportunistic job on the cells; the preemptor is the admitted job, and the
quota path runs from the victim's leaf to the admitted job's
(:meth:`~fleet.core.quota.QuotaTree.quota_path`), worked out only when a
victim is stopped.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.core import cluster_choice, quota_victims, timestamps, user_limits
from fleet.core.charges import Charge, charge_for
from fleet.core.cycle_context import CycleRun, Pass
from fleet.core.cycle_memory import Remembered
from fleet.core.decisions import IN_QUEUE_PRIORITY, OPPORTUNISTIC, RECLAIM, Admit, Preempt
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.lifecycle import JobState
from fleet.core.owed import Owed
from fleet.core.placement import BindError, Fit
from fleet.core.quota import MAX, QuotaBlock
from fleet.core.resources import Resources
from fleet.core.state import Running, Unit
from fleet.core.waiting import (
    NO_CLUSTER_FITS,
    OTHER,
    OWED_TO_GUARANTEED,
    QUEUE_ORDER,
    USER_LIMIT,
    VICTIMS_PROTECTED,
    block_category,
)


class Defer:
    """The job must borrow: try it again in the borrowing pass."""


DEFER = Defer()


@dataclass(frozen=True, slots=True)
class Started:
    """The job was admitted (the decisions are recorded)."""


STARTED = Started()


@dataclass(frozen=True, slots=True)
class Waits:
    """The job cannot start now; ``reason`` says why, ``kind`` is its category
    (:data:`fleet.core.waiting.CATEGORIES`)."""

    reason: str
    kind: str

    def __init__(self, reason: str, kind: str) -> None:
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "kind", kind)


@dataclass(frozen=True, slots=True)
class OverUserLimit:
    """The job could start but its user's cap in its queue says no (``reason``): it
    waits, and the cycle decides nothing else from it (no bulk wait behind it)."""

    reason: str
    #: its category: always :data:`fleet.core.waiting.USER_LIMIT`
    kind: str = USER_LIMIT

    def __init__(self, reason: str, kind: str = USER_LIMIT) -> None:
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "kind", kind)


Outcome = Started | Waits | OverUserLimit | Defer


@dataclass(slots=True)
class Plan:
    """A job's way in: its mode, pods, fit, and the quota victims it needs."""

    mode: Mode
    pods: tuple[Pod, ...]
    fit: Fit
    quota_victims: tuple[str, ...] = ()

    def __init__(
        self, mode: Mode, pods: tuple[Pod, ...], fit: Fit, quota_victims: tuple[str, ...] = ()
    ) -> None:
        self.mode = mode
        self.pods = pods
        self.fit = fit
        self.quota_victims = quota_victims


def admit(run: CycleRun, job: Job) -> Outcome:
    """Admit ``job`` at the largest size that can start now, or say why it waits;
    a job of several GPU types on the first of them that it starts on."""
    limits = run.state.tree.per_user(job.queue) if job.user else None
    if not job.gpu_terms and not job.gpu_skus:
        return _admit(run, job, limits)
    types = job.gpu_skus or job.gpu_types
    reasons: list[str] = []
    kind = OTHER
    deferred = False
    capped = False
    for sku in types:
        outcome = _admit(run, job.on(sku) if job.gpu_skus else job, limits)
        if isinstance(outcome, Started):
            return outcome
        if isinstance(outcome, Defer):
            deferred = True
        else:
            capped = capped or isinstance(outcome, OverUserLimit)
            if outcome.reason not in reasons:
                if not reasons:
                    kind = outcome.kind  # the first type's
                reasons.append(outcome.reason)
    if deferred:
        run.last_block = None
        return DEFER
    if len(types) > 1 or capped:
        run.last_block = None  # each type's try left its own
    text = f"waits for GPUs of {job.gpu_ask}: " + "; ".join(reasons)
    return OverUserLimit(text) if capped else Waits(text, kind)


def _admit(run: CycleRun, job: Job, limits: Resources | None = None) -> Outcome:
    """:func:`admit` on the job's one type, or any (the job as it comes), its user
    held to ``limits`` (its queue's ``limits.perUser``, if any)."""
    start, least = job.start_size, job.gang_size
    verdict: Mode | QuotaBlock | None = None
    key = None
    if run.shapes.on:
        verdict = run.state.tree.classify(
            job.queue,
            job.request_of(job.pods[:start]),
            priority=job.priority,
            preemptible=job.preemptible,
        )
        if isinstance(verdict, QuotaBlock) and _final(verdict, job) and least == start:
            # plan_with_victims would answer with the block at once, and there
            # is no smaller size to try.
            run.last_block = None
            return Waits(run.block_reason(verdict), block_category(verdict))
        if _deferred(run, verdict) and least == start:
            run.last_block = None
            return DEFER  # what plan answers at once (a deferral is never remembered)
        if run.phase is not Pass.BORROWING:  # (the memory is not used there)
            key = _memo_key(run, job, verdict, start, least)
            known = run.shapes.get(key)
            if known is not None:
                run.last_block = known.block
                return Waits(known.reason, known.kind)
    deferred = False
    reason = ""
    kind = OTHER
    # The verdict at the start size is the one just asked (nothing changed since).
    found = plan(run, job, job.pods[:start], verdict)
    if isinstance(found, Defer):
        deferred = True
    elif isinstance(found, str):
        reason, kind = found, run.last_kind
    if not isinstance(found, Plan) and least < start:
        smaller, smaller_deferred, smaller_reason = _largest_start(run, job, least, start - 1)
        if smaller is not None:
            found = smaller
        deferred = deferred or smaller_deferred
        if not reason:
            reason, kind = smaller_reason, run.last_kind
    if isinstance(found, Plan):
        start_plan = found
        if limits is not None:
            capped = _within_user_cap(run, job, found, limits)
            if isinstance(capped, OverUserLimit):
                return capped
            start_plan = capped
        refused = commit(run, job, start_plan)
        return STARTED if refused is None else Waits(refused, NO_CLUSTER_FITS)
    if deferred:
        return DEFER
    if key is not None:
        # At either size, a guaranteed or blocked verdict may preempt borrowed work.
        verdicts = (key[2], key[3])
        could_reclaim = any(v not in (None, Mode.BORROWED, Mode.OPPORTUNISTIC) for v in verdicts)
        run.shapes.put(key, Remembered(reason, run.last_block, kind), could_reclaim)
    return Waits(reason, kind)


def _within_user_cap(
    run: CycleRun, job: Job, found: Plan, limits: Resources
) -> Plan | OverUserLimit:
    """``found`` (a start of ``job``), or the largest start at most as large that keeps
    its user within ``limits``, or why not (:class:`OverUserLimit`)."""
    held = run.state.users.of(job.queue, job.user)
    size = len(found.pods)
    most = user_limits.most_pods(job, held, limits, job.gang_size, size)
    if most == size:
        return found
    smaller = _largest_start(run, job, job.gang_size, most)[0] if most >= job.gang_size else None
    if smaller is not None:
        return smaller
    run.last_block = None
    request = job.request_of(found.pods)
    return OverUserLimit(user_limits.reason(job.queue, job.user, held, limits, request))


def _largest_start(run: CycleRun, job: Job, lo: int, hi: int) -> tuple[Plan | None, bool, str]:
    """Bisect for the largest pod count in ``[lo, hi]`` that can start (None if not
    ``lo``: then ``run.last_kind`` is the category of the reason it gives)."""
    first = plan(run, job, job.pods[:lo])
    if not isinstance(first, Plan):
        return None, isinstance(first, Defer), first if isinstance(first, str) else ""
    best = first
    while lo < hi:
        mid = (lo + hi + 1) // 2
        attempt = plan(run, job, job.pods[:mid])
        if isinstance(attempt, Plan):
            best, lo = attempt, mid
        else:
            hi = mid - 1
    return best, False, ""


def _memo_key(
    run: CycleRun, job: Job, full: Mode | QuotaBlock, start: int, least: int
) -> tuple[object, ...]:
    """What a "cannot start" answer for ``job`` depends on (``full``: its verdict at
    the start size)."""
    tree = run.state.tree
    small: object = None
    if least < start:
        small = _verdict(
            tree.classify(
                job.queue, job.gang_request, priority=job.priority, preemptible=job.preemptible
            )
        )
    return (job.shape, run.phase, _verdict(full), small)


def _verdict(verdict: Mode | QuotaBlock) -> object:
    """A verdict as a memory's key: a block with its figures, which its text gives
    (an admission under the same limit changes them, and the text with them)."""
    if isinstance(verdict, Mode):
        return verdict
    return (verdict.node, verdict.resource, verdict.kind, verdict.used, verdict.limit)


def plan(
    run: CycleRun, job: Job, pods: tuple[Pod, ...], verdict: Mode | QuotaBlock | None = None
) -> Plan | str | Defer:
    """How ``pods`` of ``job`` would start now, or why not (a pure query).

    ``verdict`` is the quota tree's answer for ``pods`` if the caller just asked it.
    """
    run.last_block = None
    request = job.request_of(pods)
    if verdict is None:
        verdict = run.state.tree.classify(
            job.queue, request, priority=job.priority, preemptible=job.preemptible
        )
    if _deferred(run, verdict):
        return DEFER
    if verdict is Mode.BORROWED and run.owed is not None:
        kept = _kept(run, run.owed, job, request, final=True)
        if kept is not None:
            return kept
    if isinstance(verdict, Mode):
        fit = cluster_choice.place(run, job, pods, verdict, ())  # (it sets run.last_kind)
        if not isinstance(fit, Fit):
            return fit
        spared = _spared(run, job, fit)
        return Plan(verdict, pods, fit) if spared is None else spared
    return plan_with_victims(run, job, pods, request, verdict)


def _deferred(run: CycleRun, verdict: Mode | QuotaBlock) -> bool:
    """Whether a job with this verdict waits for the borrowing pass: it would borrow,
    and the first pass starts only what fits within its queue's ``min``."""
    return verdict is Mode.BORROWED and run.phase is Pass.GUARANTEED


def _final(block: QuotaBlock, job: Job) -> bool:
    """Whether nothing can make room for ``job`` under ``block``: only a full ``max``
    can be reclaimed or preempted under, and an opportunistic job preempts nobody."""
    return block.kind != MAX or job.opportunistic


def plan_with_victims(
    run: CycleRun, job: Job, pods: tuple[Pod, ...], request: Resources, block: QuotaBlock
) -> Plan | str | Defer:
    """Reclaim, or preempt inside the queue, to get under ``max``; a pure query."""
    tree = run.state.tree
    if _final(block, job):
        return run.why(run.block_reason(block), block_category(block))
    memo = (job.queue, block.node, block.resource)
    shortfall = block.used + block.request - block.limit
    # Minimum runtimes count only when a node sets one (the usual tree sets none).
    now = run.now if tree.protects() else None
    victims: list[str] | tuple[str, ...] | None = None
    if not run.reclaims.known_to_fail(memo, shortfall):
        victims = tree.reclaim_victims(job.queue, request, now, bounded=run.shortcuts.reclaim_bound)
        if victims is None:
            run.reclaims.record(memo, shortfall)
    if not victims:
        # The queue's own lower priorities; none below the job's (the leaf's
        # count says so) and the search would answer None after a walk.
        lowest = tree.lowest_preemptible_priority(job.queue)
        if (
            lowest is not None
            and lowest < job.priority
            and not run.reclaims.inside_fails(job.queue, job.priority, request)
            and not _kept_even_so(run, job, request)
        ):
            found = (job.queue, job.priority, request)
            victims = run.victims.victims(found, run.changes)
            if victims is None:
                victims = tree.queue_victims(job.queue, request, job.priority, now)
                if victims is None:
                    run.reclaims.record_inside(job.queue, job.priority, request)
                else:
                    run.victims.record_victims(found, run.changes, victims)
    if not victims:
        note = "" if now is None else _protection_note(run, job, request)
        if not note:
            run.last_block = block
        kind = VICTIMS_PROTECTED if note else block_category(block)
        return run.why(run.block_reason(block) + note, kind)
    removed: list[Charge] = []
    try:
        for key in victims:
            removed.append(tree.release(key))
        if run.owed is not None:
            _guarantees_moved(run.owed, removed)
        verdict = tree.classify(
            job.queue, request, priority=job.priority, preemptible=job.preemptible
        )
        if not isinstance(verdict, Mode):
            return run.why(run.block_reason(block), block_category(block))
        if _deferred(run, verdict):
            return DEFER
        if verdict is Mode.BORROWED and run.owed is not None:
            kept = _kept(run, run.owed, job, request, final=False)
            if kept is not None:
                return kept
        released = tuple(victims)
        question = (job.shape, len(pods), verdict, released)
        failed = run.victims.place_failed(question, run.changes)
        if failed is not None:
            return run.why(
                f"{run.block_reason(block)}; after preemption: {failed}", NO_CLUSTER_FITS
            )
        fit = cluster_choice.place(run, job, pods, verdict, released)
        if isinstance(fit, Fit):
            spared = _spared(run, job, fit)
            return Plan(verdict, pods, fit, released) if spared is None else spared
        run.victims.record_failure(question, run.changes, fit)
        return run.why(f"{run.block_reason(block)}; after preemption: {fit}", NO_CLUSTER_FITS)
    finally:
        for charge in reversed(removed):
            tree.admit(charge)
        if run.owed is not None:
            _guarantees_moved(run.owed, removed)


def _guarantees_moved(owed: Owed, charges: list[Charge]) -> None:
    """The victims' charges were lifted off the tree to ask "what if", or put back:
    the guaranteed usage of their queues moved, and with it what those queues
    are owed (their counts are out of date; a borrowed charge changes none)."""
    for charge in charges:
        if charge.mode is Mode.GUARANTEED:
            owed.touched(charge.queue)


def _kept(run: CycleRun, owed: Owed, job: Job, request: Resources, *, final: bool) -> str | None:
    """Why ``request`` may not borrow now: guaranteed jobs still ahead in the borrowing
    pass are owed the room (:mod:`fleet.core.owed`); None when it may.  The answer
    changes as the pass goes on, so the attempt is not remembered by its shape.

    ``final``: no victim was taken to get here, so nothing can make room for
    it in this pass; the ``max`` whose room is owed becomes ``run.last_block``
    (the jobs behind may wait on it together, :func:`fleet.core.bulk_wait.wait_all`).
    """
    kept = owed.kept(job, request)
    if kept is None:
        return None
    if final:
        run.last_block = QuotaBlock(
            kept.node, kept.resource, kept.used, kept.request, kept.limit, MAX, kept.leaf
        )
    return run.why(owed.text(kept), OWED_TO_GUARANTEED)


def _kept_even_so(run: CycleRun, job: Job, request: Resources) -> bool:
    """Whether ``job``, in the borrowing pass, would still be kept out on owed room
    with everything its queue's lower priorities hold freed (and still not fit its
    queue's ``min``): then no victim search among them can let it start, and
    none is made.  Whatever the search would find, the job waits all the same."""
    owed = run.owed
    if owed is None:
        return False
    tree = run.state.tree
    freed = {r: tree.lower_usage(job.queue, job.priority, r) for r in request.amounts}
    floor = tree.min_of(job.queue)
    if not floor or all(
        tree.guaranteed_of(job.queue, r) - freed.get(r, 0) + request.get(r, 0) <= cap
        for r, cap in floor.items()
    ):
        return False  # with them gone it might fit its min: then nothing is kept from it
    return owed.kept_beyond(job, request, freed)


def _spared(run: CycleRun, job: Job, fit: Fit) -> str | None:
    """Why a placement whose cells other jobs hold is not taken now: one of those jobs
    is younger than its minimum runtime (``preemptMinRuntime`` for a job of the same
    queue, ``reclaimMinRuntime`` for another queue's); None when none is protected."""
    tree = run.state.tree
    if not fit.victims or not tree.protects():
        return None
    running = run.state.running
    same = [v for v in fit.victims if v in running and running[v].job.queue == job.queue]
    other = [v for v in fit.victims if v in running and running[v].job.queue != job.queue]
    for keys, which, knob in (
        (same, quota_victims.PREEMPT, "preemptMinRuntime"),
        (other, quota_victims.RECLAIM, "reclaimMinRuntime"),
    ):
        end = tree.protection_ends(keys, which) if keys else None
        if end is not None and end > run.now:
            return run.why(
                f"the jobs holding the cells it needs in {fit.cluster} are protected by "
                f"{knob} until {timestamps.utc(end)}",
                VICTIMS_PROTECTED,
            )
    return None


def _protection_note(run: CycleRun, job: Job, request: Resources) -> str:
    """Why victims that would make room are not taken: a minimum runtime, until when."""
    tree = run.state.tree
    found = tree.reclaim_victims(job.queue, request)
    which, knob = quota_victims.RECLAIM, "reclaimMinRuntime"
    if not found:
        found = tree.queue_victims(job.queue, request, job.priority)
        which, knob = quota_victims.PREEMPT, "preemptMinRuntime"
    if not found:
        return ""
    end = tree.protection_ends(found, which)
    if end is None or end <= run.now:
        return ""
    return f"; the jobs that would make room are protected by {knob} until {timestamps.utc(end)}"


@dataclass(slots=True)
class _Stop:
    """The units of one running job that a commit releases."""

    owner: Running
    units: list[Unit]
    whole: bool
    before: list[Unit]  # the owner's units before, to put back on a refused bind

    def __init__(self, owner: Running, units: list[Unit], whole: bool, before: list[Unit]) -> None:
        self.owner = owner
        self.units = units
        self.whole = whole
        self.before = before


def commit(run: CycleRun, job: Job, plan: Plan) -> str | None:
    """Preempt the victims and start ``job``, or do neither; a reason if refused."""
    state = run.state
    run.changes += 1  # whatever comes of it (a refused bind puts everything back)
    units = plan.quota_victims + plan.fit.victims
    stops = _stops(run, units) if units else []
    for stop in stops:
        for unit in stop.units:
            state.release_unit(stop.owner, unit)
        if stop.whole:
            del state.running[stop.owner.job.key]
    placer = state.placers[plan.fit.cluster]
    charge = charge_for(job, plan.mode, job.request_of(plan.pods), since=run.now)
    fit: Fit = plan.fit
    try:
        placer.bind(job, charge, fit)
    except BindError as refused:
        _put_back(run, stops)
        stops = []
        again = placer.fit(job, plan.pods, plan.mode)
        try:
            if not isinstance(again, Fit):
                raise refused
            placer.bind(job, charge, again)
            fit = again
        except BindError:
            return f"{placer.cluster} refused the placement after making room: {refused}"
    victims = tuple(stop.owner.job.key for stop in stops if _report_stop(run, job, plan, stop))
    running = state.start(job, fit.cluster)
    state.hold(running, charge, fit.pods)
    state.move(job.key, JobState.ADMITTED)
    state.entered(charge)
    run.touch(job.queue)
    run.admitted.setdefault(job.queue, set()).add(job.key)
    run.places.bound(fit.cluster)
    if plan.mode is Mode.BORROWED:
        # A new borrowed unit is a new victim for reclaims and guaranteed jobs.
        run.reclaims.forget()
        run.shapes.forget_borrowed_dependents()
    if plan.mode is Mode.OPPORTUNISTIC:
        run.places.victim(fit.cluster)  # a new victim for borrowed jobs there
    run.decisions.append(
        Admit(
            job.key,
            job.queue,
            fit.cluster,
            plan.mode,
            job.priority,
            fit.pods,
            run.now,
            unit=charge.key,
            victims=victims,
        )
    )
    return None


def _stops(run: CycleRun, victims: tuple[str, ...]) -> list[_Stop]:
    """Group victim units by job, in order; a job's first unit stops all of it."""
    by_job: dict[str, _Stop] = {}
    for key in dict.fromkeys(victims):
        owner = run.state.units[key]
        stop = by_job.get(owner.job.key)
        if stop is None:
            stop = by_job[owner.job.key] = _Stop(owner, [], False, list(owner.units))
        if stop.whole:
            continue
        unit = next(u for u in owner.units if u.charge.key == key)
        if unit.charge.is_growth:
            stop.units.append(unit)
        else:
            stop.whole = True
            stop.units = list(reversed(owner.units))
    return list(by_job.values())


def _put_back(run: CycleRun, stops: list[_Stop]) -> None:
    """Undo the release of ``stops`` exactly: same cells, same charges."""
    state = run.state
    for stop in reversed(stops):
        owner = stop.owner
        placer = state.placers[owner.cluster]
        for unit in reversed(stop.units):
            placer.restore(owner.job_for(unit), unit.charge, unit.pods)
            state.tree.admit(unit.charge)
            state.units[unit.charge.key] = owner
            state.count_unit(owner.cluster, unit, 1)
        owner.units[:] = stop.before
        if stop.whole:
            state.track(owner)


def _report_stop(run: CycleRun, job: Job, plan: Plan, stop: _Stop) -> bool:
    """Record one victim's preemption (True), or its displacement if it was
    admitted earlier in this cycle (False: it never ran)."""
    state = run.state
    victim = stop.owner.job
    run.released(stop.owner.cluster, victim.queue)
    if stop.whole and victim.key in run.admitted.get(victim.queue, ()):
        # Started earlier in this very cycle: it never ran, so it simply stays
        # queued (its Admit is withdrawn) instead of being preempted.
        run.admitted[victim.queue].discard(victim.key)
        run.displaced.add(victim.key)
        state.phase[victim.key] = JobState.QUEUED
        state.end_run(victim.key)
        run.wait(victim, f"displaced by {job.key} in the same cycle", QUEUE_ORDER)
        return False
    keys = {u.charge.key for u in stop.units}
    if victim.queue != job.queue and keys & set(plan.quota_victims):
        why = f"reclaimed for {job.key} of queue {job.queue}"
        cause = RECLAIM
    else:
        why = f"preempted by {job.key} (priority {job.priority})"
        cause = _placement_cause(victim, job, stop.units)
    path = state.tree.quota_path(victim.queue, job.queue)
    pods = tuple(p for u in reversed(stop.units) for p in u.pods)
    if stop.whole:
        state.move(victim.key, JobState.PREEMPTED, why)
        state.stopping[victim.key] = victim
        run.decisions.append(
            Preempt(
                victim.key,
                victim.queue,
                stop.owner.cluster,
                pods,
                why,
                run.now,
                cause=cause,
                preemptor=job.key,
                quota_path=path,
            )
        )
        return True
    for unit in stop.units:
        run.decisions.append(
            Preempt(
                victim.key,
                victim.queue,
                stop.owner.cluster,
                unit.pods,
                f"growth step taken back: {why}",
                run.now,
                unit=unit.charge.key,
                cause=cause,
                preemptor=job.key,
                quota_path=path,
            )
        )
    return True


def _placement_cause(victim: Job, job: Job, units: list[Unit]) -> str:
    """Why ``job`` preempts ``victim`` when no reclaim of quota is the cause: a higher
    priority in the same queue, or the victim's cells (held opportunistically, or
    borrowed, which a guaranteed job takes back)."""
    if victim.queue == job.queue:
        return IN_QUEUE_PRIORITY
    if any(u.charge.mode is Mode.OPPORTUNISTIC for u in units):
        return OPPORTUNISTIC
    return RECLAIM
