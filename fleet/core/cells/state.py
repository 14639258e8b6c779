"""What one cluster's cell placer knows: its cells, reservations, jobs and totals.

Theory of operation: a :class:`PlacerState` is the single mutable object that
the placer's modules share.  It holds the :class:`~fleet.core.cells.topology.Topology`
(cells with their owner and usage slots), the
:class:`~fleet.core.cells.allocator.Allocator` (reservations, buddy free
lists), the :class:`~fleet.core.cells.allocator.Journal` they both write
through, the jobs placed here (:class:`Held`, one per job), pinned-cell
requests, bad nodes and the incremental totals behind ``capacity()``,
``allocated()`` and ``fragmentation()``.  Every module of the placer is a set
of functions over this state (``ownership.release(state, key)``); journal
transactions are opened and closed by the
:class:`~fleet.core.cells.placer.CellPlacer` facade (and by
``health.set_node_health``, which commits its own).  Inside one,
:meth:`PlacerState.mark` / :meth:`PlacerState.undo` nest undo scopes so a
search can try a take and take it back.

A job is held in one of four *kinds*: inside its VC's bound cells (``vc``), in
a pinned cell (``pin``), in shared-pool reservations of its own (``shared``),
or on any unowned leaf (``opportunistic``).  :class:`CellFit` carries the kind
and the VC cells to bind from ``fit`` to ``bind``.  Jobs held by ``restore``
keep their record (:class:`Restored`) until they are released or grow, so
that restoring another job can redo the ones its outcome depends on
(:mod:`.restoring`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from fleet.core.cells.allocator import Allocator, Journal
from fleet.core.cells.spec import CellConfig
from fleet.core.cells.topology import Cell, Reservation, Topology
from fleet.core.charges import Charge
from fleet.core.jobs import Job, Mode
from fleet.core.placement import Fit, PodPlacement, restore_order
from fleet.core.resources import Resources


class HoldKind(StrEnum):
    """How a job's pods are held in the cells (see the module docstring)."""

    VC = "vc"  # inside its VC's bound cells
    PIN = "pin"  # inside its pinned cell
    SHARED = "shared"  # in shared-pool reservations of its own
    OPPORTUNISTIC = "opportunistic"  # on any unowned leaf


KIND_VC: Final = HoldKind.VC
KIND_PIN: Final = HoldKind.PIN
KIND_SHARED: Final = HoldKind.SHARED
KIND_OPP: Final = HoldKind.OPPORTUNISTIC
#: Kinds whose leaves count as the VC's guaranteed use (``Reservation.gused``).
GUARANTEED_KINDS: Final = (KIND_VC, KIND_PIN)


@dataclass(frozen=True, slots=True)
class CellFit(Fit):
    """A :class:`Fit` that also carries the allocator plan ``bind`` will commit.

    ``kind`` is how the job is held (``vc``, ``pin``, ``shared``,
    ``opportunistic``) and ``bindings`` the cell ids bound to the job's VC.
    """

    kind: HoldKind = KIND_OPP
    bindings: tuple[int, ...] = ()

    def __init__(
        self,
        cluster: str,
        pods: tuple[PodPlacement, ...],
        level: int = 0,
        fragmentation: float = 0.0,
        victims: tuple[str, ...] = (),
        kind: HoldKind = KIND_OPP,
        bindings: tuple[int, ...] = (),
    ) -> None:
        object.__setattr__(self, "cluster", cluster)
        object.__setattr__(self, "pods", pods)
        object.__setattr__(self, "level", level)
        object.__setattr__(self, "fragmentation", fragmentation)
        object.__setattr__(self, "victims", victims)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "bindings", bindings)


#: An in-node choice by leaf positions: (positions per pod in demand order, level).
InNode = tuple[tuple[tuple[int, ...], ...], int]


class Held:
    """One placed job: its pods, their leaves and requests, its shared reservations."""

    __slots__ = ("info", "kind", "leaves", "pods", "requests", "shared", "vc")

    def __init__(self, info: Charge, kind: HoldKind, vc: str | None) -> None:
        self.info = info
        self.kind = kind
        self.vc = vc
        self.pods: dict[str, PodPlacement] = {}
        self.leaves: dict[str, list[Cell]] = {}
        self.requests: dict[str, Resources] = {}
        self.shared: list[Reservation] = []


class Restored:
    """The record a job was restored from, and how it was held.

    ``rank`` orders records (:func:`~fleet.core.placement.restore_order`:
    earlier submission, then higher priority, then key); ``chains`` are the
    chains of its leaves; ``contested``: its kind depends on the other records
    (a guaranteed job held in a VC or the shared pool); ``preferred``: it got
    its first choice of kind.
    """

    __slots__ = ("chains", "charge", "contested", "job", "mode", "pods", "preferred", "rank")

    def __init__(
        self,
        job: Job,
        charge: Charge,
        pods: tuple[PodPlacement, ...],
        chains: tuple[str, ...],
        contested: bool,
    ) -> None:
        self.job = job
        self.charge = charge
        self.mode: Mode = charge.mode
        self.pods = pods
        self.rank = restore_order(job)
        self.chains = chains
        self.contested = contested
        self.preferred = True


class PlacerState:
    """The mutable state of one member cluster's cell placer."""

    __slots__ = (
        "alloc",
        "allocated",
        "at_level",
        "bad",
        "capacity",
        "cluster",
        "config",
        "demoted",
        "fallbacks",
        "free_hist",
        "free_leaves",
        "held",
        "in_node_memo",
        "j",
        "marks",
        "node_caps",
        "pins",
        "rank_bound",
        "restored",
        "restored_in",
        "subcells",
        "suggested",
        "topo",
        "units",
        "vc_spills",
        "victims_by_mode",
        "victims_by_queue",
        "whole_free_leaves",
    )

    def index_unit(self, charge: Charge, sign: int) -> None:
        """Add (``sign`` 1) or drop (-1) a held unit in the job and victim indexes (journaled)."""
        self.index_victim(charge, sign)
        if not charge.is_growth:
            return
        units = self.units.get(charge.job)
        if sign > 0:
            if units is None:
                units = {}
                self.j.setitem(self.units, charge.job, units)
            self.j.setitem(units, charge.key, None)
        elif units is not None:
            self.j.delitem(units, charge.key)
            if not units:
                self.j.delitem(self.units, charge.job)

    def index_victim(self, charge: Charge, sign: int) -> None:
        """Add (``sign`` 1) or drop (-1) a held unit in the victim indexes (journaled)."""
        if not charge.preemptible:
            return
        if charge.mode is Mode.GUARANTEED:
            index = self.victims_by_queue.get(charge.queue)
            if index is None:
                index = self.victims_by_queue[charge.queue] = {}
        else:
            index = self.victims_by_mode[charge.mode]
        if sign > 0:
            self.j.setitem(index, charge.key, None)
        else:
            self.j.delitem(index, charge.key)

    def __init__(self, cluster: str, config: CellConfig) -> None:
        self.cluster = cluster
        self.config = config
        #: A VC's guaranteed job that its VC cannot hold may use the shared pool
        #: (Fleet's rule); False keeps it inside its VC (HiveD's rule).
        self.vc_spills = True
        self.topo = Topology(config)
        self.j = Journal()
        self.alloc = Allocator(self.topo, config, self.j)
        self.held: dict[str, Held] = {}
        #: job -> the keys of its growth units held here (kept with ``held``)
        self.units: dict[str, dict[str, None]] = {}
        #: the held units that may be preemption victims at all, by what may
        #: preempt them (:func:`fleet.core.cells.victims.allowed`): opportunistic
        #: and borrowed units by mode, guaranteed units by queue (kept with ``held``)
        self.victims_by_mode: dict[Mode, dict[str, None]] = {
            Mode.OPPORTUNISTIC: {},
            Mode.BORROWED: {},
        }
        self.victims_by_queue: dict[str, dict[str, None]] = {}
        self.pins: dict[str, str] = {}  # job key -> pinned cell id
        self.node_caps = config.cell_nodes()
        self.bad: set[str] = set()
        # Incremental totals behind capacity() and allocated() (O(1) for the cycle).
        self.capacity = Resources()
        for cap in self.node_caps.values():
            self.capacity = self.capacity + cap
        self.allocated = Resources()
        #: Nodes every placement is restricted to (None: no restriction).
        self.suggested: frozenset[str] | None = None
        # Fragmentation counters: healthy unowned leaves, and those in wholly free nodes.
        self.free_leaves = 0
        self.whole_free_leaves = 0
        #: chain -> healthy nodes by their number of unowned leaves (index = that number)
        self.free_hist: dict[str, list[int]] = {}
        for nodes in self.topo.nodes.values():
            for node in nodes:
                self.free_leaves += node.size
                self.whole_free_leaves += node.size
                hist = self.free_hist.setdefault(node.chain, [])
                if len(hist) <= node.size:
                    hist.extend([0] * (node.size + 1 - len(hist)))
                hist[node.size] += 1
        for chain in self.topo.chain_types:
            self.free_hist.setdefault(chain, [0])
        #: (node cell type, usable leaves mask, leaves per pod) -> the in-node buddy
        #: choice without victims: (leaf positions per pod, level) (see ``packing``)
        self.in_node_memo: dict[tuple[str, int, tuple[int, ...]], InNode] = {}
        # Caches of the packing: a node's cells by (level, id); cells at a level under a cell.
        self.subcells: dict[int, list[Cell]] = {}
        self.at_level: dict[tuple[int, int], list[Cell]] = {}
        self.marks: list[int] = []  # nested undo scopes (journal marks)
        #: Restored jobs' records; chain -> contested records with leaves there, and
        #: those of them not held as their first choice; restored guaranteed jobs held
        #: as opportunistic ones -> why (all journaled).
        self.restored: dict[str, Restored] = {}
        self.restored_in: dict[str, dict[str, None]] = {c: {} for c in self.topo.chain_types}
        self.fallbacks: dict[str, dict[str, None]] = {c: {} for c in self.topo.chain_types}
        self.demoted: dict[str, str] = {}
        #: chain -> at least the highest rank of its contested records (never lowered).
        self.rank_bound: dict[str, tuple[int, int, str]] = {}

    def mark(self) -> None:
        """Start a nested undo scope (a suffix of the journal)."""
        self.marks.append(self.j.mark())

    def undo(self) -> None:
        """Revert every change since the matching :meth:`mark`."""
        self.j.undo_to(self.marks.pop())

    def keep(self) -> None:
        """Close the matching :meth:`mark`'s scope, keeping its changes."""
        self.marks.pop()

    def forget_restored(self, key: str) -> None:
        """Drop job ``key``'s restore record (journaled; no-op without one)."""
        j = self.j
        rec = self.restored.get(key)
        if rec is None:
            return
        j.delitem(self.restored, key)
        for chain in rec.chains:
            if key in self.restored_in[chain]:
                j.delitem(self.restored_in[chain], key)
            if key in self.fallbacks[chain]:
                j.delitem(self.fallbacks[chain], key)

    def fragmentation(self) -> float:
        """Share of free healthy GPUs that cannot host a whole node-level cell."""
        if self.free_leaves <= 0:
            return 0.0
        return (self.free_leaves - self.whole_free_leaves) / self.free_leaves

    def pinned_cell_id(self, job: Job) -> str | None:
        """The pinned cell ``job`` must run in (``pin_job`` first, then the job's own)."""
        return self.pins.get(job.key) or job.pinned_cell_id
