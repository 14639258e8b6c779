"""Growth: running jobs that started below their full size take the pods that now fit.

Theory of operation: after the passes, every running job that holds fewer
pods than it may run (an incremental job, a gang started at its
``minAvailable``, an elastic job below ``maxReplicas``) is offered its
missing pods, all at once, else the largest count that fits (bisection).
Each growth is a new *unit* (:mod:`fleet.core.charges`) with its own quota
verdict: a growth step above the queue's ``min`` is borrowed and is the
first thing taken back when another job needs the room, while the job keeps
the pods it started with.  The growth unit is bound in its placer under the
unit key, so placers and the quota tree offer it as a victim on its own.
A job whose user is capped in its queue (``limits.perUser``,
:mod:`fleet.core.user_limits`) grows by no more pods than keep the user
within the caps.  Only the jobs the state tracks as possibly partial are visited
(:meth:`~fleet.core.state.SchedulerState.partial_jobs`), not every running
job: a cycle after a batch of submissions pays nothing for complete jobs.
"""

from __future__ import annotations

import dataclasses

from fleet.core import charges, user_limits
from fleet.core.cycle_context import CycleRun
from fleet.core.decisions import Admit
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import Fit
from fleet.core.resources import ONE_JOB
from fleet.core.state import Running


def grow(run: CycleRun) -> None:
    """Give each partially running job the most of its missing pods that fit now."""
    for owner in run.state.partial_jobs():
        if run.state.running.get(owner.job.key) is not owner or owner.complete:
            continue
        placed = {p.pod for p in owner.pods}
        missing = tuple(p for p in owner.job.pods if p.name not in placed)
        if owner.job.user:
            missing = _within_cap(run, owner.job, missing)
            if not missing:
                continue
        step = 1 + max(charges.step_of(u.charge.key) for u in owner.units)
        unit_job = _unit_job(owner.job, charges.unit_key(owner.job.key, step))
        if _try(run, owner, unit_job, missing):
            continue
        lo, hi = 1, len(missing) - 1
        if hi < lo or not _try_fit(run, owner, unit_job, missing[:lo]):
            continue
        best = lo
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _try_fit(run, owner, unit_job, missing[:mid]):
                best, lo = mid, mid
            else:
                hi = mid - 1
        _try(run, owner, unit_job, missing[:best])


def _within_cap(run: CycleRun, job: Job, missing: tuple[Pod, ...]) -> tuple[Pod, ...]:
    """The first of ``missing`` that ``job``'s user may still take in its queue: all of
    them without a per-user limit there (bisection: more pods ask no less)."""
    limits = run.state.tree.per_user(job.queue)
    if limits is None:
        return missing
    held = run.state.users.of(job.queue, job.user)
    lo, hi = 0, len(missing)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if user_limits.over_cap(held, limits, job.request_of(missing[:mid]) - ONE_JOB) is None:
            lo = mid
        else:
            hi = mid - 1
    return missing[:lo]


def _unit_job(job: Job, key: str) -> Job:
    return dataclasses.replace(job, key=key)


def _verdict(run: CycleRun, job: Job, pods: tuple[Pod, ...]) -> Mode | None:
    request = job.request_of(pods) - ONE_JOB
    verdict = run.state.tree.classify(
        job.queue, request, priority=job.priority, preemptible=job.preemptible
    )
    return verdict if isinstance(verdict, Mode) else None


def _try_fit(run: CycleRun, owner: Running, unit_job: Job, pods: tuple[Pod, ...]) -> bool:
    mode = _verdict(run, unit_job, pods)
    if mode is None:
        return False
    return isinstance(run.state.placers[owner.cluster].fit(unit_job, pods, mode), Fit)


def _try(run: CycleRun, owner: Running, unit_job: Job, pods: tuple[Pod, ...]) -> bool:
    """Grow ``owner`` by ``pods`` as the unit ``unit_job.key`` if they fit now."""
    state = run.state
    mode = _verdict(run, unit_job, pods)
    if mode is None:
        return False
    placer = state.placers[owner.cluster]
    fit = placer.fit(unit_job, pods, mode)
    if not isinstance(fit, Fit):
        return False
    request = unit_job.request_of(pods) - ONE_JOB
    step = charges.step_of(unit_job.key)
    charge = charges.charge_for(owner.job, mode, request, step, since=run.now)
    placer.bind(unit_job, charge, fit)
    state.hold(owner, charge, fit.pods)
    state.entered(charge)
    run.places.bound(owner.cluster)
    run.touch(owner.job.queue)
    run.decisions.append(
        Admit(
            owner.job.key,
            owner.job.queue,
            owner.cluster,
            mode,
            owner.job.priority,
            fit.pods,
            run.now,
            grown=True,
            unit=charge.key,
        )
    )
    return True
