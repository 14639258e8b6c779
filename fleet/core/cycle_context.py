"""The working data of one scheduling cycle, shared by its passes.

Theory of operation: :func:`fleet.core.cycle.cycle` builds one
:class:`CycleRun` and hands it to the modules that make up the cycle:
:mod:`fleet.core.cluster_choice` (where a gang fits), :mod:`fleet.core.admission`
(quota verdict, victims, committing), :mod:`fleet.core.growth` (elastic
growth) and the passes in :mod:`fleet.core.cycle`.  It holds the decisions
made so far, the memories of :mod:`fleet.core.cycle_memory`, and what this
cycle admitted (so that a job admitted and then displaced in the same cycle
is reported as waiting, never as started and preempted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from fleet.core.cycle_memory import PlacementMemo, ReclaimMemo, ShapeMemo, Shortcuts, VictimMemo
from fleet.core.decisions import Decision, Wait
from fleet.core.jobs import Job
from fleet.core.owed import Owed
from fleet.core.quota import QuotaBlock
from fleet.core.state import QueueState, SchedulerState
from fleet.core.waiting import WaitBook

#: Positions ``[start, end)`` of a queue's pending list that a pass goes through.
Span = tuple[int, int]


class Pass(IntEnum):
    """The cycle's three passes, in order."""

    GUARANTEED = 0  # work within each queue's min
    BORROWING = 1  # work above min, within max
    OPPORTUNISTIC = 2  # negative-priority jobs on what is left


@dataclass(slots=True)
class Seen:
    """The jobs of a queue before position ``upto`` that the cycle looked at, counted."""

    upto: int = 0
    needs: dict[int, int] = field(default_factory=dict)
    rigid: int = 0

    def __init__(self, upto: int = 0, needs: dict[int, int] | None = None, rigid: int = 0) -> None:
        self.upto = upto
        self.needs = {} if needs is None else needs
        self.rigid = rigid


@dataclass(slots=True)
class CycleRun:
    """Everything one cycle shares between its passes; see the module docstring."""

    state: SchedulerState
    now: float
    shortcuts: Shortcuts
    phase: Pass = Pass.GUARANTEED
    decisions: list[Decision] = field(default_factory=list)
    shapes: ShapeMemo = field(default_factory=ShapeMemo)
    reclaims: ReclaimMemo = field(default_factory=ReclaimMemo)
    places: PlacementMemo = field(default_factory=PlacementMemo)
    victims: VictimMemo = field(default_factory=VictimMemo)
    #: changes to usage, running jobs or placements so far (commits, releases,
    #: growth): what :class:`~fleet.core.cycle_memory.VictimMemo` keeps holds
    #: only at the count it was found at
    changes: int = 0
    #: The quota block of the last attempt when nothing could make room (else None).
    last_block: QuotaBlock | None = None
    #: The category of the last reason an attempt gave (:meth:`why`,
    #: :data:`fleet.core.waiting.CATEGORIES`).
    last_kind: str = ""
    #: queue -> keys admitted this cycle (dropped from the pending lists at the end)
    admitted: dict[str, set[str]] = field(default_factory=dict)
    #: job key -> where the cycle took it from in its queue's pending list (the
    #: lists stay as they are until the cycle ends), for the jobs it admitted
    taken: dict[str, int] = field(default_factory=dict)
    #: jobs admitted earlier in this cycle and displaced later in it
    displaced: set[str] = field(default_factory=set)
    #: StrictFIFO queues stopped this cycle
    blocked: set[str] = field(default_factory=set)
    #: queue -> its fairness key, until its usage changes
    shares: dict[str, float] = field(default_factory=dict)
    #: the reasons this cycle leaves (it replaces ``state.waiting`` at the end)
    book: WaitBook = field(default_factory=WaitBook)
    #: (queue, resource) -> the jobs looked at so far, counted
    #: (:func:`fleet.core.bulk_wait.wait_all`)
    seen: dict[tuple[str, str], Seen] = field(default_factory=dict)
    #: the borrowing pass's owed demand (:mod:`fleet.core.owed`); None in the other passes
    owed: Owed | None = None
    #: :meth:`ranks`, once built
    ranked: tuple[list[str], dict[str, int], list[QueueState]] | None = None

    def __post_init__(self) -> None:
        self.shapes.on = self.shortcuts.shape_memo
        self.reclaims.on = self.shortcuts.reclaim_memo
        self.places.on = self.shortcuts.nofit_memo
        self.victims.on = self.shortcuts.reclaim_memo

    def wait(self, job: Job, reason: str, kind: str) -> None:
        """``job`` waits for ``reason`` (of category ``kind``); reported unless the last
        cycle said the same."""
        self.book.single[job.key] = reason
        self.book.kinds[reason] = kind
        self.report(job, reason)

    def why(self, reason: str, kind: str) -> str:
        """``reason``, an attempt's answer, whose category is ``kind`` (kept as
        ``last_kind`` for the job's wait)."""
        self.last_kind = kind
        return reason

    def report(self, job: Job, reason: str) -> None:
        """A ``Wait`` for ``job``, unless the last cycle left it the same reason (with
        parking on: without it, every waiting job is reported every cycle)."""
        if not self.shortcuts.parking or self.state.waiting.reason_of(job) != reason:
            self.decisions.append(Wait(job.key, job.queue, reason, self.now))

    def block_reason(self, block: QuotaBlock) -> str:
        """``block.reason``, worded once for its figures (:mod:`fleet.core.reason_texts`)."""
        return self.state.texts.block(block)

    def ranks(self) -> tuple[list[str], dict[str, int], list[QueueState]]:
        """The queues by rank (the state's order, which breaks ties in the fair
        order), each queue's rank, and the queues' states by rank; built once
        per cycle (a cycle adds and removes no queue)."""
        known = self.ranked
        if known is None:
            names = list(self.state.queues)
            known = self.ranked = (
                names,
                {name: i for i, name in enumerate(names)},
                list(self.state.queues.values()),
            )
        return known

    def admitted_keys(self) -> list[str]:
        """The jobs this cycle admitted (and did not displace)."""
        return [key for keys in self.admitted.values() for key in keys]

    def touch(self, queue: str) -> None:
        """The usage of ``queue`` changed: forget its fairness key, and which requests
        its own jobs could not make room for."""
        self.changes += 1
        self.shares.pop(queue, None)
        self.reclaims.changed(queue)
        if self.owed is not None:
            self.owed.touched(queue)

    def released(self, cluster: str, queue: str) -> None:
        """A unit of ``queue`` in ``cluster`` was released: forget what it invalidates."""
        self.places.released(cluster)
        self.touch(queue)
        self.shapes.forget()
        self.reclaims.forget()
