"""The one record of how a running job is charged and how safe it is.

Theory of operation: a running job holds quota and cells in one or more
*units*.  A job admitted whole is one unit, keyed by the job's key.  An
elastic or incremental job that grows later adds one unit per growth step,
keyed ``namespace/name#2``, ``#3`` …, each classified on its own (a growth
step above the queue's ``min`` is borrowed even when the job's first unit is
guaranteed).  A :class:`Charge` is that unit's record: its mode, its request
and what victim rules need (queue, priority, submission order,
preemptibility), and the job's user (:attr:`~fleet.core.jobs.Job.user`), whose
per-user counters the unit is counted in.  The scheduler state, the quota tree and the placers all
keep the *same* frozen object, so a unit's mode is recorded once.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.core.digits import parse_digits
from fleet.core.jobs import Job, Mode
from fleet.core.resources import Resources

#: Separates a job's key from its growth step number in a unit key.
STEP_SEPARATOR = "#"


@dataclass(frozen=True, slots=True)
class Charge:
    """One unit of a running job: the job itself or one of its growth steps."""

    key: str  # the unit key: the job key, or "<job key>#<step>"
    job: str  # the job key
    queue: str
    priority: int
    seq: int
    preemptible: bool
    mode: Mode
    request: Resources
    #: when the unit was admitted (the core's clock); minimum runtimes count from it
    since: float = 0.0
    #: the job's user (empty: none), counted per leaf by :mod:`fleet.core.user_limits`
    user: str = ""

    def __init__(
        self,
        key: str,
        job: str,
        queue: str,
        priority: int,
        seq: int,
        preemptible: bool,
        mode: Mode,
        request: Resources,
        since: float = 0.0,
        user: str = "",
    ) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "seq", seq)
        object.__setattr__(self, "preemptible", preemptible)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "request", request)
        object.__setattr__(self, "since", since)
        object.__setattr__(self, "user", user)

    @property
    def is_growth(self) -> bool:
        """Whether this unit is a growth step (not the job's first unit)."""
        return self.key != self.job


def unit_key(job: str, step: int) -> str:
    """The key of growth step ``step`` (2, 3 …) of ``job``; step 1 is the job itself."""
    return job if step <= 1 else f"{job}{STEP_SEPARATOR}{step}"


def charge_for(
    job: Job, mode: Mode, request: Resources | None = None, step: int = 1, *, since: float = 0.0
) -> Charge:
    """The record of ``job``'s unit ``step`` charged ``request`` (default: all its pods),
    admitted at ``since``."""
    return Charge(
        unit_key(job.key, step),
        job.key,
        job.queue,
        job.priority,
        job.seq,
        job.preemptible,
        mode,
        job.request if request is None else request,
        since,
        job.user,
    )


def step_of(key: str) -> int:
    """The growth step number of a unit key (1 for a job's first unit)."""
    _, sep, step = key.rpartition(STEP_SEPARATOR)
    found = parse_digits(step) if sep else None
    return 1 if found is None else found
