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
with it.
"""

from __future__ import annotations

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
    """Running jobs ``job`` may preempt here (not released ones, not itself)."""
    return frozenset(
        key
        for key, held in state.held.items()
        if key not in released and key != job.key and placement.may_preempt(job, mode, held.info)
    )


def nobody_leaves(state: PlacerState, victims: set[str], question: Question) -> bool:
    """Whether taking a placement with ``victims`` needs no running job to leave first."""
    return not victims and not any(key in state.held for key in question.released)


def make_leave(state: PlacerState, victims: set[str], question: Question) -> None:
    """Release ``victims`` and the question's released jobs that are held, in key order."""
    for key in sorted(victims | question.released):
        if key in state.held:
            ownership.release(state, key)
