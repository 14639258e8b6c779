"""Run-time limits: a job's own deadline and its queue's ``maxRuntime``.

Job: say when a running job has run too long, and keep the times at which
running jobs will, so that a clock tick costs only the jobs it ends.

Theory of operation:

* A job's *run time* counts from its admission (the job holds quota) and
  accumulates over its runs: a job preempted, failed over or refused by its
  member and queued again keeps what it ran, as Kueue's
  ``maximumExecutionTimeSeconds`` counts the time a workload spent admitted
  over its admit-evict cycles (KAI's minimum and expected runtimes count
  from the current run's start instead, as Fleet's minimum runtimes do, from
  a unit's ``since``).  The state keeps, per
  known job, the seconds of its earlier runs (``SchedulerState.ran``) and,
  per running job, when its current run was admitted (``run_start``, the
  ``since`` of its first unit); a run's seconds are added when the job stops
  holding quota (:meth:`fleet.core.state.SchedulerState.move`).  A job
  queued again because of ``maxRuntime: Requeue`` starts a fresh count.
* Two limits apply: the job's own deadline (:attr:`fleet.core.jobs.Job.active_deadline`,
  from its kind's ``activeDeadlineSeconds``; the job fails,
  :data:`DEADLINE_EXCEEDED`) and the ``maxRuntime`` in force at its leaf
  (inherited down the quota tree; the job fails, or with ``maxRuntimeAction:
  Requeue`` is preempted and queued again, :data:`MAX_RUNTIME_EXCEEDED`).
  Where both apply, the one the job reaches first ends it; at the same
  time, the job's own deadline.  :func:`first_limit` picks it.
* A running job's *due time* is when its run time reaches that limit:
  ``run_start + limit - ran``.  :class:`DueTimes` keeps the due times of the
  running jobs that have a limit in a heap; a job's entry is replaced when
  its due time changes (its run starts, the tree changes) and dropped when
  it stops running, stale heap entries being skipped when they come to the
  top (and the heap rebuilt when they are most of it).  So a clock tick
  (:class:`fleet.core.events.ClockAdvanced`) pops only the jobs due, and
  :meth:`DueTimes.next` tells the shell when to wake next.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Final

from fleet.core import wording
from fleet.core.quota_rules import MaxRuntimeAction

#: The event reason of a job ended by its own deadline.
DEADLINE_EXCEEDED: Final = "DeadlineExceeded"
#: The event reason of a job ended (failed or queued again) by its queue's ``maxRuntime``.
MAX_RUNTIME_EXCEEDED: Final = "MaxRuntimeExceeded"

#: Stale heap entries tolerated before a rebuild is considered.
_COMPACT_MIN: Final = 64


@dataclass(frozen=True, slots=True)
class Limit:
    """The limit that ends a job: its seconds of run time, the event reason, and
    what happens (fail, or queue again)."""

    seconds: float
    event: str
    action: MaxRuntimeAction

    @property
    def field(self) -> str:
        """The field that set the limit, as a human reads it."""
        return "activeDeadlineSeconds" if self.event == DEADLINE_EXCEEDED else "maxRuntime"


def first_limit(
    deadline: float | None, max_runtime: float, action: MaxRuntimeAction
) -> Limit | None:
    """The limit a job reaches first: its own ``deadline`` (seconds; None: none) or its
    queue's ``max_runtime`` (0: none); at the same figure, its own deadline."""
    if deadline is not None and (max_runtime <= 0 or deadline <= max_runtime):
        return Limit(deadline, DEADLINE_EXCEEDED, MaxRuntimeAction.FAIL)
    if max_runtime > 0:
        return Limit(max_runtime, MAX_RUNTIME_EXCEEDED, action)
    return None


def reason(limit: Limit, ran: float, queue: str) -> str:
    """Why a job that ran ``ran`` seconds ends at ``limit`` (the transition's reason)."""
    took, most = wording.duration(ran), wording.duration(limit.seconds)
    if limit.event == DEADLINE_EXCEEDED:
        return f"the job ran {took}, reaching its own deadline of {most} (activeDeadlineSeconds)"
    text = f"the job ran {took}, reaching the {most} queue {queue} allows a job (maxRuntime)"
    if limit.action is MaxRuntimeAction.REQUEUE:
        return text + "; queued again (maxRuntimeAction Requeue), its run time counted afresh"
    return text


class DueTimes:
    """When each running job with a limit is due; see the module docstring."""

    __slots__ = ("_due", "_heap")

    def __init__(self) -> None:
        #: job key -> its due time (the one live heap entry of the job)
        self._due: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []

    def __len__(self) -> int:
        return len(self._due)

    def set(self, key: str, due: float | None) -> None:
        """Job ``key`` is due at ``due`` (None: never)."""
        if due is None:
            self.drop(key)
            return
        if self._due.get(key) == due:
            return
        self._due[key] = due
        heapq.heappush(self._heap, (due, key))
        if len(self._heap) > 2 * len(self._due) + _COMPACT_MIN:
            self._heap = [(t, k) for k, t in self._due.items()]
            heapq.heapify(self._heap)

    def drop(self, key: str) -> None:
        """Job ``key`` stopped running (its heap entry goes stale)."""
        self._due.pop(key, None)

    def get(self, key: str) -> float | None:
        return self._due.get(key)

    def _skip_stale(self) -> None:
        heap = self._heap
        while heap and self._due.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)

    def next(self) -> float | None:
        """The earliest due time (None: no running job has a limit)."""
        self._skip_stale()
        return self._heap[0][0] if self._heap else None

    def due_by(self, now: float) -> list[str]:
        """The jobs due at ``now`` or before, in no order, left in place: a walk of
        the heap's entries up to ``now`` (what the shell reads before a tick ends them)."""
        heap = self._heap
        out: list[str] = []
        todo = [0] if heap else []
        while todo:
            i = todo.pop()
            due, key = heap[i]
            if due > now:
                continue  # nor anything below it
            if self._due.get(key) == due:
                out.append(key)
            todo.extend(c for c in (2 * i + 1, 2 * i + 2) if c < len(heap))
        return out

    def pop_due(self, now: float) -> list[str]:
        """The jobs due at ``now`` or before, earliest first (ties by key), taken out."""
        out: list[str] = []
        heap = self._heap
        while True:
            self._skip_stale()
            if not heap or heap[0][0] > now:
                return out
            _, key = heapq.heappop(heap)
            del self._due[key]
            out.append(key)

    def items(self) -> dict[str, float]:
        """Job key -> due time (a copy; for invariant checks)."""
        return dict(self._due)
