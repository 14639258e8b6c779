"""The scheduler's in-memory world: queues of pending jobs and running jobs.

Theory of operation: :class:`SchedulerState` owns the quota tree, one placer
per member cluster, the pending jobs of every leaf queue (kept sorted by
priority, then submission) and the running jobs with what they hold.  The
scheduling cycle (:mod:`fleet.core.cycle`) reads it and applies its own
decisions to it, so that the state after a cycle is what the decisions say.
The shell rebuilds it from the database at start and feeds it submissions,
completions and cancellations; nothing here performs I/O.

Quota is charged per *charge key*: a job admitted whole has one charge (its
key); an incremental job that grows later adds one charge per growth step
(``key#2``, ``key#3`` ...), each classified on its own.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from fleet.core.checks import InvariantError
from fleet.core.jobs import Job, Mode, sort_key
from fleet.core.placement import Placer, PodPlacement
from fleet.core.quota import QuotaTree
from fleet.core.resources import Resources


class UnknownJob(KeyError):
    """A job key the scheduler does not hold."""


class DuplicateJob(ValueError):
    """A job key that is already pending or running."""


@dataclass(frozen=True, slots=True)
class Charge:
    """One quota charge of a running job."""

    key: str
    request: Resources
    mode: Mode


@dataclass(slots=True)
class Running:
    """A running (admitted) job: where it runs, what it holds, how it is charged."""

    job: Job
    cluster: str
    mode: Mode
    pods: list[PodPlacement]
    charges: list[Charge] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.pods) >= self.job.size


@dataclass(slots=True)
class QueueState:
    """One leaf queue: its policy and its pending jobs in order."""

    name: str
    strict_fifo: bool = False
    pending: list[Job] = field(default_factory=list)

    def add(self, job: Job) -> None:
        bisect.insort(self.pending, job, key=sort_key)


class SchedulerState:
    """Quota tree + placers + queues + running jobs; see the module docstring."""

    def __init__(
        self,
        tree: QuotaTree,
        placers: Mapping[str, Placer],
        *,
        strict_fifo: Iterable[str] = (),
    ) -> None:
        self.tree = tree
        self.placers: dict[str, Placer] = dict(placers)
        strict = set(strict_fifo)
        self.queues: dict[str, QueueState] = {
            leaf: QueueState(leaf, leaf in strict) for leaf in tree.leaves()
        }
        self.running: dict[str, Running] = {}
        self._pending_keys: dict[str, str] = {}  # job key -> queue

    # Submissions -------------------------------------------------------------
    def submit(self, job: Job) -> None:
        """Queue ``job``; its queue must be a leaf of the tree."""
        if job.key in self._pending_keys or job.key in self.running:
            raise DuplicateJob(f"job {job.key} is already known")
        queue = self.queues.get(job.queue)
        if queue is None:
            raise ValueError(f"job {job.key}: queue {job.queue!r} is not a leaf of the quota tree")
        queue.add(job)
        self._pending_keys[job.key] = job.queue

    def is_pending(self, key: str) -> bool:
        return key in self._pending_keys

    def pending(self) -> list[Job]:
        return [job for q in self.queues.values() for job in q.pending]

    def pending_count(self) -> int:
        return len(self._pending_keys)

    # Completions ---------------------------------------------------------------
    def finish(self, key: str) -> Job:
        """A running job ended (succeeded, failed or cancelled): free what it holds."""
        run = self.running.pop(key, None)
        if run is None:
            raise UnknownJob(key)
        self._release(run)
        return run.job

    def cancel(self, key: str) -> Job:
        """Remove a pending or running job."""
        if key in self.running:
            return self.finish(key)
        queue = self._pending_keys.pop(key, None)
        if queue is None:
            raise UnknownJob(key)
        pending = self.queues[queue].pending
        for i, job in enumerate(pending):
            if job.key == key:
                del pending[i]
                return job
        raise InvariantError(f"pending index lost job {key}")  # pragma: no cover

    def requeue(self, key: str) -> Job:
        """Preempt a running job: free what it holds and queue it again."""
        job = self.finish(key)
        self.queues[job.queue].add(job)
        self._pending_keys[job.key] = job.queue
        return job

    def _release(self, run: Running) -> None:
        self.placers[run.cluster].release(run.job.key)
        for charge in run.charges:
            self.tree.release(charge.key)

    # Used by the cycle -----------------------------------------------------------
    def start(self, job: Job, cluster: str, mode: Mode, pods: Iterable[PodPlacement]) -> Running:
        """Record ``job`` as running (its quota and cells are already taken).

        The caller removes it from its pending queue with :meth:`drop_pending`,
        once per queue and cycle, so that many admissions stay cheap.
        """
        run = Running(job, cluster, mode, list(pods))
        self.running[job.key] = run
        return run

    def drop_pending(self, queue: str, keys: set[str]) -> None:
        """Remove admitted jobs from a queue's pending list in one pass."""
        state = self.queues[queue]
        state.pending = [j for j in state.pending if j.key not in keys]
        for key in keys:
            self._pending_keys.pop(key, None)

    def check_invariants(self) -> None:
        """Quota and placers agree with the running jobs; pending index is exact.

        Raises :class:`~fleet.core.checks.InvariantError` naming the job, queue
        or cluster that drifted (and the quota tree's or a placer's own error).
        """
        self.tree.check_invariants()
        for placer in self.placers.values():
            placer.check_invariants()
        for key, run in self.running.items():
            home = self.placers.get(run.cluster)
            if home is None or not home.holds(key):
                raise InvariantError(f"running job {key} is not held by its cluster {run.cluster}")
            if not run.pods:
                raise InvariantError(f"running job {key} has no pods")
            if len(run.pods) < run.job.gang_size:
                raise InvariantError(
                    f"partial gang {key} is running: {len(run.pods)} pods placed, "
                    f"gang of {run.job.gang_size}"
                )
            for charge in run.charges:
                if not self.tree.holds(charge.key):
                    raise InvariantError(f"quota charge {charge.key} of {key} is not admitted")
            for other, placer in self.placers.items():
                if other != run.cluster and placer.holds(key):
                    raise InvariantError(f"{key} is held by {run.cluster} and by {other}")
        keys = {j.key: q.name for q in self.queues.values() for j in q.pending}
        listed = sum(len(q.pending) for q in self.queues.values())
        if listed != len(keys):
            queued = Counter(j.key for q in self.queues.values() for j in q.pending)
            twice = sorted(k for k, n in queued.items() if n > 1)
            raise InvariantError(f"jobs pending twice in the queues: {twice}")
        if keys != self._pending_keys:
            missing = sorted(keys.keys() - self._pending_keys.keys())
            stale = sorted(self._pending_keys.keys() - keys.keys())
            moved = sorted(
                f"{k} (indexed to {self._pending_keys[k]}, queued in {keys[k]})"
                for k in keys.keys() & self._pending_keys.keys()
                if keys[k] != self._pending_keys[k]
            )
            drift = {"not indexed": missing, "indexed, not queued": stale, "misfiled": moved}
            raise InvariantError(
                "pending index differs from the queues: "
                + "; ".join(f"{what} {jobs}" for what, jobs in drift.items() if jobs)
            )
        both = keys.keys() & self.running.keys()
        if both:
            raise InvariantError(f"jobs both pending and running: {sorted(both)}")
        for q in self.queues.values():
            order = [sort_key(j) for j in q.pending]
            if order != sorted(order):
                i = next(i for i in range(1, len(order)) if order[i] < order[i - 1])
                raise InvariantError(
                    f"queue {q.name} is out of order: "
                    f"{q.pending[i - 1].key} before {q.pending[i].key}"
                )
