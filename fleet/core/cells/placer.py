"""``CellPlacer``: HiveD-style topology-aware placement for one member cluster.

Theory of operation (see ``docs/decisions/0002-cell-allocator.md``):

*Two layers.*  The :mod:`~fleet.core.cells.allocator` decides which physical
cells are *reserved* for whom (a VC's bound virtual cells, pinned cells,
shared-pool jobs, bad nodes) with buddy allocation and VC safety.  On top,
every leaf cell (GPU) has at most one *owner* job (:mod:`.ownership`).
Guaranteed jobs use leaves of reservations of their own VC (or their own
shared-pool reservation); opportunistic and borrowed jobs use any unowned leaf
of a healthy node, even inside another VC's reservation, and are therefore the
first victims there (:mod:`.victims`).

*Where a gang goes.*  :mod:`.fitting` settles how the job is held and tries
leaf types and chains, without victims first; :mod:`.vc_search` looks inside
the job's VC (bound cells, then one fresh binding per owed level, then
spreading), :mod:`.shared_search` in the shared pool (unreserved leaves that
keep every VC safe), and both pack pods under the lowest common cell that
holds them (:mod:`.packing`: buddy choice inside a node, first-fit decreasing
across nodes).

*Queries roll back.*  ``fit`` performs the real takes and leaf assignments in
a journal transaction and rolls it back, so what it answers is exactly what
``bind`` will commit; the plan (which cells get bound for the VC) travels in
:class:`CellFit` and ``bind`` (:mod:`.binding`) re-validates it against the
current state.  ``bind``, ``release``, ``restore`` (:mod:`.restoring`: a job
held again where it was recorded, after a restart) and ``set_node_health``
(:mod:`.health`) each commit one transaction or none.  This class is the facade: it owns the
:class:`~fleet.core.cells.state.PlacerState`, opens and closes transactions and
answers the cheap questions of :class:`fleet.core.placement.Placer` from
incremental totals; :mod:`.invariants` recounts them for tests.

*CPU-only node pools.*  When the config has CPU-only nodes (cells whose leaf
skuType has no GPU, :attr:`~fleet.core.cells.spec.CellConfig.cpu_cells`), the
pods that ask for no GPU go there, placed by cpu and memory by a
:class:`~fleet.core.capacity.CapacityPlacer` over those nodes alone (``cpu``:
first fit, the gang's nodes first, preemption by its rules), and the pods that
ask for GPUs go through the cells exactly as before.  A gang with both (a GPU
master and CPU-only workers) is answered cells first, then the CPU-only pods
with the cells' victims counted as gone; its answer is one :class:`CellFit`,
and ``bind``, ``restore``, ``release`` and node health split it by node.
Without CPU-only nodes nothing changes: a pod asking for no GPU is placed by
the cells as any other (:mod:`.fitting`).
"""

from __future__ import annotations

from collections.abc import Sequence

from fleet.core import checks, inventory, resources
from fleet.core.capacity import CapacityPlacer
from fleet.core.cells import (
    binding,
    demands,
    fitting,
    health,
    invariants,
    ownership,
    restoring,
    victims,
)
from fleet.core.cells.allocator import Allocator, Journal
from fleet.core.cells.spec import CellConfig
from fleet.core.cells.state import KIND_SHARED, CellFit, Held, PlacerState
from fleet.core.cells.topology import Topology
from fleet.core.charges import Charge
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import BindError, Fit, NoFit, Placer, PodPlacement
from fleet.core.resources import Resources

__all__ = ["CellPlacer"]


class CellPlacer(Placer):
    """One member cluster's cell allocator behind :class:`fleet.core.placement.Placer`.

    ``node_restriction=True`` enables :meth:`suggest_nodes`, which replays HiveD's
    suggested-node lists; off (the default), no placement is ever restricted to
    some nodes and the searches skip the node filter.  ``vc_spills=False``
    keeps a VC's guaranteed jobs inside their VC (HiveD's rule; the default
    lets them use the shared pool too): ``bench/bench_cells.py`` uses it to
    count waits as HiveD does.
    """

    def __init__(
        self,
        cluster: str,
        config: CellConfig,
        *,
        node_restriction: bool = False,
        vc_spills: bool = True,
    ) -> None:
        self.state = PlacerState(cluster, config)
        self.state.vc_spills = vc_spills
        self.node_restriction = node_restriction
        self.config: CellConfig = config
        self.topo: Topology = self.state.topo
        self.j: Journal = self.state.j
        self.alloc: Allocator = self.state.alloc
        cpu_nodes = config.cpu_nodes()
        #: the CPU-only nodes' placer (None: the config has none)
        self.cpu: CapacityPlacer | None = CapacityPlacer(cluster, cpu_nodes) if cpu_nodes else None
        self._cpu_nodes: frozenset[str] = frozenset(cpu_nodes)
        checks.built(self)

    # -- Placer methods -------------------------------------------------------------------

    @property
    def cluster(self) -> str:
        return self.state.cluster

    def suggest_nodes(self, nodes: frozenset[str] | None) -> None:
        """Restrict every following placement to ``nodes`` (None: no restriction).

        HiveD takes Kubernetes' suggested nodes per call; Fleet has none, so the
        scheduling cycle never calls this.  It replays HiveD's own tests, and is
        refused unless the placer was built with ``node_restriction=True``.
        """
        if not self.node_restriction:
            raise RuntimeError("suggest_nodes needs a CellPlacer built with node_restriction=True")
        self.state.suggested = nodes

    def pin_job(self, key: str, pinned_cell_id: str | None) -> None:
        """Make job ``key`` use HiveD pinned cell ``pinned_cell_id`` (None: unpin)."""
        if pinned_cell_id is None:
            self.state.pins.pop(key, None)
        else:
            self.state.pins[key] = pinned_cell_id

    def holds(self, key: str) -> bool:
        cpu = self.cpu
        return key in self.state.held or (cpu is not None and cpu.holds(key))

    def may_have_victims(self, job: Job, mode: Mode) -> bool:
        cpu = self.cpu
        return victims.any_allowed(self.state, job, mode) or (
            cpu is not None and cpu.may_have_victims(job, mode)
        )

    def running(self) -> list[Charge]:
        out = {key: h.info for key, h in self.state.held.items()}
        if self.cpu is not None:
            for info in self.cpu.running():
                out.setdefault(info.key, info)
        return list(out.values())

    def placement_of(self, key: str) -> tuple[PodPlacement, ...]:
        held = self.state.held.get(key)
        cells = tuple(held.pods.values()) if held else ()
        return cells + self.cpu.placement_of(key) if self.cpu is not None else cells

    def capacity(self) -> Resources:
        """Resources of the healthy nodes (kept incrementally)."""
        cpu = self.cpu
        return self.state.capacity if cpu is None else self.state.capacity + cpu.capacity()

    def allocated(self) -> Resources:
        """Sum of the placed pods' requests (kept incrementally)."""
        cpu = self.cpu
        return self.state.allocated if cpu is None else self.state.allocated + cpu.allocated()

    def node_capacities(self) -> dict[str, Resources]:
        """Node -> what it holds (:func:`fleet.core.inventory.node_capacities`)."""
        return inventory.node_capacities(self.config)

    def bad_nodes(self) -> frozenset[str]:
        cpu = self.cpu
        bad = frozenset(self.state.bad)
        return bad if cpu is None else bad | cpu.bad_nodes()

    def blind_to_queue(self, job: Job, mode: Mode) -> bool:
        """A guaranteed job of a queue with no VC (and no pinned cell) here, that holds
        nothing here, is asked of the shared pool alone: its queue plays no part."""
        if job.key in self.state.held:
            return False
        return fitting.kind_of(self.state, job, mode)[0] == KIND_SHARED

    def lowest_level(self, job: Job, pods: Sequence[Pod]) -> int:
        """A lower bound on the ``Fit.level`` this gang can get here (cheap, no search)."""
        if self.cpu is not None:
            pods = [p for p in pods if p.request.amounts.get(resources.GPU, 0)]
        return demands.lowest_level(self.state, job, pods)

    def fragmentation(self) -> float:
        """Share of free healthy GPUs that cannot host a whole node-level cell."""
        return self.state.fragmentation()

    @property
    def free_leaves(self) -> int:
        """Healthy unowned leaves."""
        return self.state.free_leaves

    @property
    def whole_free_leaves(self) -> int:
        """Healthy unowned leaves in wholly free nodes."""
        return self.state.whole_free_leaves

    @property
    def _held(self) -> dict[str, Held]:
        """The jobs placed here (for tests that look at a job's reservations)."""
        return self.state.held

    def demoted(self) -> dict[str, str]:
        """Restored guaranteed jobs held as opportunistic ones -> why (see :mod:`.restoring`).

        HiveD's lazy preemption: their VC (or the shared pool, or their pinned
        cell) could not hold them where they run, so any guaranteed job may
        preempt them.
        """
        return dict(self.state.demoted)

    def doomed_cells(self) -> dict[str, int]:
        """VC -> number of its virtual cells that bad nodes leave no physical cell for."""
        return health.doomed_cells(self.state)

    # -- questions and changes ------------------------------------------------------------

    def fit(
        self,
        job: Job,
        pods: Sequence[Pod],
        mode: Mode,
        *,
        preempt: bool = False,
        released: frozenset[str] = frozenset(),
    ) -> Fit | NoFit:
        cpu = self.cpu
        if cpu is None:
            return self._fit_cells(job, pods, mode, preempt, released)
        gpu_pods = [p for p in pods if p.request.amounts.get(resources.GPU, 0)]
        if len(gpu_pods) == len(pods):
            return self._fit_cells(job, pods, mode, preempt, released)
        cpu_pods = [p for p in pods if not p.request.amounts.get(resources.GPU, 0)]
        cells: Fit | None = None
        if gpu_pods:
            answer = self._fit_cells(job, gpu_pods, mode, preempt, released)
            if isinstance(answer, NoFit):
                return answer
            cells = answer
        gone = released | frozenset(cells.victims) if cells is not None else released
        on_cpu = cpu.fit(job, cpu_pods, mode, preempt=preempt, released=gone)
        if isinstance(on_cpu, NoFit):
            return on_cpu
        order = {p.name: i for i, p in enumerate(pods)}
        if cells is None:
            return CellFit(self.cluster, on_cpu.pods, victims=on_cpu.victims)
        assert isinstance(cells, CellFit)
        placed = sorted(cells.pods + on_cpu.pods, key=lambda pp: order[pp.pod])
        more = tuple(v for v in on_cpu.victims if v not in cells.victims)
        return _with(cells, tuple(placed), cells.victims + more)

    def _fit_cells(
        self,
        job: Job,
        pods: Sequence[Pod],
        mode: Mode,
        preempt: bool,
        released: frozenset[str],
    ) -> Fit | NoFit:
        self.state.j.begin()
        try:
            return fitting.fit(self.state, job, pods, mode, preempt, released)
        finally:
            self.state.j.rollback()

    def _split(self, pods: Sequence[PodPlacement]) -> tuple[tuple[PodPlacement, ...], ...]:
        """``pods`` on the cells' nodes, and on the CPU-only nodes."""
        on_cpu = self._cpu_nodes
        return (
            tuple(pp for pp in pods if pp.node not in on_cpu),
            tuple(pp for pp in pods if pp.node in on_cpu),
        )

    def bind(self, job: Job, charge: Charge, fit: Fit) -> None:
        """Commit ``fit``; its victims must already have been released."""
        if not isinstance(fit, CellFit):
            names = {p.pod for p in fit.pods}
            pods = [p for p in job.pods if p.name in names]
            refit = self.fit(job, pods, charge.mode, preempt=False)
            if not isinstance(refit, CellFit) or refit.pods != fit.pods:
                raise BindError(f"{job.key}: stale fit for {self.cluster}; ask fit() again")
            fit = refit
        assert isinstance(fit, CellFit)
        cpu = self.cpu
        on_cells, on_cpu = self._split(fit.pods) if cpu is not None else (fit.pods, ())
        j = self.state.j
        j.begin()
        try:
            if on_cells:
                binding.commit(self.state, job, charge, _with(fit, on_cells, fit.victims))
            if on_cpu:
                assert cpu is not None
                for victim in fit.victims:
                    if cpu.holds(victim):
                        raise BindError(f"{job.key}: victim {victim} has not been released")
                cpu.bind(job, charge, Fit(self.cluster, on_cpu))
        except BaseException:
            j.rollback()
            raise
        j.commit()

    def release(self, key: str) -> None:
        if self.cpu is not None:
            self.cpu.release(key)
        if key not in self.state.held:
            return
        j = self.state.j
        j.begin()
        try:
            ownership.release(self.state, key)
        except BaseException:
            j.rollback()
            raise
        j.commit()

    def restore(self, job: Job, charge: Charge, pods: Sequence[PodPlacement]) -> None:
        """Hold ``pods`` of ``job`` exactly where they were recorded (after a restart).

        Restore every running job before marking nodes bad: a record on a bad
        node is refused like one on an unknown node.
        """
        cpu = self.cpu
        on_cells, on_cpu = self._split(pods) if cpu is not None else (tuple(pods), ())
        j = self.state.j
        j.begin()
        try:
            if on_cells or not on_cpu:
                restoring.restore(self.state, job, charge, on_cells)
            if on_cpu:
                assert cpu is not None
                cpu.restore(job, charge, on_cpu)
        except BaseException:
            j.rollback()
            raise
        j.commit()

    def set_node_health(self, node: str, healthy: bool) -> list[str]:
        """Mark ``node`` bad or healthy; returns keys of jobs with pods on a node gone bad."""
        if self.cpu is not None and node in self._cpu_nodes:
            return self.cpu.set_node_health(node, healthy)
        return health.set_node_health(self.state, node, healthy)

    def check_invariants(self) -> None:
        """Raise :class:`~fleet.core.checks.InvariantError` when an index or counter
        disagrees with a recount (see :mod:`.invariants`)."""
        invariants.check(self.state)
        if self.cpu is not None:
            self.cpu.check_invariants()


def _with(fit: CellFit, pods: tuple[PodPlacement, ...], victims: tuple[str, ...]) -> CellFit:
    """``fit`` with other pods and victims (the same plan)."""
    return CellFit(fit.cluster, pods, fit.level, fit.fragmentation, victims, fit.kind, fit.bindings)
