"""Preemption: who may be a victim, how a question sees leaves, making victims leave.

Theory of operation: the victim rules are those of :mod:`fleet.core.placement`
(opportunistic jobs first, borrowed ones for guaranteed jobs, lower priorities
of the same queue).  A ``fit`` is asked at most twice — first with no victims,
then (when preemption is allowed) with every running job the rules let it
preempt — and each pass is one :class:`Question`: a leaf owned by nobody or by
a ``released`` job counts as free, a leaf owned by an allowed victim as a
victim leaf, any other owned leaf not at all.  Victims are thus considered
only when the pass without them finds nothing; the packing then ranks
placements by (level, victim jobs, victim leaves, fit).  When a candidate
needs victims or released jobs to leave (its safety check, the fit's answer),
they are released in key order inside the query's journal and rolled back
with it; a job's first unit takes its growth steps with it (:func:`leaving`),
as the cycle stops the whole job.
"""

from __future__ import annotations

from collections.abc import Iterable

from fleet.core import placement
from fleet.core.cells import ownership
from fleet.core.cells.state import PlacerState
from fleet.core.jobs import Job, Mode


class Question:
    """One question: which leaves count as free or as victims."""

    __slots__ = ("job", "preempt", "released", "taken", "victims_ok")

    def __init__(self, job: str, released: frozenset[str], victims_ok: frozenset[str]) -> None:
        self.job = job
        self.released = released
        self.victims_ok = victims_ok
        self.preempt = bool(victims_ok)
        #: Leaves already picked for other pods of the gang (spreading).
        self.taken: set[int] = set()


def allowed(state: PlacerState, job: Job, mode: Mode, released: frozenset[str]) -> frozenset[str]:
    """Running jobs ``job`` may preempt here (not released ones, not itself).

    Only the units the rules could allow are looked at (the state's victim
    indexes: opportunistic units for any job that may preempt, borrowed ones
    and the queue's own guaranteed ones for a guaranteed job), not every
    held unit.
    """
    if job.opportunistic or mode is Mode.OPPORTUNISTIC:
        return frozenset()
    pools = [state.victims_by_mode[Mode.OPPORTUNISTIC]]
    if mode is Mode.GUARANTEED:
        pools.append(state.victims_by_mode[Mode.BORROWED])
        pools.append(state.victims_by_queue.get(job.queue, {}))
    held = state.held
    return frozenset(
        key
        for pool in pools
        for key in pool
        if key not in released
        and key != job.key
        and placement.may_preempt(job, mode, held[key].info)
    )


def any_allowed(state: PlacerState, job: Job, mode: Mode) -> bool:
    """Whether some held unit is a victim the rules allow ``job`` in ``mode`` (the
    indexes of :func:`allowed`, stopping at the first)."""
    if job.opportunistic or mode is Mode.OPPORTUNISTIC:
        return False
    pools = [state.victims_by_mode[Mode.OPPORTUNISTIC]]
    if mode is Mode.GUARANTEED:
        pools.append(state.victims_by_mode[Mode.BORROWED])
        pools.append(state.victims_by_queue.get(job.queue, {}))
    held = state.held
    return any(
        key != job.key and placement.may_preempt(job, mode, held[key].info)
        for pool in pools
        for key in pool
    )


def nobody_leaves(state: PlacerState, victims: set[str], question: Question) -> bool:
    """Whether taking a placement with ``victims`` needs no running job to leave first."""
    return not victims and not any(key in state.held for key in question.released)


def make_leave(state: PlacerState, victims: set[str], question: Question) -> None:
    """Release ``victims`` and the question's released jobs that are held, in key order."""
    for key in leaving(state, victims | question.released):
        ownership.release(state, key)


def leaving(state: PlacerState, keys: Iterable[str]) -> list[str]:
    """The held units that leave with ``keys``, in key order.

    A job's first unit leaving stops the whole job (the cycle stops all its
    units), so its growth steps held here leave with it: their leaves are freed
    too, and a VC cell only they kept bound is unbound, as ``bind`` will see.
    """
    held = state.held
    out = {key for key in keys if key in held}
    whole = {held[key].info.job for key in out if not held[key].info.is_growth}
    for job in whole:  # its growth units (its first unit is ``job`` itself)
        out.update(state.units.get(job, ()))
    return sorted(out)
