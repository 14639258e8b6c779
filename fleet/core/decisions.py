"""What a scheduling cycle decides: admit, preempt, or wait.

Theory of operation: :func:`fleet.core.cycle.cycle` returns these frozen
values; the shell persists them and acts on them.  Every decision names its
job by key; placements name node names and GPU indices.  An :class:`Admit`
and the :class:`Preempt` of its victims come together or not at all; a
preempted job stays ``Preempted`` (holding nothing in the core) until the
shell confirms with :class:`fleet.core.events.Stopped` that its pods are gone,
and only then is it queued again.

Every preemption says why as data: its cause (one of :data:`CAUSES`, the
names the job's record, its events and ``fleet_preempted_workloads_total``
use), the preemptor (the job that needed the room; empty when none did) and
the quota path (the tree nodes through which the quota was at stake: for a
reclaim, from the victim's leaf up to the lowest node above both leaves and
down to the preemptor's leaf; for a preemption inside a queue, the leaf; for
a quota cut, from the victim's leaf up to the cut node; empty when no quota
was at stake).  A cycle's :class:`Preempt` carries them; a preemption
that an event causes (:mod:`fleet.core.events`) carries a
:class:`Preemption` on its transition.  The ``reason`` text of a cycle's
:class:`Preempt` is what it always was (the decisions, and their digests, do
not change); :func:`explain` words the three into the message the shell
records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from fleet.core.jobs import Mode
from fleet.core.placement import PodPlacement

#: Causes of a preemption (Kueue-like names).  A queue takes back quota within its
#: ``min`` that another queue borrowed (the borrower's quota, or its cells):
RECLAIM: Final = "Reclaim"
#: a job of higher priority of the same queue needs the room:
IN_QUEUE_PRIORITY: Final = "InQueuePriority"
#: a job of another queue needs the cells an opportunistic job runs on:
OPPORTUNISTIC: Final = "Opportunistic"
#: a node stayed over its limits for ``--quota-cut-grace`` after a quota change:
QUOTA_CUT: Final = "QuotaCut"
#: a node the job runs on went bad:
NODE_HEALTH: Final = "NodeHealth"
#: the job was unhealthy in its member too long and goes elsewhere:
FAILOVER: Final = "Failover"
#: its member's nodes changed and its cells are gone:
EVICTED: Final = "Evicted"
#: its member cluster was removed:
CLUSTER_REMOVED: Final = "ClusterRemoved"
#: it ran longer than its deadline or its queue's ``maxRuntime``:
MAX_RUNTIME: Final = "MaxRuntime"
#: every cause, in the order reports list them
CAUSES: Final = (
    RECLAIM,
    IN_QUEUE_PRIORITY,
    OPPORTUNISTIC,
    QUOTA_CUT,
    NODE_HEALTH,
    FAILOVER,
    EVICTED,
    CLUSTER_REMOVED,
    MAX_RUNTIME,
)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Why a job was stopped by an event: its cause, preemptor and quota path, and the
    queue it was stopped in."""

    cause: str
    queue: str
    preemptor: str = ""
    quota_path: tuple[str, ...] = ()


def explain(reason: str, cause: str, preemptor: str, quota_path: tuple[str, ...]) -> str:
    """A preemption's message: ``reason`` with its cause, preemptor and quota path named
    (``reason`` alone when no job preempted it and no quota was at stake: its text
    says what happened, a node gone bad, a removed member)."""
    if not preemptor and not quota_path:
        return reason
    parts = [cause]
    if preemptor:
        parts.append(f"preemptor {preemptor}")
    if quota_path:
        parts.append("quota path " + " > ".join(quota_path))
    return f"{reason} [{'; '.join(parts)}]"


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
    again later).  ``cause``, ``preemptor`` and ``quota_path``: why (module
    docstring); :attr:`message` words them with ``reason``.
    """

    job: str
    queue: str
    cluster: str
    pods: tuple[PodPlacement, ...]
    reason: str
    at: float = 0.0
    unit: str = ""
    cause: str = ""
    preemptor: str = ""
    quota_path: tuple[str, ...] = ()

    def __init__(
        self,
        job: str,
        queue: str,
        cluster: str,
        pods: tuple[PodPlacement, ...],
        reason: str,
        at: float = 0.0,
        unit: str = "",
        cause: str = "",
        preemptor: str = "",
        quota_path: tuple[str, ...] = (),
    ) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "queue", queue)
        object.__setattr__(self, "cluster", cluster)
        object.__setattr__(self, "pods", pods)
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "at", at)
        object.__setattr__(self, "unit", unit)
        object.__setattr__(self, "cause", cause)
        object.__setattr__(self, "preemptor", preemptor)
        object.__setattr__(self, "quota_path", quota_path)

    @property
    def message(self) -> str:
        """``reason`` with the cause, preemptor and quota path named (:func:`explain`)."""
        return explain(self.reason, self.cause, self.preemptor, self.quota_path)


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
