"""``CellPlacer``: HiveD-style topology-aware placement for one member cluster.

Theory of operation (see ``docs/decisions/0002-cell-allocator.md``):

*Two layers.*  The :mod:`~fleet.core.cells.allocator` decides which physical
cells are *reserved* for whom (a VC's bound virtual cells, pinned cells,
shared-pool jobs, bad nodes) with buddy allocation and VC safety.  On top,
every leaf cell (GPU) has at most one *owner* job.  Guaranteed jobs use leaves
of reservations of their own VC (or their own shared-pool reservation);
opportunistic and borrowed jobs use any unowned leaf of a healthy node, even
inside another VC's reservation, and are therefore the first victims there.

*Where a gang goes.*  A gang's pods are packed under the lowest common cell
that can hold them: inside one node by buddy choice of sub-node cells (the
smallest cell with enough free leaves, best fit), across nodes by first-fit
decreasing over the nodes of the lowest cell that fits.  A guaranteed job of
VC ``v`` first tries every cell ``v`` already has bound and one fresh binding
per owed level (buddy order: free cells of that level, then splits of higher
ones; only bindings that keep every other VC safe); if no single cell holds
the gang, pods are spread over several of ``v``'s cells, binding owed cells as
needed.  If the VC cannot take the gang (or the queue has no VC here) the job
may use the *shared pool*: free cells that no VC is owed, under the same
safety rule (checked as if taken leaf by leaf; bound as each pod's maximal
whole cells, see ``_take_shared``).  Opportunistic/borrowed jobs prefer nodes with few
reserved leaves (HiveD: fewer higher-priority used leaves), then pack.

*Queries roll back.*  ``fit`` performs the real takes and leaf assignments in
a journal and rolls them back, so what it answers is exactly what ``bind``
will commit; the plan (which cells get bound for the VC) travels in
:class:`CellFit` and ``bind`` re-validates it against the current state.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from fleet.core import resources
from fleet.core.cells import allocator as alloc_mod
from fleet.core.cells.allocator import Allocator, Journal, Reservation
from fleet.core.cells.config import CellConfig
from fleet.core.cells.topology import Cell, Topology, lowest_common
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import BindError, Fit, NoFit, PodPlacement, RunningInfo
from fleet.core.resources import Resources

#: Leaf filter: any leaf (opportunistic) — otherwise ``None`` (unreserved) or a Reservation.
ANY: Final = object()

KIND_VC: Final = "vc"
KIND_PIN: Final = "pin"
KIND_SHARED: Final = "shared"
KIND_OPP: Final = "opportunistic"


@dataclass(frozen=True, slots=True)
class CellFit(Fit):
    """A :class:`Fit` that also carries the allocator plan ``bind`` will commit.

    ``kind`` is how the job is held (``vc``, ``pin``, ``shared``,
    ``opportunistic``) and ``bindings`` the cell ids bound to the job's VC.
    """

    kind: str = KIND_OPP
    bindings: tuple[int, ...] = ()


class _Held:
    __slots__ = ("info", "kind", "leaves", "pods", "requests", "shared", "vc")

    def __init__(self, info: RunningInfo, kind: str, vc: str | None) -> None:
        self.info = info
        self.kind = kind
        self.vc = vc
        self.pods: dict[str, PodPlacement] = {}
        self.leaves: dict[str, list[Cell]] = {}
        self.requests: dict[str, Resources] = {}
        self.shared: list[Reservation] = []


class _Ctx:
    """One question: which leaves count as free or as victims."""

    __slots__ = ("job", "preempt", "released", "taken", "victims_ok")

    def __init__(self, job: str, released: frozenset[str], victims_ok: frozenset[str]) -> None:
        self.job = job
        self.released = released
        self.victims_ok = victims_ok
        self.preempt = bool(victims_ok)
        self.taken: set[int] = set()


class _Choice:
    """A candidate placement: leaves per pod (by demand index), its level and costs."""

    __slots__ = ("key", "leaves", "level", "victims")

    key: tuple[int, ...]

    def __init__(self, leaves: dict[int, list[Cell]], key: tuple[int, ...], victims: set[str]):
        self.leaves = leaves
        self.key = key
        self.victims = victims
        cells = [leaf for ls in leaves.values() for leaf in ls]
        common = lowest_common(cells)
        if common is None:
            self.level = max(c.top.level for c in cells) + 1 if cells else 0
        else:
            self.level = common.level


def may_preempt(job: Job, mode: Mode, victim: RunningInfo) -> bool:
    """The victim rules of :mod:`fleet.core.placement`."""
    if not victim.preemptible or job.opportunistic or mode is Mode.OPPORTUNISTIC:
        return False
    if victim.mode is Mode.OPPORTUNISTIC:
        return True
    if mode is not Mode.GUARANTEED:
        return False
    if victim.mode is Mode.BORROWED:
        return True
    return victim.queue == job.queue and victim.priority < job.priority


class CellPlacer:
    """One member cluster's cell allocator behind :class:`fleet.core.placement.Placer`."""

    def __init__(self, cluster: str, config: CellConfig) -> None:
        self._cluster = cluster
        self.config = config
        self.topo = Topology(config)
        self.j = Journal()
        self.alloc = Allocator(self.topo, config, self.j)
        self._held: dict[str, _Held] = {}
        self._pins: dict[str, str] = {}  # job key -> pinned cell id
        self._node_caps = config.nodes()
        self._bad: set[str] = set()
        # Incremental totals behind capacity() and allocated() (O(1) for the cycle).
        self._capacity = Resources()
        for cap in self._node_caps.values():
            self._capacity = self._capacity + cap
        self._allocated = Resources()
        self._suggested: frozenset[str] | None = None
        self._version = 0
        # Fragmentation counters: healthy unowned leaves, and those in wholly free nodes.
        self.free_leaves = 0
        self.whole_free_leaves = 0
        for nodes in self.topo.nodes.values():
            for node in nodes:
                self.free_leaves += node.size
                self.whole_free_leaves += node.size
        self._subcells: dict[int, list[Cell]] = {}
        self._marks: list[int] = []  # nested undo scopes (journal marks)
        # Cells at a level under a cell, cached.
        self._at_level: dict[tuple[int, int], list[Cell]] = {}

    # -- Placer protocol ------------------------------------------------------------------

    @property
    def cluster(self) -> str:
        return self._cluster

    def suggest_nodes(self, nodes: frozenset[str] | None) -> None:
        """Restrict every following placement to ``nodes`` (None: no restriction).

        HiveD takes Kubernetes' suggested nodes per call; Fleet has none, but the
        restriction is kept for node selectors and for replaying HiveD's tests.
        """
        self._suggested = nodes

    def pin_job(self, key: str, pinned_cell_id: str | None) -> None:
        """Make job ``key`` use HiveD pinned cell ``pinned_cell_id`` (None: unpin)."""
        if pinned_cell_id is None:
            self._pins.pop(key, None)
        else:
            self._pins[key] = pinned_cell_id

    def holds(self, key: str) -> bool:
        return key in self._held

    def running(self) -> list[RunningInfo]:
        return [h.info for h in self._held.values()]

    def placement_of(self, key: str) -> tuple[PodPlacement, ...]:
        held = self._held.get(key)
        return tuple(held.pods.values()) if held else ()

    def capacity(self) -> Resources:
        """Resources of the healthy nodes (kept incrementally)."""
        return self._capacity

    def allocated(self) -> Resources:
        """Sum of the placed pods' requests (kept incrementally)."""
        return self._allocated

    def lowest_level(self, job: Job, pods: Sequence[Pod]) -> int:
        """A lower bound on the ``Fit.level`` this gang can get here (cheap, no search).

        The lowest common cell of a placement holds all its leaf cells, so its level is
        at least that of the smallest cell type (of any chain the job may use) with
        that many leaves; pods needing no leaf cells get level 0.
        """
        best: int | None = None
        for leaf_type in self._leaf_types(job):
            sku = self.config.sku_types.get(leaf_type)
            need = 0
            for pod in pods:
                n = leaf_cells_needed(pod.request, sku)
                if n is None:
                    break
                need += n
            else:
                if need == 0:
                    return 0
                for chain in self.topo.leaf_chains[leaf_type]:
                    level = max(0, self._lowest_level_in(chain, need) - 1)
                    if best is None or level < best:
                        best = level
        return 0 if best is None else best

    def fragmentation(self) -> float:
        """Share of free healthy GPUs that cannot host a whole node-level cell."""
        if self.free_leaves <= 0:
            return 0.0
        return (self.free_leaves - self.whole_free_leaves) / self.free_leaves

    def doomed_cells(self) -> dict[str, int]:
        """VC -> number of its virtual cells that bad nodes leave no physical cell for."""
        return {
            vc: sum(levels.values()) for vc, levels in self.alloc.doomed_by_chain_level().items()
        }

    def vc_usage(self) -> dict[str, tuple[int, int]]:
        """VC -> (guaranteed leaves used, leaves configured)."""
        out: dict[str, tuple[int, int]] = {}
        for vc, chains in self.alloc.configured.items():
            total = sum(
                n * self.alloc.weight[chain][level]
                for chain, levels in chains.items()
                for level, n in enumerate(levels)
            )
            total += sum(p.cell.size for p in self.alloc.pins.values() if p.vc == vc)
            used = sum(r.gused for r in self.alloc.vc_bound[vc].values())
            used += sum(p.gused for p in self.alloc.pins.values() if p.vc == vc)
            out[vc] = (used, total)
        return out

    # -- fit ------------------------------------------------------------------------------

    def fit(
        self,
        job: Job,
        pods: Sequence[Pod],
        mode: Mode,
        *,
        preempt: bool = False,
        released: frozenset[str] = frozenset(),
    ) -> Fit | NoFit:
        self.j.begin()
        try:
            return self._fit(job, pods, mode, preempt, released)
        finally:
            self.j.rollback()

    def _fit(
        self, job: Job, pods: Sequence[Pod], mode: Mode, preempt: bool, released: frozenset[str]
    ) -> Fit | NoFit:
        kind, vc, why = self._kind(job, mode)
        if why is not None:
            return NoFit(self._cluster, why)
        leaf_types = self._leaf_types(job)
        if not leaf_types:
            return NoFit(self._cluster, f"no leaf cells of type {job.gpu_sku} in {self._cluster}")
        victims_ok: frozenset[str] = frozenset()
        if preempt:
            victims_ok = frozenset(
                key
                for key, held in self._held.items()
                if key not in released and key != job.key and may_preempt(job, mode, held.info)
            )
        if all(leaf_cells_needed(p.request, None) == 0 for p in pods) and not self.config.sku_types:
            # Nothing to allocate: pods go next to the job (or on the first healthy node).
            zero = _Choice({i: [] for i in range(len(pods))}, (0,), set())
            zero.level = 1
            return self._answer(
                job, pods, [], (zero, kind, []), _Ctx(job.key, released, frozenset())
            )
        passes: list[frozenset[str]] = [frozenset(), *([victims_ok] if victims_ok else [])]
        reasons: list[str] = []
        for ok in passes:
            ctx = _Ctx(job.key, released, ok)
            for leaf_type in leaf_types:
                for chain in self.topo.leaf_chains[leaf_type]:
                    demands = self._demands(pods, leaf_type)
                    if demands is None:
                        reasons.append(f"pods do not fit a {leaf_type} leaf cell")
                        continue
                    found = self._search(job, kind, vc, chain, demands, ctx, reasons)
                    if found is not None:
                        return self._answer(job, pods, demands, found, ctx)
        reason = self._why(job, kind, vc, pods, preempt)
        return NoFit(self._cluster, reason)

    def _kind(self, job: Job, mode: Mode) -> tuple[str, str | None, str | None]:
        pinned = self._pins.get(job.key) or job.pinned_cell_id
        held = self._held.get(job.key)
        if held is not None:
            return held.kind, held.vc, None
        if mode is not Mode.GUARANTEED or job.priority < 0:
            return KIND_OPP, None, None
        if pinned:
            res = self.alloc.pins.get(pinned)
            if res is None or res.vc != job.queue:
                return KIND_PIN, None, f"VC {job.queue} has no pinned cell {pinned}"
            return KIND_PIN, job.queue, None
        if job.queue in self.config.vcs:
            return KIND_VC, job.queue, None
        return KIND_SHARED, None, None

    def _leaf_types(self, job: Job) -> list[str]:
        if job.gpu_sku:
            types = [job.gpu_sku] if job.gpu_sku in self.topo.leaf_chains else []
        else:
            types = list(self.config.leaf_types)
        return [t for t in types if self.topo.leaf_chains.get(t)]

    def _demands(self, pods: Sequence[Pod], leaf_type: str) -> list[tuple[int, int]] | None:
        """(pod index, leaf cells) sorted by leaf cells, largest first."""
        sku = self.config.sku_types.get(leaf_type)
        out: list[tuple[int, int]] = []
        for i, pod in enumerate(pods):
            n = leaf_cells_needed(pod.request, sku)
            if n is None:
                return None
            out.append((i, n))
        out.sort(key=lambda d: -d[1])
        return out

    def _why(self, job: Job, kind: str, vc: str | None, pods: Sequence[Pod], preempt: bool) -> str:
        gpus = sum(p.gpus for p in pods)
        what = f"{len(pods)} pod(s) / {gpus} GPU(s)"
        if job.gpu_sku:
            what += f" of {job.gpu_sku}"
        tail = "" if preempt else " without preemption"
        if kind == KIND_VC and vc is not None:
            doomed = self.doomed_cells().get(vc, 0)
            extra = f"; {doomed} of its cells are doomed by bad nodes" if doomed else ""
            return (
                f"VC {vc} cells and the shared pool of {self._cluster} cannot hold "
                f"{what}{tail}{extra}"
            )
        if kind == KIND_PIN:
            return f"pinned cell of VC {vc} in {self._cluster} cannot hold {what}{tail}"
        if kind == KIND_SHARED:
            return f"shared pool of {self._cluster} cannot hold {what}{tail}"
        return f"free cells of {self._cluster} cannot hold {what}{tail}"

    # -- search ---------------------------------------------------------------------------

    def _search(
        self,
        job: Job,
        kind: str,
        vc: str | None,
        chain: str,
        demands: list[tuple[int, int]],
        ctx: _Ctx,
        reasons: list[str],
    ) -> tuple[_Choice, str, list[Cell]] | None:
        """Find a placement in ``chain``; returns (choice, kind, cells bound to the VC)."""
        held = self._held.get(job.key)
        if kind == KIND_OPP:
            choice = self._best_over(self._tops(chain), ANY, demands, ctx, opportunistic=True)
            return (choice, KIND_OPP, []) if choice else None
        if kind == KIND_PIN:
            pin = self._pins.get(job.key) or job.pinned_cell_id
            res = self.alloc.pins[str(pin)]
            if res.cell.chain != chain:
                return None
            choice = self._best_over([(res.cell, res)], None, demands, ctx)
            return (choice, KIND_PIN, []) if choice else None
        if kind == KIND_VC and vc is not None:
            found = self._search_vc(vc, chain, demands, ctx)
            if found is not None:
                return found[0], KIND_VC, found[1]
            if held is not None:
                return None  # an incremental VC job grows inside its VC
        if held is not None and held.kind != KIND_SHARED:
            return None
        choice = self._search_shared(chain, demands, ctx)
        return (choice, KIND_SHARED, []) if choice else None

    def _tops(self, chain: str) -> list[tuple[Cell, object]]:
        return [(top, ANY) for top in self.topo.chain_tops[chain]]

    def _best_over(
        self,
        containers: Iterable[tuple[Cell, object]],
        default_want: object,
        demands: list[tuple[int, int]],
        ctx: _Ctx,
        opportunistic: bool = False,
    ) -> _Choice | None:
        best: _Choice | None = None
        for cell, want in containers:
            choice = self._pack(
                cell, want if want is not None else default_want, demands, ctx, opportunistic
            )
            if choice is not None and (
                best is None or (choice.level, choice.key) < (best.level, best.key)
            ):
                best = choice
        if best is None and len(demands) > 1:
            best = self._spread(list(containers), demands, ctx, opportunistic)
        return best

    def _search_vc(
        self, vc: str, chain: str, demands: list[tuple[int, int]], ctx: _Ctx
    ) -> tuple[_Choice, list[Cell]] | None:
        alloc = self.alloc
        bound = [r for r in alloc.vc_bound[vc].values() if r.cell.chain == chain]
        total = sum(k for _, k in demands)
        owed = alloc.vc_owed[vc][chain]
        weights = alloc.weight[chain]
        if not ctx.preempt and not ctx.released:
            # Counters only: unowned leaves of the bound cells plus what the owed cells
            # could still add (bounded by the chain's unreserved leaves).
            fresh_room = sum(n * w for n, w in zip(owed, weights, strict=True))
            room = sum(r.cell.size - r.cell.used for r in bound)
            room += min(fresh_room, alloc.unres_total[chain][0])
            if room < total:
                return None
        best: tuple[tuple[int, ...], _Choice, list[Cell]] | None = None
        for res in bound:
            choice = self._pack(res.cell, res, demands, ctx, False)
            if choice is not None:
                key = (choice.level, 0, *choice.key)
                if best is None or key < best[0]:
                    best = (key, choice, [])
        for level in range(1, len(owed)):
            if owed[level] <= 0 or weights[level] < total:
                continue
            if best is not None and best[1].level <= level:
                break
            fresh = self._fresh(vc, chain, level, demands, ctx)
            if fresh is not None:
                key = (fresh.level, 1, *fresh.key)
                if best is None or key < best[0]:
                    best = (key, fresh, [fresh_cell(fresh, level)])
        if best is not None:
            return best[1], best[2]
        if len(demands) <= 1 and not bound and not any(owed):
            return None
        return self._spread_vc(vc, chain, demands, ctx)

    def _fresh(
        self, vc: str, chain: str, level: int, demands: list[tuple[int, int]], ctx: _Ctx
    ) -> _Choice | None:
        """The first safe free cell of ``level`` (buddy order) that holds the gang."""
        alloc = self.alloc
        before = alloc.shortage(chain)
        tried = 0
        for cell in alloc.candidates(chain, level):
            choice = self._pack(cell, None, demands, ctx, False)
            if choice is None:
                tried += 1
                if tried > 64:
                    return None
                continue
            # Safety: binding must not break any other VC's guarantee.
            self._mark()
            alloc.bind_vc(vc, cell)
            safe = alloc.no_worse(chain, before)
            self._undo()
            if safe:
                return choice
        return None

    def _spread_vc(
        self, vc: str, chain: str, demands: list[tuple[int, int]], ctx: _Ctx
    ) -> tuple[_Choice, list[Cell]] | None:
        """Spread pods over several of the VC's cells, binding owed cells as needed."""
        alloc = self.alloc
        leaves: dict[int, list[Cell]] = {}
        victims: set[str] = set()
        new_bound: list[Cell] = []
        used_containers: list[Reservation] = []
        # Leaves picked so far per bound cell: without victims or released jobs a cell
        # whose unowned leaves minus the picked ones cannot hold a pod is skipped.
        picked: dict[int, int] = {}
        counted = not ctx.preempt and not ctx.released
        self._mark()
        try:
            for idx, k in demands:
                if k == 0:
                    leaves[idx] = []
                    continue
                placed: _Choice | None = None
                bound = sorted(
                    (r for r in alloc.vc_bound[vc].values() if r.cell.chain == chain),
                    key=lambda r: (r not in used_containers, r.cell.id),
                )
                for res in bound:
                    cell = res.cell
                    if counted and cell.size - cell.used - picked.get(cell.id, 0) < k:
                        continue
                    placed = self._pack(cell, res, [(idx, k)], ctx, False)
                    if placed is not None:
                        if res not in used_containers:
                            used_containers.append(res)
                        break
                if placed is None:
                    owed = alloc.vc_owed[vc][chain]
                    for level in range(1, len(owed)):
                        if owed[level] <= 0 or alloc.weight[chain][level] < k:
                            continue
                        placed = self._fresh(vc, chain, level, [(idx, k)], ctx)
                        if placed is not None:
                            cell = fresh_cell(placed, level)
                            res = alloc.bind_vc(vc, cell)
                            new_bound.append(cell)
                            used_containers.append(res)
                            break
                if placed is None:
                    return None
                leaves[idx] = placed.leaves[idx]
                victims |= placed.victims
                ctx.taken.update(leaf.id for leaf in placed.leaves[idx])
                for leaf in placed.leaves[idx]:
                    tag = leaf.tag
                    if tag is not None:
                        picked[tag.cell.id] = picked.get(tag.cell.id, 0) + 1
            choice = _Choice(leaves, (len(victims), len(new_bound)), victims)
            return choice, new_bound
        finally:
            for ls in leaves.values():
                for leaf in ls:
                    ctx.taken.discard(leaf.id)
            self._undo()

    def _search_shared(
        self, chain: str, demands: list[tuple[int, int]], ctx: _Ctx
    ) -> _Choice | None:
        """Unreserved leaves, taken only if no VC's owed cells are put at risk.

        Candidates are tried best first ((level, key) order, at most 8, the first
        safe one wins), generated lazily: tops are packed in id order only while
        their lower bound (the lowest level whose cells hold ``need`` leaves, no
        victims, ids at least the top's) could still beat the best packed one.
        Without victims or released jobs only tops with unreserved leaves count.
        """
        alloc = self.alloc
        need = sum(k for _, k in demands)
        tops: list[Cell]
        if ctx.preempt or ctx.released:
            # Victims' shared leaves may sit in tops with no unreserved leaf left.
            tops = self.topo.chain_tops[chain]
        else:
            if alloc.unres_total[chain][0] < need:
                return None
            tops = sorted(alloc.open_tops[chain].values(), key=_cell_id)
        low = self._lowest_level_in(chain, need)
        node_level = self.topo.node_level[chain]
        across = low > node_level
        order: list[tuple[int, tuple[int, ...], Cell]]
        if across or ctx.preempt or ctx.released or self._suggested is not None:
            # Across nodes the node counters give no tighter bound than the level.
            order = [
                (low, (0, 0, 0, top.id) if across else (0, 0, 0, 0, top.id), top) for top in tops
            ]
        else:
            order = self._shared_bounds(tops, need, low, node_level)
        before = alloc.shortage(chain)
        heap: list[tuple[int, tuple[int, ...], int, _Choice]] = []
        seq = 0
        tried = 0
        i = 0
        while tried < 8:
            if i < len(order):
                level_bound, bound, top = order[i]
                if not heap or (heap[0][0], heap[0][1]) >= (level_bound, bound):
                    i += 1
                    choice = self._pack(top, None, demands, ctx, False)
                    if choice is not None:
                        heapq.heappush(heap, (choice.level, choice.key, seq, choice))
                        seq += 1
                    continue
            if not heap:
                if seq or len(demands) <= 1:
                    return None
                spread = self._spread([(t, None) for t in tops], demands, ctx, False)
                if spread is None:
                    return None
                heap.append((spread.level, spread.key, seq, spread))
                seq += 1
            choice = heapq.heappop(heap)[3]
            tried += 1
            if not choice.victims and not any(key in self._held for key in ctx.released):
                # Nothing leaves first: the takes' effect on the free lists is arithmetic.
                leaves = [leaf for ls in choice.leaves.values() for leaf in ls]
                delta = alloc.take_delta(chain, leaves)
                if delta is not None:
                    after = alloc.shortage(chain, delta)
                    if all(a <= b for a, b in zip(after, before, strict=True)):
                        return choice
                    continue
            self._mark()
            for key in sorted(choice.victims | ctx.released):
                if key in self._held:
                    self._release(key)
            for ls in choice.leaves.values():
                for leaf in ls:
                    alloc.take(leaf, Reservation(alloc_mod.SHARED, leaf, job=ctx.job))
            safe = alloc.no_worse(chain, before)
            self._undo()
            if safe:
                return choice
        return None

    def _shared_bounds(
        self, tops: list[Cell], need: int, low: int, node_level: int
    ) -> list[tuple[int, tuple[int, ...], Cell]]:
        """Open tops with a lower bound on their best shared placement, best bound first.

        Without victims, released jobs or suggested nodes a node's usable leaves are
        exactly its ``shfree``, so a top's placement inside one node is at best
        (``low``, no victims, the least spare leaves of a node that holds ``need``,
        ids at least the top's); with no such node it is across nodes (level above
        the nodes); with fewer usable leaves than ``need`` there is none.  Tops are
        then packed in bound order, so single pods and small gangs pack only the
        tops whose counters can beat the best so far.  (Used when ``need`` fits in
        a node; larger gangs keep the id order, where this pass would cost more
        than it saves.)
        """
        order: list[tuple[int, tuple[int, ...], Cell]] = []
        for top in tops:
            spare = -1
            total = 0
            for node in top.node_cells:
                if not node.healthy:
                    continue
                n = node.shfree
                total += n
                if n >= need and (spare < 0 or n - need < spare):
                    spare = n - need
            if spare >= 0:
                order.append((low, (0, 0, 0, spare, top.id), top))
            elif total >= need and not top.is_node:
                order.append((max(low, node_level + 1), (0, 0, 0, top.id), top))
        order.sort(key=_bound_key)
        return order

    def _lowest_level_in(self, chain: str, need: int) -> int:
        """The lowest level of ``chain`` whose cells hold ``need`` leaves (top + 1 if none)."""
        weights = self.alloc.weight[chain]
        for level in range(1, len(weights)):
            if weights[level] >= need:
                return level
        return len(weights)

    # -- packing --------------------------------------------------------------------------

    def _usable(
        self, root: Cell, want: object, ctx: _Ctx
    ) -> tuple[dict[int, tuple[Cell, list[Cell], list[Cell], int]], int]:
        """Per node under ``root``: (node, free leaves, victim leaves, reserved leaves)."""
        out: dict[int, tuple[Cell, list[Cell], list[Cell], int]] = {}
        total = 0
        nodes = root.node_cells or [root]
        taken = ctx.taken
        released = ctx.released
        victims_ok = ctx.victims_ok
        suggested = self._suggested
        if root.res is not None and want is root.res and not ctx.preempt and not released:
            # Inside the wanted reservation every leaf carries it: usable = unowned.
            for node in nodes:
                node_cell = node.node_cell
                if node_cell is None or not node_cell.healthy or node.used == node.size:
                    continue
                if suggested is not None and node_cell.node not in suggested:
                    continue
                mine = [leaf for leaf in node.leaves if leaf.owner is None and leaf.id not in taken]
                if mine:
                    out[node.id] = (node, mine, [], node.size)
                    total += len(mine)
            return out, total
        for node in nodes:
            node_cell = node.node_cell
            if node_cell is None or not node_cell.healthy:
                continue
            if suggested is not None and node_cell.node not in suggested:
                continue
            leaves = node.leaves
            if node.used == node.size and not ctx.preempt and not released:
                continue  # every leaf owned, and no owner leaves
            free: list[Cell] = []
            vict: list[Cell] = []
            reserved = 0
            for leaf in leaves:
                tag = leaf.tag
                if tag is not None:
                    reserved += 1
                # A shared-pool job's own leaves are usable once it is preempted.
                if (
                    want is not ANY
                    and tag is not want
                    and not (
                        want is None
                        and tag is not None
                        and tag.kind == alloc_mod.SHARED
                        and (leaf.owner in victims_ok or leaf.owner in released)
                    )
                ):
                    continue
                if leaf.id in taken:
                    continue
                owner = leaf.owner
                if owner is None or owner in released:
                    free.append(leaf)
                elif owner in victims_ok:
                    vict.append(leaf)
            if free or vict:
                out[node.id] = (node, free, vict, reserved)
                total += len(free) + len(vict)
        return out, total

    def _pack(
        self,
        root: Cell,
        want: object,
        demands: list[tuple[int, int]],
        ctx: _Ctx,
        opportunistic: bool,
    ) -> _Choice | None:
        need = sum(k for _, k in demands)
        if need == 0:
            return self._zero_choice(root, demands)
        if root.node_cell is not None and not root.node_cell.healthy:
            return None
        if not ctx.preempt and not ctx.released:
            # Upper bounds from the counters: unowned leaves, and for the shared pool
            # unreserved ones (``unres`` may overcount inside a reserved root; still a bound).
            room = root.size - root.used
            if want is None and root.unres < room:
                room = root.unres
            if room < need:
                return None
        info, total = self._usable(root, want, ctx)
        if total < need:
            return None
        best: _Choice | None = None
        # Inside one node (or one sub-node root).  Nodes come in id order, so a
        # placement at the lowest possible level with nothing to spare is final.
        floor = self._lowest_level_in(root.chain, need)
        for node, free, vict, reserved in info.values():
            if len(free) + len(vict) < need:
                continue
            placed = self._in_node(node, demands, free, vict)
            if placed is None:
                continue
            leaves, level, nvict = placed
            victims = {leaf.owner for ls in leaves.values() for leaf in ls if leaf in vict}
            pref = reserved if opportunistic else 0
            key = (level, len(victims), nvict, pref, len(free) + len(vict) - need, node.id)
            if best is None or key < best.key:
                best = _Choice(leaves, key, {v for v in victims if v is not None})
                if key[:5] == (floor, 0, 0, 0, 0):
                    break
        if best is not None:
            best.key = best.key[1:]
            return best
        if root.node_cells == [] or root.is_node:
            return None
        # Across nodes: the lowest cell above node level whose nodes hold the gang.
        node_level = self.topo.node_level[root.chain]
        for level in range(node_level + 1, root.level + 1):
            for cell in self._cells_at(root, level):
                nodes = [info[n.id] for n in cell.node_cells if n.id in info]
                if sum(len(f) + len(v) for _, f, v, _ in nodes) < need:
                    continue
                placed_multi = self._across(nodes, demands, opportunistic)
                if placed_multi is None:
                    continue
                leaves, nvict, pref = placed_multi
                victims = {
                    leaf.owner
                    for ls in leaves.values()
                    for leaf in ls
                    if leaf.owner and leaf.owner not in ctx.released
                }
                mkey: tuple[int, ...] = (len(victims), nvict, pref, cell.id)
                if best is None or mkey < best.key:
                    best = _Choice(leaves, mkey, {v for v in victims if v is not None})
            if best is not None:
                return best
        return None

    def _zero_choice(self, root: Cell, demands: list[tuple[int, int]]) -> _Choice | None:
        choice = _Choice({idx: [] for idx, _ in demands}, (0,), set())
        choice.level = 1
        return choice

    def _cells_at(self, root: Cell, level: int) -> list[Cell]:
        key = (root.id, level)
        cells = self._at_level.get(key)
        if cells is None:
            cells = list(alloc_mod._descendants_at(root, level))
            self._at_level[key] = cells
        return cells

    def _subcells_of(self, node: Cell) -> list[Cell]:
        cells = self._subcells.get(node.id)
        if cells is None:
            cells = []
            stack = [node]
            while stack:
                c = stack.pop()
                cells.append(c)
                stack.extend(c.children)
            cells.sort(key=lambda c: (c.level, c.id))
            self._subcells[node.id] = cells
        return cells

    def _in_node(
        self, node: Cell, demands: list[tuple[int, int]], free: list[Cell], vict: list[Cell]
    ) -> tuple[dict[int, list[Cell]], int, int] | None:
        """Buddy choice of leaves for ``demands`` in one node: (leaves, level, victim leaves)."""
        avail = {leaf.id: 0 for leaf in free}
        for leaf in vict:
            avail[leaf.id] = 1
        out: dict[int, list[Cell]] = {}
        chosen: list[Cell] = []
        nvict = 0
        subcells = self._subcells_of(node)
        for idx, k in demands:
            if k == 0:
                out[idx] = []
                continue
            pick: Cell | None = None
            pick_key: tuple[int, int, int] | None = None
            for cell in subcells:
                if cell.size < k:
                    continue
                if pick is not None and cell.level > pick.level:
                    break
                ids = [leaf.id for leaf in cell.leaves if leaf.id in avail]
                if len(ids) < k:
                    continue
                nv = sum(avail[i] for i in ids)
                cnt = len(ids)
                key = (max(0, k - (cnt - nv)), cnt, cell.id)
                if pick_key is None or key < pick_key:
                    pick, pick_key = cell, key
            if pick is None:
                return None
            mine = [leaf for leaf in pick.leaves if leaf.id in avail]
            if any(avail[leaf.id] for leaf in mine):
                mine.sort(key=lambda leaf: avail[leaf.id])  # free before victims, stable
                taken = mine[:k]
                taken.sort(key=lambda leaf: pick.leaves.index(leaf))
            else:
                taken = mine[:k]  # already in the pick's order
            for leaf in taken:
                nvict += avail.pop(leaf.id)
            out[idx] = taken
            chosen.extend(taken)
        common = lowest_common(chosen)
        level = common.level if common is not None else node.level
        return out, level, nvict

    def _across(
        self,
        nodes: list[tuple[Cell, list[Cell], list[Cell], int]],
        demands: list[tuple[int, int]],
        opportunistic: bool,
    ) -> tuple[dict[int, list[Cell]], int, int] | None:
        """First-fit decreasing of pods over nodes, best fit, free leaves before victims."""
        remaining = {n.id: [len(f), len(v)] for n, f, v, _ in nodes}
        by_id = {n.id: (n, f, v, r) for n, f, v, r in nodes}
        assign: dict[int, list[tuple[int, int]]] = {}
        pref_total = 0
        for idx, k in demands:
            best_id = -1
            best_key: tuple[int, ...] | None = None
            for nid, (nf, nv) in remaining.items():
                if nf + nv < k:
                    continue
                reserved = by_id[nid][3] if opportunistic else 0
                key = (max(0, k - nf), reserved, nf + nv - k, nid)
                if best_key is None or key < best_key:
                    best_id, best_key = nid, key
            if best_key is None:
                return None
            nf, nv = remaining[best_id]
            use_free = min(nf, k)
            remaining[best_id] = [nf - use_free, nv - (k - use_free)]
            assign.setdefault(best_id, []).append((idx, k))
            pref_total += best_key[1]
        leaves: dict[int, list[Cell]] = {}
        nvict = 0
        for nid, dems in assign.items():
            node, free, vict, _ = by_id[nid]
            placed = self._in_node(node, dems, free, vict)
            if placed is None:
                return None
            leaves.update(placed[0])
            nvict += placed[2]
        return leaves, nvict, pref_total

    def _spread(
        self,
        containers: list[tuple[Cell, object]],
        demands: list[tuple[int, int]],
        ctx: _Ctx,
        opportunistic: bool,
    ) -> _Choice | None:
        """Pods one by one over several containers (gang spanning top-level cells)."""
        leaves: dict[int, list[Cell]] = {}
        victims: set[str] = set()
        try:
            for idx, k in demands:
                best: _Choice | None = None
                for cell, want in containers:
                    choice = self._pack(cell, want, [(idx, k)], ctx, opportunistic)
                    if choice is not None and (best is None or choice.key < best.key):
                        best = choice
                if best is None:
                    return None
                leaves[idx] = best.leaves[idx]
                victims |= best.victims
                ctx.taken.update(leaf.id for leaf in best.leaves[idx])
            return _Choice(leaves, (len(victims),), victims)
        finally:
            for ls in leaves.values():
                for leaf in ls:
                    ctx.taken.discard(leaf.id)

    # -- answer ---------------------------------------------------------------------------

    def _answer(
        self,
        job: Job,
        pods: Sequence[Pod],
        demands: list[tuple[int, int]],
        found: tuple[_Choice, str, list[Cell]],
        ctx: _Ctx,
    ) -> CellFit:
        choice, kind, bindings = found
        placements = self._placements(job, pods, choice.leaves)
        if not choice.victims and not any(key in self._held for key in ctx.released):
            # Nothing leaves: the fragmentation after the placement is counter arithmetic.
            return CellFit(
                cluster=self._cluster,
                pods=placements,
                level=max(0, choice.level - 1),
                fragmentation=round(self._fragmentation_after(choice), 6),
                victims=(),
                kind=kind,
                bindings=tuple(c.id for c in bindings),
            )
        # Apply the placement (the fit's journal rolls it back): victims and released jobs
        # leave first; a VC cell they leave empty is unbound and must be bound again.
        before = [
            leaf.tag.cell
            for ls in choice.leaves.values()
            for leaf in ls
            if leaf.tag is not None and leaf.tag.kind == alloc_mod.VC
        ]
        for victim in sorted(choice.victims | ctx.released):
            if victim in self._held:
                self._release(victim)
        bindings = list(bindings)
        for cell in before:
            if cell.res is None and cell not in bindings:
                bindings.append(cell)
        for ls in choice.leaves.values():
            for leaf in ls:
                if leaf.owner is not None:
                    self._unown(leaf)
                self._own(leaf, job.key, None)
        level = max(0, choice.level - 1)
        return CellFit(
            cluster=self._cluster,
            pods=placements,
            level=level,
            fragmentation=round(self.fragmentation(), 6),
            victims=tuple(sorted(choice.victims)),
            kind=kind,
            bindings=tuple(c.id for c in bindings),
        )

    def _fragmentation_after(self, choice: _Choice) -> float:
        """``fragmentation()`` once ``choice``'s (unowned) leaves are owned."""
        free, whole = self.free_leaves, self.whole_free_leaves
        touched: set[int] = set()
        for ls in choice.leaves.values():
            for leaf in ls:
                node = leaf.node_cell
                assert node is not None
                if node.healthy:
                    free -= 1
                    if node.used == 0 and node.id not in touched:
                        whole -= node.size
                touched.add(node.id)
        return (free - whole) / free if free > 0 else 0.0

    def _placements(
        self, job: Job, pods: Sequence[Pod], leaves: Mapping[int, list[Cell]]
    ) -> tuple[PodPlacement, ...]:
        anchor: str | None = None
        for ls in leaves.values():
            if ls and ls[0].node is not None:
                anchor = ls[0].node
                break
        if anchor is None:
            held = self._held.get(job.key)
            if held and held.pods:
                anchor = next(iter(held.pods.values())).node
            else:
                anchor = next(
                    (n for n, cells in self.topo.nodes.items() if all(c.healthy for c in cells)),
                    next(iter(self.topo.nodes)),
                )
        out: list[PodPlacement] = []
        for i, pod in enumerate(pods):
            ls = leaves.get(i, [])
            if ls:
                node = ls[0].node
                assert node is not None
                out.append(PodPlacement(pod.name, node, tuple(leaf.leaf_index or 0 for leaf in ls)))
            else:
                out.append(PodPlacement(pod.name, anchor, ()))
        return tuple(out)

    # -- state changes --------------------------------------------------------------------

    def _mark(self) -> None:
        """Start a nested undo scope (a suffix of the journal)."""
        self._marks.append(self.j.mark())

    def _undo(self) -> None:
        self.j.undo_to(self._marks.pop())

    def _own(self, leaf: Cell, key: str, held: _Held | None) -> None:
        j = self.j
        node = leaf.node_cell
        assert node is not None
        if node.healthy:
            j.add(self, "free_leaves", -1)
            if node.used == 0:
                j.add(self, "whole_free_leaves", -node.size)
        j.set(leaf, "owner", key)
        if leaf.tag is None:
            j.add(node, "shfree", -1)
        c: Cell | None = leaf
        while c is not None:
            j.add(c, "used", 1)
            c = c.parent
        if held is not None and held.kind in (KIND_VC, KIND_PIN) and leaf.tag is not None:
            j.add(leaf.tag, "gused", 1)

    def _own_many(self, leaves: list[Cell], key: str, held: _Held) -> None:
        """``_own`` for several unowned leaves, each ancestor's counter updated once.

        Cells below a node are counted per leaf; the node and the cells above it once
        per node (a pod's leaves are in one node).
        """
        j = self.j
        log = j.log
        record = log.extend if log is not None else _ignore
        below: dict[Cell, int] = {}
        per_node: dict[Cell, int] = {}
        gused: dict[Reservation, int] = {}
        unreserved: dict[Cell, int] = {}  # node -> leaves with no tag
        free = whole = 0
        guaranteed = held.kind in (KIND_VC, KIND_PIN)
        for leaf in leaves:
            node = leaf.node_cell
            assert node is not None
            if node.healthy:
                free += 1
                if node.used == 0 and node not in per_node:
                    whole += node.size
            record((leaf, "owner", leaf.owner, setattr))
            leaf.owner = key
            if node is leaf:
                per_node[leaf] = 1
            else:
                c = leaf
                while c is not node:
                    below[c] = below.get(c, 0) + 1
                    parent = c.parent
                    assert parent is not None
                    c = parent
                per_node[node] = per_node.get(node, 0) + 1
            tag = leaf.tag
            if tag is None:
                unreserved[node] = unreserved.get(node, 0) + 1
            elif guaranteed:
                gused[tag] = gused.get(tag, 0) + 1
        for node, n in unreserved.items():
            j.add(node, "shfree", -n)
        if free:
            j.add(self, "free_leaves", -free)
        if whole:
            j.add(self, "whole_free_leaves", -whole)
        for cell, n in below.items():
            record((cell, "used", cell.used, setattr))
            cell.used += n
        for node, n in per_node.items():
            up: Cell | None = node
            while up is not None:
                record((up, "used", up.used, setattr))
                up.used += n
                up = up.parent
        for res, n in gused.items():
            j.add(res, "gused", n)

    def _unown(self, leaf: Cell) -> None:
        j = self.j
        node = leaf.node_cell
        assert node is not None
        key = leaf.owner
        assert key is not None
        held = self._held.get(key)
        if held is not None and held.kind in (KIND_VC, KIND_PIN) and leaf.tag is not None:
            j.add(leaf.tag, "gused", -1)
        j.set(leaf, "owner", None)
        if leaf.tag is None:
            j.add(node, "shfree", 1)
        c: Cell | None = leaf
        while c is not None:
            j.add(c, "used", -1)
            c = c.parent
        if node.healthy:
            j.add(self, "free_leaves", 1)
            if node.used == 0:
                j.add(self, "whole_free_leaves", node.size)

    def bind(self, job: Job, mode: Mode, fit: Fit) -> None:
        """Commit ``fit``; its victims must already have been released."""
        if not isinstance(fit, CellFit):
            refit = self.fit(job, self._pods_named(job, fit), mode, preempt=False)
            if not isinstance(refit, CellFit) or refit.pods != fit.pods:
                raise BindError(f"{job.key}: stale fit for {self._cluster}; ask fit() again")
            fit = refit
        self.j.begin()
        try:
            self._bind(job, mode, fit)
        except BaseException:
            self.j.rollback()
            raise
        self.j.commit()
        self._version += 1

    def _bind(self, job: Job, mode: Mode, fit: CellFit) -> None:
        kind, bindings = fit.kind, fit.bindings
        for victim in fit.victims:
            if victim in self._held:
                raise BindError(f"{job.key}: victim {victim} has not been released")
        held = self._held.get(job.key)
        vc = job.queue if kind in (KIND_VC, KIND_PIN) else None
        if held is None:
            info = RunningInfo(job.key, job.queue, job.priority, mode, job.preemptible, job.seq)
            held = _Held(info, kind, vc)
            self.j.setitem(self._held, job.key, held)
        for cid in bindings:
            cell = self.topo.cells[cid]
            chain = cell.chain
            before = self.alloc.shortage(chain)
            if vc is None or self.alloc.vc_owed[vc][chain][cell.level] <= 0:
                raise BindError(f"{job.key}: VC {vc} is owed no {cell.ctype.name} cell")
            if self.alloc.free_root_of(cell) is None:
                raise BindError(f"{job.key}: cell {cell.address} is no longer free")
            self.alloc.bind_vc(vc, cell)
            if not self.alloc.no_worse(chain, before):
                raise BindError(f"{job.key}: binding {cell.address} would break a VC guarantee")
        by_pod = {p.name: p for p in job.pods}
        # Shared pool: shortage per chain before the takes (checked once, after them).
        shared_before: dict[str, list[int]] = {}
        for placement in fit.pods:
            pod = by_pod.get(placement.pod)
            if pod is None:
                raise BindError(f"{job.key}: unknown pod {placement.pod}")
            if placement.pod in held.pods:
                raise BindError(f"{job.key}: pod {placement.pod} is already placed")
            leaves: list[Cell] = []
            seen: set[Cell] = set()
            for index in placement.gpus:
                leaf = self._leaf_for(placement.node, index, kind, held, job)
                self._check_leaf(job, held, leaf)
                if leaf in seen:
                    raise BindError(
                        f"{job.key}: GPU {leaf.leaf_index} of {leaf.node} is held by {job.key}"
                    )
                seen.add(leaf)
                leaves.append(leaf)
            if kind == KIND_SHARED and leaves:
                self._take_shared(job.key, held, leaves, shared_before)
            self._own_many(leaves, job.key, held)
            self.j.setitem(held.pods, placement.pod, placement)
            self.j.setitem(held.leaves, placement.pod, leaves)
            self.j.setitem(held.requests, placement.pod, pod.request)
            self.j.set(self, "_allocated", self._allocated + pod.request)
        for chain, before in shared_before.items():
            if not self.alloc.no_worse(chain, before):
                raise BindError(f"{job.key}: shared cells in chain {chain} are owed to a VC")

    def _take_shared(
        self, key: str, held: _Held, leaves: list[Cell], before: dict[str, list[int]]
    ) -> None:
        """Reserve one pod's (unreserved) leaves for ``key``, whole cells at a time.

        The leaves are covered by their maximal wholly chosen cells, taken in the
        order of their first leaf: the free lists end up exactly as with one take per
        leaf (same free roots, pushed in the same order).  The caller compares the
        shortage after all takes with ``before``; that is the same answer as checking
        after every take, because one take changes the shortage vector only by raising
        the highest level it changes (so "no level grew at any step" holds iff the
        vector is unchanged at the end, iff no level grew overall).
        """
        alloc = self.alloc
        chain = leaves[0].chain
        if chain not in before:
            before[chain] = alloc.shortage(chain)
        chosen = {leaf.id for leaf in leaves}
        covered: set[int] = set()
        for leaf in leaves:
            if leaf.id in covered:
                continue
            cell = leaf
            parent = cell.parent
            while parent is not None and all(c.id in chosen for c in parent.leaves):
                cell = parent
                parent = cell.parent
            res = Reservation(alloc_mod.SHARED, cell, job=key)
            alloc.take(cell, res)
            held.shared.append(res)
            covered.update(c.id for c in cell.leaves)

    def _leaf_for(self, node: str, index: int, kind: str, held: _Held, job: Job) -> Cell:
        leaf = self.topo.leaf_at.get((node, index))
        if leaf is None:
            raise ValueError(f"{job.key}: no GPU {index} on node {node}")
        return leaf

    def _check_leaf(self, job: Job, held: _Held, leaf: Cell) -> None:
        node = leaf.node_cell
        assert node is not None
        if not node.healthy:
            raise ValueError(f"{job.key}: node {leaf.node} is bad")
        if leaf.owner is not None:
            raise ValueError(
                f"{job.key}: GPU {leaf.leaf_index} of {leaf.node} is held by {leaf.owner}"
            )
        tag = leaf.tag
        if held.kind == KIND_VC:
            ok = tag is not None and tag.kind == alloc_mod.VC and tag.vc == held.vc
        elif held.kind == KIND_PIN:
            ok = tag is not None and tag.kind == alloc_mod.PIN and tag.vc == held.vc
        elif held.kind == KIND_SHARED:
            ok = tag is None
        else:
            ok = tag is None or tag.kind != alloc_mod.BAD
        if not ok:
            raise ValueError(
                f"{job.key}: GPU {leaf.leaf_index} of {leaf.node} is reserved for {tag}"
            )

    def _pods_named(self, job: Job, fit: Fit) -> list[Pod]:
        names = {p.pod for p in fit.pods}
        return [p for p in job.pods if p.name in names]

    def release(self, key: str) -> None:
        if key not in self._held:
            return
        self.j.begin()
        try:
            self._release(key)
        except BaseException:
            self.j.rollback()
            raise
        self.j.commit()
        self._version += 1

    def _release(self, key: str) -> None:
        held = self._held[key]
        touched: dict[int, Reservation] = {}
        for request in held.requests.values():
            self.j.set(self, "_allocated", self._allocated - request)
        for leaves in held.leaves.values():
            for leaf in leaves:
                if held.kind == KIND_VC and leaf.tag is not None:
                    touched[leaf.tag.cell.id] = leaf.tag
                self._unown(leaf)
        for res in held.shared:
            self.alloc.untake(res.cell)
            self._rebad(res.cell)
        for res in touched.values():
            if res.gused == 0 and res.kind == alloc_mod.VC:
                self.alloc.unbind_vc(res)
                self._rebad(res.cell)
        self.j.delitem(self._held, key)

    def _rebad(self, cell: Cell) -> None:
        nodes = cell.node_cells or ([cell.node_cell] if cell.node_cell else [])
        for node in nodes:
            if not node.healthy:
                self.alloc.reserve_bad(node)

    def set_node_health(self, node: str, healthy: bool) -> list[str]:
        """Mark ``node`` bad or healthy; returns keys of jobs with pods on a node gone bad."""
        cells = self.topo.nodes.get(node)
        if cells is None:
            raise KeyError(f"no node {node} in cluster {self._cluster}")
        affected: set[str] = set()
        self.j.begin()
        for cell in cells:
            if cell.healthy == healthy:
                continue
            unowned = cell.size - cell.used
            sign = 1 if healthy else -1
            self.j.add(self, "free_leaves", sign * unowned)
            if cell.used == 0:
                self.j.add(self, "whole_free_leaves", sign * cell.size)
            self.j.set(cell, "healthy", healthy)
            if healthy:
                self.alloc.release_bad(cell)
            else:
                self.alloc.reserve_bad(cell)
                affected.update(leaf.owner for leaf in cell.leaves if leaf.owner is not None)
        self.j.commit()
        cap = self._node_caps.get(node)
        if healthy:
            if node in self._bad and cap is not None:
                self._capacity = self._capacity + cap
            self._bad.discard(node)
        else:
            if node not in self._bad and cap is not None:
                self._capacity = self._capacity - cap
            self._bad.add(node)
        self._version += 1
        return sorted(affected)

    # -- invariants -----------------------------------------------------------------------

    def check_invariants(self) -> None:
        self.alloc.check()
        capacity = Resources()
        for name, cap in self._node_caps.items():
            if name not in self._bad:
                capacity = capacity + cap
        assert self._capacity == capacity, (self._capacity, capacity)
        allocated = Resources()
        for held in self._held.values():
            for request in held.requests.values():
                allocated = allocated + request
        assert self._allocated == allocated, (self._allocated, allocated)
        owners: dict[int, str] = {}
        for key, held in self._held.items():
            assert held.info.key == key
            assert set(held.pods) == set(held.leaves) == set(held.requests)
            for leaves in held.leaves.values():
                for leaf in leaves:
                    assert leaf.id not in owners, f"{leaf} owned twice"
                    owners[leaf.id] = key
                    assert leaf.owner == key, f"{leaf} owner {leaf.owner} != {key}"
                    tag = leaf.tag
                    if held.kind == KIND_VC:
                        assert tag is not None and tag.kind == alloc_mod.VC and tag.vc == held.vc
                    elif held.kind == KIND_PIN:
                        assert tag is not None and tag.kind == alloc_mod.PIN and tag.vc == held.vc
                    elif held.kind == KIND_SHARED:
                        assert tag is not None and tag.kind == alloc_mod.SHARED and tag.job == key
        gused: dict[int, int] = {}
        free = whole = 0
        for cell in reversed(self.topo.cells):
            if not cell.children:
                assert (cell.owner is not None) == (cell.id in owners), f"{cell} stray owner"
                assert cell.used == (1 if cell.owner else 0)
                if cell.owner is not None and cell.tag is not None:
                    held = self._held[cell.owner]
                    if held.kind in (KIND_VC, KIND_PIN):
                        gused[id(cell.tag)] = gused.get(id(cell.tag), 0) + 1
            else:
                assert cell.used == sum(c.used for c in cell.children), f"{cell} used count"
            if cell.is_node:
                shfree = sum(1 for x in cell.leaves if x.tag is None and x.owner is None)
                assert cell.shfree == shfree, f"{cell} shfree {cell.shfree} != {shfree}"
            if cell.is_node and cell.healthy:
                free += cell.size - cell.used
                if cell.used == 0:
                    whole += cell.size
        assert free == self.free_leaves, (free, self.free_leaves)
        assert whole == self.whole_free_leaves, (whole, self.whole_free_leaves)
        for bound in self.alloc.vc_bound.values():
            for res in bound.values():
                assert res.gused == gused.get(id(res), 0), f"{res} gused"
                assert res.gused > 0, f"{res} bound but unused"
        for res in self.alloc.pins.values():
            assert res.gused == gused.get(id(res), 0), f"{res} gused"
        if not self._bad:
            for chain in self.topo.chain_types:
                assert self.alloc.deficit(chain) == 0, f"VC guarantee broken in chain {chain}"


def _ignore(_entry: tuple[object, ...]) -> None:
    """Stands in for the journal's ``log.extend`` outside a transaction."""


def _bound_key(entry: tuple[int, tuple[int, ...], Cell]) -> tuple[int, tuple[int, ...]]:
    return entry[0], entry[1]


def _cell_id(cell: Cell) -> int:
    return cell.id


def fresh_cell(choice: _Choice, level: int) -> Cell:
    """The cell of ``level`` that holds the choice's leaves (a fresh VC binding)."""
    for ls in choice.leaves.values():
        for leaf in ls:
            c: Cell | None = leaf
            while c is not None and c.level < level:
                c = c.parent
            assert c is not None
            return c
    raise AssertionError("fresh binding without leaves")


def leaf_cells_needed(request: Mapping[str, int], sku: object | None) -> int | None:
    """Leaf cells a pod needs: its GPUs, or with a skuType the max ratio over gpu/cpu/memory."""
    gpus = request.get(resources.GPU, 0)
    if sku is None:
        return gpus
    from fleet.core.cells.spec import SkuType

    assert isinstance(sku, SkuType)
    need = 0
    for amount, per in (
        (gpus, sku.gpu),
        (request.get(resources.CPU, 0), sku.cpu),
        (request.get(resources.MEMORY, 0), sku.memory),
    ):
        if amount <= 0:
            continue
        if per <= 0:
            if amount > 0 and per == 0 and (amount is gpus):
                return None
            continue
        need = max(need, math.ceil(amount / per))
    return need
