"""What a scheduling cycle decides: admit, preempt, or wait.

Theory of operation: :func:`fleet.core.cycle.cycle` returns these frozen
values; the shell persists them and acts on them.  Every decision names its
job by key; placements name node names and GPU indices.  An :class:`Admit`
and the :class:`Preempt` of its victims come together or not at all; a
preempted job stays ``Preempted`` (holding nothing in the core) until the
shell confirms with :class:`fleet.core.events.Stopped` that its pods are gone,
and only then is it queued again.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet.core.jobs import Mode
from fleet.core.placement import PodPlacement


@dataclass(frozen=True, slots=True)
class Admit:
    """Start ``job`` (or, with ``grown``, more of its pods as unit ``unit``) in ``cluster``.

    ``victims`` are the jobs (or growth units) preempted for it in the same
    cycle: its pods may run only once theirs have stopped.
    """

    job: str
    queue: str
    cluster: str
    mode: Mode
    priority: int
    pods: tuple[PodPlacement, ...]
    at: float = 0.0
    grown: bool = False
    unit: str = ""
    victims: tuple[str, ...] = ()

    def __init__(
        self,
        job: str,
        queue: str,
        cluster: str,
        mode: Mode,
        priority: int,
        pods: tuple[PodPlacement, ...],
        at: float = 0.0,
        grown: bool = False,
        unit: str = "",
        victims: tuple[str, ...] = (),
    ) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "cluster", cluster)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "priority", priority)
        object.__setattr__(self, "pods", pods)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "grown", grown)
        object.__setattr__(self, "unit", unit)
        object.__setattr__(self, "victims", victims)


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop ``pods`` of running ``job`` in ``cluster``.

    With ``unit`` empty the whole job stops and is queued again once the
    shell confirms it stopped; otherwise only the growth step ``unit`` is
    taken back and the job keeps running with its other pods (it may grow
    again later).
    """

    job: str
    queue: str
    cluster: str
    pods: tuple[PodPlacement, ...]
    reason: str
    at: float = 0.0
    unit: str = ""

    def __init__(
        self,
        job: str,
        queue: str,
        cluster: str,
        pods: tuple[PodPlacement, ...],
        reason: str,
        at: float = 0.0,
        unit: str = "",
    ) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "cluster", cluster)
        object.__setattr__(self, "pods", pods)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "unit", unit)


@dataclass(frozen=True, slots=True)
class Wait:
    """``job`` stays queued; ``reason`` names the limit that blocks it."""

    job: str
    queue: str
    reason: str
    at: float = 0.0

    def __init__(self, job: str, queue: str, reason: str, at: float = 0.0) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "at", at)


Decision = Admit | Preempt | Wait
