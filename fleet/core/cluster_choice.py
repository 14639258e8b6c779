"""Where a gang goes: asking the member clusters' placers, tightest fit first.

Theory of operation: every member cluster the job's policy allows is asked
for a gang fit without preemption, least loaded first, stopping early at a
fit as tight as the gang can be (``Placer.lowest_level``); the tightest fit
wins (lowest cell level, least fragmentation, least loaded, name).  A cheap
necessary check on the cluster's free totals, and the cluster's remembered
"no" answers (:class:`fleet.core.cycle_memory.PlacementMemo`), skip most
questions; a borrowed or opportunistic question that no cluster could take
is answered at once until a release anywhere (and an opportunistic question
that no cluster took when the last pass began, for the whole pass: see
:func:`idle_question`).  If no cluster fits, clusters
are asked again with preemption allowed, least loaded first, until
:data:`PREEMPTION_CLUSTERS` of them can take the gang; the fit with the
fewest, then lowest-priority victims wins.
``released`` names units the cycle already plans to preempt (quota reclaim):
each placer sees those it holds as free.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleet.core import resources
from fleet.core.cycle_context import CycleRun
from fleet.core.cycle_memory import Ranked
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import Fit, NoFit, Placer
from fleet.core.waiting import CLUSTER_NOT_READY, INADMISSIBLE, NO_CLUSTER_FITS

_NONE: frozenset[str] = frozenset()

#: With preemption, the least loaded clusters are asked until this many can take
#: the gang; the one with the fewest, then lowest-priority victims wins.
PREEMPTION_CLUSTERS = 2


def place(
    run: CycleRun, job: Job, pods: tuple[Pod, ...], mode: Mode, released: tuple[str, ...]
) -> Fit | str:
    """The best fit for ``pods`` of ``job`` in ``mode`` over the allowed clusters, or why
    not (its category in ``run.last_kind``)."""
    placers = candidates(run, job)
    if not placers:
        return _nowhere(run, job)
    run.last_kind = NO_CLUSTER_FITS  # the other answers' (none when it fits)
    need = _sum(pods)
    best: tuple[tuple[int, float, float, str], Fit] | None = None
    # The reason names the first three clusters' misses and counts the rest.
    misses: list[str] = []
    missed = 0
    question = (
        tuple(p.request for p in pods),
        mode,
        job.gpu_types,
        job.pinned_cell_id,
        job.queue if mode is Mode.GUARANTEED else None,
    )
    # Borrowed and opportunistic questions that no cluster could take stay
    # unanswerable until a release somewhere (binds only take room, and their
    # only victims, opportunistic jobs, count as a release where they start).
    everywhere = run.places.everywhere if run.places.on else None
    wide: tuple[object, ...] | None = None
    if mode is Mode.OPPORTUNISTIC and run.places.idle:
        why = run.places.idle.get((question, job.clusters))
        if why is not None:
            return why
    if everywhere is not None and not released and mode is not Mode.GUARANTEED:
        wide = (question, job.clusters)
        why = everywhere.get(wide)
        if why is not None:
            return why
    held = _held_by_cluster(run, released) if released else None
    blind = question[:-1]
    room = run.places.room
    for load, name, placer in placers:
        known = run.places.answers(name)
        # Only a guaranteed question names the queue (its last item).
        blind_here = mode is not Mode.GUARANTEED or placer.blind_to_queue(job, mode)
        key = blind if blind_here else question
        here = held.get(name, _NONE) if held is not None else _NONE
        if not here:
            if not _may_fit(room[name][0], need):
                missed += 1
                if missed <= 3:
                    misses.append(f"{name}: not enough free capacity")
                continue
            why = known.get(key)
            if why is not None:
                missed += 1
                if missed <= 3:
                    misses.append(why)
                continue
        fit = placer.fit(job, pods, mode, released=here)
        if isinstance(fit, NoFit):
            why = f"{name}: {fit.reason}"
            missed += 1
            if missed <= 3:
                misses.append(why)
            if not here:
                known[key] = why
            continue
        rank = (fit.level, fit.fragmentation, load, placer.cluster)
        if best is None or rank < best[0]:
            best = (rank, fit)
        if fit.level <= placer.lowest_level(job, pods):
            break
    if best is not None:
        return best[1]
    if mode is not Mode.OPPORTUNISTIC:
        victim_fit = place_with_preemption(run, job, pods, mode, released, placers)
        if victim_fit is not None:
            return victim_fit
    reason = "no cluster can hold all the job's pods now: " + "; ".join(misses)
    if missed > 3:
        reason += f"; and {missed - 3} more"
    if wide is not None and everywhere is not None:
        everywhere[wide] = reason
    return reason


def idle_question(run: CycleRun, job: Job) -> str | None:
    """Ask once, as the last pass begins, where the opportunistic ``job`` would start.

    Returns None if some cluster takes it now; otherwise why none does,
    remembered for the rest of the pass for every job with the same
    question (:attr:`fleet.core.cycle_memory.PlacementMemo.idle`).
    """
    pods = job.pods[: job.start_size]
    found = place(run, job, pods, Mode.OPPORTUNISTIC, ())
    if isinstance(found, Fit):
        return None
    requests = tuple(p.request for p in pods)
    question = (requests, Mode.OPPORTUNISTIC, job.gpu_types, job.pinned_cell_id)
    run.places.idle[((*question, None), job.clusters)] = found
    return found


def place_with_preemption(
    run: CycleRun,
    job: Job,
    pods: tuple[Pod, ...],
    mode: Mode,
    released: tuple[str, ...],
    placers: list[Ranked],
) -> Fit | None:
    """The fit with the fewest, then lowest-priority victims among the first clusters that fit."""
    units = run.state.units
    best: tuple[tuple[int, int, int, float, str], Fit] | None = None
    found = 0
    # A borrowed job may preempt only opportunistic jobs, whatever its queue
    # and priority, and none start before the last pass: a failed question
    # holds for the cycle until a release in that cluster.
    question = ("preempt", tuple(p.request for p in pods), job.gpu_types, job.pinned_cell_id)
    wide = question[1:]
    held = _held_by_cluster(run, released) if released else None
    for load, _, placer in placers:
        if found >= PREEMPTION_CLUSTERS:
            break
        if run.places.on and not placer.may_have_victims(job, mode):
            # With no victim allowed here the question is the one :func:`place`
            # just asked without preemption (same released units): "no".
            continue
        known = run.places.answers(placer.cluster)
        here = held.get(placer.cluster, _NONE) if held is not None else _NONE
        memo = mode is Mode.BORROWED and not here
        if memo and question in known:
            continue
        # A guaranteed job may also preempt borrowed work and lower priorities
        # of its queue: its "no" holds only until the next bind or release there.
        strict = run.places.until_bound(placer.cluster) if mode is Mode.GUARANTEED else None
        if strict is not None and not here and (wide, job.queue, job.priority) in strict:
            continue
        fit = placer.fit(job, pods, mode, preempt=True, released=here)
        if isinstance(fit, NoFit):
            if memo:
                known[question] = fit.reason
            elif strict is not None and not here:
                strict.add((wide, job.queue, job.priority))
            continue
        found += 1
        top = max((units[v].job.priority for v in fit.victims if v in units), default=0)
        rank = (len(fit.victims), top, fit.level, load, placer.cluster)
        if best is None or rank < best[0]:
            best = (rank, fit)
        if len(fit.victims) <= 1 and top < 0:
            break  # one opportunistic victim: no cluster can do better on victims
    return best[1] if best else None


def _held_by_cluster(run: CycleRun, released: tuple[str, ...]) -> dict[str, frozenset[str]]:
    """The released units by the cluster whose placer holds them (each unit's
    running job says where it runs), instead of asking every placer about each."""
    units = run.state.units
    by: dict[str, list[str]] = {}
    for key in released:
        owner = units.get(key)
        if owner is not None and run.state.placers[owner.cluster].holds(key):
            by.setdefault(owner.cluster, []).append(key)
    return {name: frozenset(keys) for name, keys in by.items()}


def _nowhere(run: CycleRun, job: Job) -> str:
    """Why no cluster is a candidate for ``job``."""
    allowed = [n for n in run.state.placers if job.clusters is None or n in job.clusters]
    if not allowed:
        return run.why("no member cluster is allowed by the job's placement policy", INADMISSIBLE)
    why = [f"{n} {'is not ready' if n in run.state.unready else 'is draining'}" for n in allowed]
    return run.why(
        "no allowed member cluster takes new jobs: " + ", ".join(why[:3]), CLUSTER_NOT_READY
    )


def candidates(run: CycleRun, job: Job) -> list[Ranked]:
    """The clusters ``job`` may use with their load and name, least loaded first
    (then by name: the triples sort as they are, no two names alike).

    The order of all clusters is kept (:class:`~fleet.core.cycle_memory.PlacementMemo`),
    not sorted again for every job: a cluster whose load a bind or release
    changed is taken out and put back in its place (a bisection) the next
    time the order is asked for.
    """
    memo = run.places
    order = memo.order
    if order is not None and memo.moved:
        order = order.copy()  # a list handed out before stays as it was
        moved = sorted(memo.moved) if len(memo.moved) > 1 else list(memo.moved)
        for name in moved:
            placed = memo.placed.pop(name, None)
            if placed is None:
                continue  # not in the order (draining or not ready)
            placer = order.pop(_position(order, placed, name))[2]
            room = memo.room.get(name)
            if room is None:
                room = memo.room[name] = _room(placer)
            order.insert(_position(order, room[1], name), (room[1], name, placer))
            memo.placed[name] = room[1]
        memo.moved.clear()
        memo.order = order
    if order is None:
        draining = run.state.draining
        unready = run.state.unready
        order = []
        for name, placer in run.state.placers.items():
            if draining and name in draining:
                continue
            if unready and name in unready:
                continue
            room = memo.room.get(name)
            if room is None:
                room = memo.room[name] = _room(placer)
            order.append((room[1], name, placer))
        order.sort()
        if memo.on:
            memo.order = order
            memo.moved.clear()
            memo.placed = {name: load for load, name, _ in order}
    if job.clusters is None:
        return order
    allowed = job.clusters
    return [ranked for ranked in order if ranked[1] in allowed]


def _position(order: list[Ranked], load: float, name: str) -> int:
    """Where ``(load, name)`` is or would go in ``order`` (a bisection that compares
    the typed fields, not the triples: no two names alike)."""
    lo = 0
    hi = len(order)
    while lo < hi:
        mid = (lo + hi) // 2
        entry = order[mid]
        if entry[0] < load or (entry[0] == load and entry[1] < name):
            lo = mid + 1
        else:
            hi = mid
    return lo


def _sum(pods: Sequence[Pod]) -> dict[str, int]:
    total: dict[str, int] = {}
    for pod in pods:
        for name, amount in pod.request.amounts.items():
            total[name] = total.get(name, 0) + amount
    return total


def _room(placer: Placer) -> tuple[dict[str, int], float]:
    """Free resources of a cluster and its load (share of GPUs, else cpu, in use)."""
    capacity = placer.capacity().amounts
    allocated = placer.allocated().amounts
    free = {name: amount - allocated.get(name, 0) for name, amount in capacity.items()}
    load = 0.0
    for name in (resources.GPU, resources.CPU):
        total = capacity.get(name, 0)
        if total:
            load = allocated.get(name, 0) / total
            break
    return free, load


def _may_fit(free: dict[str, int], need: dict[str, int]) -> bool:
    """Cheap necessary condition: the cluster has that much free in total."""
    for name in (resources.GPU, resources.CPU, resources.MEMORY):
        amount = need.get(name, 0)
        if amount and name in free and free[name] < amount:
            return False
    return True
