"""The contract between the scheduling cycle and a member cluster's placer.

Theory of operation: the cycle decides *whether* a job may start (quota,
order, fairness); a :class:`Placer` (one per member cluster) decides *where*:
which node and which GPU indices every pod gets, and which running jobs would
have to be preempted to make room.  A placer is asked first without
preemption; only if no cluster can take the gang as it is, it is asked again
with preemption allowed.  Asking never changes the placer: ``fit`` is a query
and ``bind`` commits the answer the cycle chose.

Victim rules every placer honours (docs/design/core-and-cycle.md, *Placers*):

* a non-preemptible job is never a victim;
* opportunistic jobs are victims for any non-opportunistic job;
* borrowed jobs are victims for a guaranteed job;
* inside one queue (virtual cluster), a guaranteed job may preempt guaranteed
  jobs of strictly lower priority;
* victims are units (:class:`~fleet.core.charges.Charge`): a whole job, or
  one growth step of an elastic job; the fewest and lowest-priority victims
  are preferred.

``released`` names jobs the cycle has already decided to preempt (quota
reclaim): their resources count as free for this question.

After a restart the service rebuilds every placer from its record of the
running jobs (per pod: node and GPU indices, and the job's mode) with
``restore``, never by planning again: each job is held exactly where it runs.
A record that names no such placement, or a GPU another job already holds,
raises :class:`RestoreError` and restores nothing.  Restoring a set of jobs
gives the same placer whatever order they come in; in :func:`restore_order`
it costs the least (no placer has to revisit a job it restored before).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fleet.core.charges import Charge
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.resources import Resources


class BindError(ValueError):
    """A fit that can no longer be committed; nothing was bound."""


class RestoreError(ValueError):
    """A recorded placement that cannot be held again here; nothing was held."""


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """Where one pod runs: a node and the leaf-cell (GPU) indices on it."""

    pod: str
    node: str
    gpus: tuple[int, ...] = ()

    def __init__(self, pod: str, node: str, gpus: tuple[int, ...] = ()) -> None:
        object.__setattr__(self, "pod", pod)
        object.__setattr__(self, "node", node)
        object.__setattr__(self, "gpus", gpus)


@dataclass(frozen=True, slots=True)
class Fit:
    """A placer's answer that the pods fit.

    ``level`` is the topology level of the lowest cell that holds every pod
    (0 = one GPU, higher = further apart); ``fragmentation`` is what the
    placement leaves behind (lower is better); ``victims`` are the job keys
    that must be preempted first (empty when the pods fit in free capacity).
    """

    cluster: str
    pods: tuple[PodPlacement, ...]
    level: int = 0
    fragmentation: float = 0.0
    victims: tuple[str, ...] = ()

    def __init__(
        self,
        cluster: str,
        pods: tuple[PodPlacement, ...],
        level: int = 0,
        fragmentation: float = 0.0,
        victims: tuple[str, ...] = (),
    ) -> None:
        object.__setattr__(self, "cluster", cluster)
        object.__setattr__(self, "pods", pods)
        object.__setattr__(self, "level", level)
        object.__setattr__(self, "fragmentation", fragmentation)
        object.__setattr__(self, "victims", victims)


@dataclass(frozen=True, slots=True)
class NoFit:
    """Why the pods do not fit in this cluster, for a human."""

    cluster: str
    reason: str

    def __init__(self, cluster: str, reason: str) -> None:
        object.__setattr__(self, "cluster", cluster)
        object.__setattr__(self, "reason", reason)


def recorded_pods(
    cluster: str, job: Job, pods: Sequence[PodPlacement]
) -> list[tuple[PodPlacement, Pod]]:
    """Each recorded placement with its pod of ``job``, in record order.

    Raises :class:`RestoreError` when the record is empty, names a pod the job
    does not have, or names a pod twice.
    """
    if not pods:
        raise RestoreError(f"{cluster}: cannot restore {job.key}: the record places no pod")
    by_name = {p.name: p for p in job.pods}
    out: list[tuple[PodPlacement, Pod]] = []
    seen: set[str] = set()
    for pp in pods:
        pod = by_name.get(pp.pod)
        if pod is None:
            raise RestoreError(f"{cluster}: cannot restore {job.key}: it has no pod {pp.pod}")
        if pp.pod in seen:
            raise RestoreError(
                f"{cluster}: cannot restore {job.key}: pod {pp.pod} is recorded twice"
            )
        seen.add(pp.pod)
        out.append((pp, pod))
    return out


def restore_order(job: Job) -> tuple[int, int, str]:
    """Sort key for restoring: earlier submission, then higher priority, then key.

    Where restored jobs compete (a VC's cells), the earlier job keeps what it
    has: a VC's cells are bound as jobs start and stay bound while used, so
    the jobs that overflowed are mostly the later ones.
    """
    return (job.seq, -job.priority, job.key)


def may_preempt(job: Job, mode: Mode, victim: Charge) -> bool:
    """The victim rules above: may ``job``, placed in ``mode``, preempt ``victim``?"""
    if not victim.preemptible or job.opportunistic or mode is Mode.OPPORTUNISTIC:
        return False
    if victim.mode is Mode.OPPORTUNISTIC:
        return True
    if mode is not Mode.GUARANTEED:
        return False
    if victim.mode is Mode.BORROWED:
        return True
    return victim.queue == job.queue and victim.priority < job.priority


class Placer:
    """One member cluster's placement engine: the base of every placer.

    A base class, not a protocol: the compiled core then calls a placer's
    methods through its class's table of methods, not by looking each name up
    at every call (the cycle asks placers tens of thousands of questions a cycle).
    """

    @property
    def cluster(self) -> str:
        raise NotImplementedError

    def blind_to_queue(self, job: Job, mode: Mode) -> bool:
        """Whether the answer to ``job`` in ``mode`` without preemption or released jobs
        depends only on its pods, mode, GPU type and pinned cell, not on its queue:
        one "no" then serves every such job."""
        raise NotImplementedError

    def lowest_level(self, job: Job, pods: Sequence[Pod]) -> int:
        """A lower bound on the ``Fit.level`` these pods can get here (cheap, no search).

        The cycle stops asking further clusters once a fit reaches it.
        """
        raise NotImplementedError

    def fit(
        self,
        job: Job,
        pods: Sequence[Pod],
        mode: Mode,
        *,
        preempt: bool = False,
        released: frozenset[str] = frozenset(),
    ) -> Fit | NoFit:
        """Can ``pods`` of ``job`` run here now in ``mode``; where; whom to preempt."""
        raise NotImplementedError

    def bind(self, job: Job, charge: Charge, fit: Fit) -> None:
        """Commit ``fit`` for the unit ``charge`` of ``job`` (victims released first).

        The placer holds the pods under ``charge.key`` and keeps ``charge``
        itself as its record of the unit (mode, queue, priority).

        Atomic: raises :class:`BindError` and binds nothing when the fit no
        longer holds.
        """
        raise NotImplementedError

    def restore(self, job: Job, charge: Charge, pods: Sequence[PodPlacement]) -> None:
        """Hold ``pods`` of unit ``charge`` exactly where they were recorded.

        Used after a restart and to undo a refused commit.  Atomic: raises
        :class:`RestoreError` and holds nothing when a node, GPU index or pod
        does not exist, a GPU is recorded twice or already held by another
        unit, or the unit is already held here.  Restoring the same units in
        any order gives the same placer (fastest in :func:`restore_order`).
        """
        raise NotImplementedError

    def set_node_health(self, node: str, healthy: bool) -> list[str]:
        """Mark ``node`` bad (nothing new lands there) or healthy again.

        Returns the units with pods on a node that went bad; they keep running.
        """
        raise NotImplementedError

    def release(self, key: str) -> None:
        """Free every cell held by job ``key`` (no-op if it holds none)."""
        raise NotImplementedError

    def holds(self, key: str) -> bool:
        """Whether job ``key`` has pods placed here."""
        raise NotImplementedError

    def may_have_victims(self, job: Job, mode: Mode) -> bool:
        """Whether some unit held here might be a victim of ``job`` in ``mode`` (cheap).

        False only when no held unit is one the victim rules allow: then a
        question with preemption is the same as one without.
        """
        raise NotImplementedError

    def capacity(self) -> Resources:
        """Total healthy allocatable resources (cpu, memory, nvidia.com/gpu)."""
        raise NotImplementedError

    def allocated(self) -> Resources:
        """Resources held by placed pods."""
        raise NotImplementedError

    def node_capacities(self) -> dict[str, Resources]:
        """Node -> what it holds, healthy or not: ``nvidia.com/gpu``, cpu, memory and its
        GPUs by type (``gpu.fleet.io/<type>``); see :mod:`fleet.core.inventory`."""
        return {}

    def bad_nodes(self) -> frozenset[str]:
        """The nodes marked bad (:meth:`set_node_health`)."""
        return frozenset()

    def check_invariants(self) -> None:
        """Raise :class:`~fleet.core.checks.InvariantError` when internal indexes
        disagree with a recount.

        It must not use ``assert`` (``python -O`` strips it), and its message
        names what drifted (node, job or cell) with the kept and recounted value.
        """
        raise NotImplementedError
