"""Job states and the one table of legal transitions between them.

Theory of operation: like h11's connection states, every legal move is a row
of :data:`TRANSITIONS`; :func:`transition` applies one and raises
:class:`IllegalTransition` for anything else.  The service persists every
applied transition as an event (time and reason); the core only says which
moves exist.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class JobState(StrEnum):
    QUEUED = "Queued"
    ADMITTED = "Admitted"
    DISPATCHED = "Dispatched"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    PREEMPTED = "Preempted"
    CANCELLED = "Cancelled"


_Q, _A, _D, _R = JobState.QUEUED, JobState.ADMITTED, JobState.DISPATCHED, JobState.RUNNING
_S, _F, _P, _C = JobState.SUCCEEDED, JobState.FAILED, JobState.PREEMPTED, JobState.CANCELLED

#: state -> the states it may move to.
TRANSITIONS: Final[dict[JobState, frozenset[JobState]]] = {
    _Q: frozenset({_A, _C, _F}),  # Failed: rejected at admission for good
    _A: frozenset({_D, _P, _C, _F, _Q}),  # Queued: the member cluster refused it
    _D: frozenset({_R, _S, _F, _P, _C, _Q}),  # Queued: failover to another cluster
    _R: frozenset({_S, _F, _P, _C, _Q}),
    _P: frozenset({_Q, _C, _F}),  # Failed: its queue left the tree meanwhile
    _S: frozenset(),
    _F: frozenset(),
    _C: frozenset(),
}

TERMINAL: Final = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
#: States in which a job holds quota and cells.
HOLDING: Final = frozenset({_A, _D, _R})


class IllegalTransition(ValueError):
    """A move that the table does not allow."""

    def __init__(self, job: str, old: JobState, new: JobState) -> None:
        super().__init__(f"job {job}: cannot move from {old} to {new}")
        self.job, self.old, self.new = job, old, new


def transition(job: str, old: JobState, new: JobState) -> JobState:
    """Return ``new`` if ``old -> new`` is legal, else raise IllegalTransition."""
    if new not in TRANSITIONS[old]:
        raise IllegalTransition(job, old, new)
    return new
