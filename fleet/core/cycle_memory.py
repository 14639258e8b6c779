"""What one scheduling cycle remembers between jobs, and when it forgets.

Theory of operation: within a cycle, admissions only *take* capacity and
quota, so an answer "this does not fit" stays right until something is
*released* (a preemption) or a new preemption *candidate* appears.  Each
memory below names what its answer depends on in its key and forgets exactly
when one of those things changes, so that using it changes no decision
(``tests/core/test_decisions_as_full_trial.py`` checks this against a cycle run with
every memory switched off through :class:`Shortcuts`).

* :class:`ShapeMemo` (Armada's "unfeasible key"): a job that could not start,
  keyed by its shape, the pass, and its quota verdict at each size tried (a
  block with its usage and limit, which its text gives).  A
  borrowed admission creates new victims for guaranteed jobs (reclaim and
  placement), so answers that could preempt borrowed work are forgotten then;
  any release forgets everything.  It is not used in the borrowing pass
  (ADR 0038): there an answer also depends on the room owed to guaranteed
  work (:mod:`fleet.core.owed`), which moves as the pass goes on and is not
  in the key, and every admission under a full ``max`` changes the figures
  that are, so it found next to nothing (on ``bench/bench_cycle.py``'s tree,
  28 answers in 8,000 lookups).
* :class:`ReclaimMemo`: a reclaim search that failed for a queue blocked at
  one node and resource is not repeated for a larger shortfall there, until a
  release or a borrowed admission changes the candidates.  Likewise a search
  among the queue's own lower-priority jobs that failed for a request is not
  repeated for a request at least as large at the same priority, until the
  queue's jobs change (an admission to it) or anything is released: usage
  only grows in between, so the shortfall at every node does too, and each
  resource still short was short after taking every candidate that holds it.
* :class:`VictimMemo`: a search among a queue's own lower-priority jobs that
  found victims, and a placement that failed with victims released, until
  the next change of usage, running jobs or placements (``CycleRun.changes``).
* :class:`PlacementMemo`: per cluster, its free resources and load, and the
  placement questions it answered "no" to without preemption (and, for
  borrowed jobs, with preemption: their only victims are opportunistic jobs),
  until a bind or release there (and a cluster with no unit the job may
  preempt is not asked with preemption at all: the answer is the one it
  gave without); and, for the last pass, the opportunistic
  questions that no cluster could answer when the pass began
  (:func:`fleet.core.cycle.idle_pass`): that pass only takes room (an
  opportunistic job preempts nobody), so those answers hold to its end.
* The borrowing pass's owed demand (:class:`fleet.core.owed.Owed`) keeps
  each queue's count between questions and drops the jobs the pass went
  past that started as counted; ``Shortcuts.owed_counts`` off counts every
  queue afresh at every question.  An answer "the room is owed" moves as the
  pass goes on (other queues' cursors, admissions) and is not remembered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from fleet.core.placement import Placer
from fleet.core.quota import QuotaBlock
from fleet.core.resources import Resources

#: A member cluster in the order :func:`fleet.core.cluster_choice.candidates` keeps:
#: its load, its name and its placer (the triples sort as they are).
Ranked = tuple[float, str, Placer]


@dataclass(frozen=True, slots=True)
class Shortcuts:
    """Which of the cycle's shortcuts are on (all by default).

    Switching one off makes the cycle slower and must not change any
    decision; the equivalence property tests rely on that.
    """

    shape_memo: bool = True
    reclaim_memo: bool = True
    nofit_memo: bool = True
    bulk_wait: bool = True
    #: a stopped tail is parked as one group (:mod:`fleet.core.waiting`) and a
    #: ``Wait`` is reported only for a changed reason; off: a full scan that
    #: checks and reports every waiting job every cycle
    parking: bool = True
    #: the last pass asks each distinct opportunistic question once when it
    #: begins; a question no cluster answers is the answer of all its jobs
    #: (with parking on, they are not looked at one by one)
    idle_groups: bool = True
    #: the reclaim search starts only from the leaves that could give something
    #: (:func:`fleet.core.quota_victims.reclaim_victims`), read from the tree's
    #: kept lending order; off: a heap over every leaf under the blocking node
    reclaim_bound: bool = True
    #: the borrowing pass keeps each queue's owed demand (:mod:`fleet.core.owed`)
    #: and drops the jobs it passes that started as counted; off: every question
    #: counts every queue of the pass afresh
    owed_counts: bool = True


NO_SHORTCUTS = Shortcuts(False, False, False, False, False, False, False, False)
ALL_SHORTCUTS = Shortcuts()


@dataclass(frozen=True, slots=True)
class Remembered:
    """Why a shape could not start (the reason and its category), and the quota block
    that stopped it (if any)."""

    reason: str
    block: QuotaBlock | None
    kind: str

    def __init__(self, reason: str, block: QuotaBlock | None, kind: str) -> None:
        object.__setattr__(self, "reason", reason)
        object.__setattr__(self, "block", block)
        object.__setattr__(self, "kind", kind)


@dataclass(slots=True)
class ShapeMemo:
    """Shapes that could not start this cycle; see the module docstring."""

    on: bool = True
    entries: dict[tuple[object, ...], Remembered] = field(default_factory=dict)
    #: keys whose answer may change when a borrowed job is admitted
    could_preempt_borrowed: set[tuple[object, ...]] = field(default_factory=set)

    def get(self, key: tuple[object, ...]) -> Remembered | None:
        return self.entries.get(key) if self.on else None

    def put(self, key: tuple[object, ...], answer: Remembered, preempts_borrowed: bool) -> None:
        if not self.on:
            return
        self.entries[key] = answer
        if preempts_borrowed:
            self.could_preempt_borrowed.add(key)

    def forget(self) -> None:
        self.entries.clear()
        self.could_preempt_borrowed.clear()

    def forget_borrowed_dependents(self) -> None:
        for key in self.could_preempt_borrowed:
            self.entries.pop(key, None)
        self.could_preempt_borrowed.clear()


@dataclass(slots=True)
class ReclaimMemo:
    """Failed reclaim searches: (queue, node, resource) -> smallest shortfall that failed."""

    on: bool = True
    failed: dict[tuple[str, str, str], int] = field(default_factory=dict)
    #: queue -> priority -> requests its own lower-priority jobs could not make room for
    inside: dict[str, dict[int, list[Resources]]] = field(default_factory=dict)

    def known_to_fail(self, key: tuple[str, str, str], shortfall: int) -> bool:
        known = self.failed.get(key)
        return self.on and known is not None and shortfall >= known

    def record(self, key: tuple[str, str, str], shortfall: int) -> None:
        known = self.failed.get(key)
        self.failed[key] = shortfall if known is None else min(known, shortfall)

    def inside_fails(self, queue: str, priority: int, request: Resources) -> bool:
        """Whether the queue's own jobs already failed a request no larger than ``request``."""
        if not self.on:
            return False
        failed = self.inside.get(queue)
        tried = failed.get(priority) if failed is not None else None
        return tried is not None and any(smaller.le(request) for smaller in tried)

    def record_inside(self, queue: str, priority: int, request: Resources) -> None:
        if self.on:
            self.inside.setdefault(queue, {}).setdefault(priority, []).append(request)

    def changed(self, queue: str) -> None:
        """The jobs charged to ``queue`` changed: its own candidates did."""
        self.inside.pop(queue, None)

    def forget(self) -> None:
        self.failed.clear()
        self.inside.clear()


@dataclass(slots=True)
class VictimMemo:
    """Answers of the victim search that hold until the next change (``CycleRun.changes``).

    Between two changes to the quota usage, the running jobs and the
    placements (an admission, a release, a commit that was refused), a search
    among a queue's own lower-priority jobs is a pure query of them, and so is
    a placement question asked with those victims released: jobs of one queue,
    one priority and one request that come one after the other, each failing
    in the same way, ask the same questions with the same answers.  The
    searches found (``found``) and the placements that failed after their
    victims were released (``unplaced``) are kept with the change count they
    were asked at and read back only at that count.  Checks that depend on
    where the borrowing pass is (:mod:`fleet.core.owed`) are asked every time.
    """

    on: bool = True
    #: (queue, priority, request) -> (change count, victims found)
    found: dict[tuple[str, int, Resources], tuple[int, tuple[str, ...]]] = field(
        default_factory=dict
    )
    #: (job shape, pod count, mode, victims) -> (change count, why no cluster took it)
    unplaced: dict[tuple[object, ...], tuple[int, str]] = field(default_factory=dict)

    def victims(self, key: tuple[str, int, Resources], changes: int) -> tuple[str, ...] | None:
        known = self.found.get(key) if self.on else None
        return known[1] if known is not None and known[0] == changes else None

    def place_failed(self, key: tuple[object, ...], changes: int) -> str | None:
        known = self.unplaced.get(key) if self.on else None
        return known[1] if known is not None and known[0] == changes else None

    def record_victims(
        self, key: tuple[str, int, Resources], changes: int, victims: list[str]
    ) -> None:
        if self.on:
            self.found[key] = (changes, tuple(victims))

    def record_failure(self, key: tuple[object, ...], changes: int, why: str) -> None:
        if self.on:
            self.unplaced[key] = (changes, why)


@dataclass(slots=True)
class PlacementMemo:
    """Per cluster: free resources and load, and the questions it said no to."""

    on: bool = True
    room: dict[str, tuple[dict[str, int], float]] = field(default_factory=dict)
    nofit: dict[str, dict[tuple[object, ...], str]] = field(default_factory=dict)
    #: (question, allowed clusters) -> why no cluster takes it (borrowed and
    #: opportunistic questions, no preemption planned), until any release
    everywhere: dict[tuple[object, ...], str] = field(default_factory=dict)
    #: per cluster: guaranteed preemption questions it said no to, until a bind or release
    strict_nofit: dict[str, set[tuple[object, ...]]] = field(default_factory=dict)
    #: every (not draining) cluster with its load, least loaded first; a cluster
    #: whose load changed is put back in its place when next asked (``moved``)
    order: list[Ranked] | None = None
    #: clusters whose load changed since ``order`` was last brought up to date
    moved: set[str] = field(default_factory=set)
    #: the load each cluster of ``order`` sits there with
    placed: dict[str, float] = field(default_factory=dict)
    #: (opportunistic question, allowed clusters) -> why no cluster takes it,
    #: asked when the last pass began; holds for that pass (only takes follow)
    idle: dict[tuple[object, ...], str] = field(default_factory=dict)

    def answers(self, cluster: str) -> dict[tuple[object, ...], str]:
        """The cluster's remembered "no" answers (a scratch dict when the memo is off)."""
        if not self.on:
            return {}
        return self.nofit.setdefault(cluster, {})

    def until_bound(self, cluster: str) -> set[tuple[object, ...]] | None:
        """The cluster's "no" answers that hold until its next bind or release."""
        if not self.on:
            return None
        return self.strict_nofit.setdefault(cluster, set())

    def bound(self, cluster: str) -> None:
        """Something was bound in ``cluster``: its free room changed."""
        self.room.pop(cluster, None)
        self.strict_nofit.pop(cluster, None)
        self.moved.add(cluster)

    def released(self, cluster: str) -> None:
        """Something was released in ``cluster``: every answer there may change."""
        self.victim(cluster)
        self.idle.clear()

    def victim(self, cluster: str) -> None:
        """A new preemption victim (an opportunistic job) in ``cluster``: answers
        that could preempt it may change (the last pass's idle answers may not)."""
        self.room.pop(cluster, None)
        self.nofit.pop(cluster, None)
        self.strict_nofit.pop(cluster, None)
        self.everywhere.clear()
        self.moved.add(cluster)
