"""Restoring recorded placements: the cell placer rebuilt after a restart, never re-planned.

Theory of operation: the service records, per running job, its mode and each
pod's node and GPU indices — addresses, not cell ids, which depend on the
config's order.  :func:`restore` checks the record (every node, GPU index and
pod exists, the node is healthy, each pod has as many leaf cells as it needs,
all in one chain, and no GPU is recorded twice or held by another job; else
:class:`~fleet.core.placement.RestoreError` and nothing changes), then holds
the job exactly as ``bind`` would have: it builds the :class:`CellFit` that
places these pods on these leaves and commits it with :func:`binding.commit`
(same checks, same counters, same reservations).

*Which kind.*  The record says where a job runs, not how it was held, so the
kind is chosen like ``fit`` does (:func:`ladder`): borrowed and opportunistic
jobs on any unowned leaf; a pinned job in its pinned cell; a guaranteed job of
a queue whose VC has cells in the chains of its leaves in the VC, else (like
an overflowing VC job) in the shared pool; any other guaranteed job in the
shared pool.  In the VC, the VC's owed virtual cells are bound to the physical
cells that contain the recorded leaves (:func:`vc_plan`), as HiveD does when
it maps a pod's bind info back to its virtual cells — leaves already inside a
cell bound to the VC need nothing; otherwise the lowest level at which the VC
is owed a cell and that cell is free, one cell holding all the job's remaining
leaves first, else one per leaf in record order.  HiveD records that level
(the "preassigned cell type") with the pod; Fleet infers it, so for a VC with
cells of several levels in a chain the bound cells may differ from those
before the restart (same guarantee, other cells).

*Tolerate and mark.*  A job that its kinds cannot hold (its VC is owed no such
cell any more, binding would break another VC's guarantee, the shared pool
would, its pinned cell does not contain it) is held on its leaves as an
opportunistic job — preemptible by any guaranteed job — and listed with the
reason in ``state.demoted``, as HiveD lazily preempts a group whose bind info
no longer maps to its VC.

*Order.*  Whether a guaranteed job gets its VC or shared-pool kind depends on
the other jobs (the VC's count, safety), so the outcome is defined as if the
restored jobs had been restored one by one in :attr:`Restored.rank` order
(earlier submission, then higher priority, then key: a VC's cells are bound as
jobs start and stay bound while used, so it is mostly later jobs that overflow
into the shared pool; HiveD's recovery, too, binds in the order pods come back,
roughly creation order): a job restored before
records that rank after it may take what they took.  When it provably cannot
change their outcome — it got its first kind, its VC has cells of one level in
its chains, no VC is short of cells there, and no record after it fell back to
another kind in a way it could change (:func:`commutes`) — it is simply added.
Otherwise the records after it in its chains (and theirs, transitively) are
released, it is held, and they are held again in rank order (:func:`redo`).
Restoring in rank order (:func:`~fleet.core.placement.restore_order`) never
redoes anything and checks nothing more.  Opportunistic, borrowed and
pinned jobs never depend on the others.  No later choice depends on the order
cells were reserved in (the allocator's buddy choice goes by cell id), so the
result is the same placer whatever the restore order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from fleet.core import placement
from fleet.core.cells import allocator, binding, demands, ownership
from fleet.core.cells.state import (
    KIND_OPP,
    KIND_PIN,
    KIND_SHARED,
    KIND_VC,
    CellFit,
    HoldKind,
    PlacerState,
    Restored,
)
from fleet.core.cells.topology import Cell, lowest_common
from fleet.core.charges import Charge
from fleet.core.jobs import Job, Mode
from fleet.core.placement import BindError, PodPlacement, RestoreError


def restore(state: PlacerState, job: Job, charge: Charge, pods: Sequence[PodPlacement]) -> None:
    """Hold ``pods`` of unit ``charge`` where recorded (in an open journal transaction)."""
    mode = charge.mode
    where = f"{state.cluster}: cannot restore {job.key}"
    if job.key in state.held:
        raise RestoreError(f"{where}: it is already held here")
    leaves = recorded_leaves(state, job, pods, where)
    chains = tuple(dict.fromkeys(leaf.chain for leaf in leaves))
    contested = ladder(state, job, mode, chains)[0] in (KIND_VC, KIND_SHARED)
    rec = Restored(job, charge, tuple(pods), chains, contested)
    bound = state.rank_bound
    if not contested or all(chain not in bound or bound[chain] < rec.rank for chain in chains):
        hold(state, rec)  # nothing it could change: no record ranked after it there
        return
    state.mark()
    try:
        hold(state, rec)
        simple = commutes(state, rec)
    except BaseException:
        state.undo()
        raise
    if simple:
        state.keep()
        return
    state.undo()
    redo(state, rec)


def recorded_leaves(
    state: PlacerState, job: Job, pods: Sequence[PodPlacement], where: str
) -> list[Cell]:
    """The leaves the record names, in record order; RestoreError if it names no such thing."""
    topo = state.topo
    config = state.config
    recorded: dict[int, str] = {}
    out: list[Cell] = []
    for pp, pod in placement.recorded_pods(state.cluster, job, pods):
        cells = topo.nodes.get(pp.node)
        if cells is None:
            raise RestoreError(f"{where}: pod {pp.pod} is on node {pp.node}, which is unknown")
        if not all(cell.healthy for cell in cells):
            raise RestoreError(f"{where}: node {pp.node} of pod {pp.pod} is bad")
        leaves: list[Cell] = []
        for index in pp.gpus:
            leaf = topo.leaf_at.get((pp.node, index))
            if leaf is None:
                have = sum(cell.size for cell in cells)
                raise RestoreError(f"{where}: node {pp.node} has no GPU {index} (it has {have})")
            if leaf.id in recorded:
                raise RestoreError(
                    f"{where}: GPU {index} of node {pp.node} is recorded for pods "
                    f"{recorded[leaf.id]} and {pp.pod}"
                )
            if leaf.owner is not None:
                raise RestoreError(
                    f"{where}: GPU {index} of node {pp.node} is held by {leaf.owner}"
                )
            recorded[leaf.id] = pp.pod
            leaves.append(leaf)
        if leaves:
            if any(leaf.chain != leaves[0].chain for leaf in leaves):
                raise RestoreError(
                    f"{where}: the GPUs of pod {pp.pod} lie in different cell chains"
                )
            sku = config.sku_types.get(leaves[0].ctype.name)
            need = demands.leaf_cells_needed(pod.request, sku)
            if need != len(leaves):
                raise RestoreError(
                    f"{where}: pod {pp.pod} needs {need} GPU(s) of type {leaves[0].ctype.name}, "
                    f"the record gives {len(leaves)}"
                )
        elif not any(
            demands.leaf_cells_needed(pod.request, config.sku_types.get(t)) == 0
            for t in config.leaf_types
        ):
            raise RestoreError(f"{where}: pod {pp.pod} needs leaf cells, the record gives none")
        out.extend(leaves)
    return out


def ladder(state: PlacerState, job: Job, mode: Mode, chains: tuple[str, ...]) -> list[HoldKind]:
    """The kinds to try for ``job`` in order, as ``fit`` would choose them."""
    if mode is not Mode.GUARANTEED or job.priority < 0:
        return [KIND_OPP]
    if state.pinned_cell_id(job):
        return [KIND_PIN]
    configured = state.alloc.configured.get(job.queue)
    if configured is not None and all(any(configured[chain]) for chain in chains):
        return [KIND_VC, KIND_SHARED]
    return [KIND_SHARED]


def hold(state: PlacerState, rec: Restored) -> None:
    """Hold ``rec``'s job as the first kind of its ladder that takes it.

    A guaranteed job no kind takes is held as an opportunistic one and marked.
    """
    job = rec.job
    leaves = [state.topo.leaf_at[(pp.node, g)] for pp in rec.pods for g in pp.gpus]
    kinds = ladder(state, job, rec.mode, rec.chains)
    for i, kind in enumerate(kinds):
        plan: list[Cell] = []
        if kind == KIND_VC:
            found = vc_plan(state, job.queue, leaves)
            if found is None:
                continue
            plan = found
        elif kind == KIND_PIN and pin_mismatch(state, job, leaves) is not None:
            continue
        fit = CellFit(state.cluster, rec.pods, kind=kind, bindings=tuple(c.id for c in plan))
        state.mark()
        try:
            binding.commit(state, job, rec.charge, fit)
        except (BindError, ValueError):
            state.undo()
            continue
        except BaseException:
            state.undo()
            raise
        state.keep()
        note(state, rec, preferred=i == 0)
        return
    # Tolerate and mark: on its leaves, as an opportunistic job.  The reason names
    # what was tried, not the state it was tried in (which depends on the order).
    if kinds == [KIND_PIN]:
        why = pin_mismatch(state, job, leaves) or "its pinned cell cannot hold it"
    elif kinds[0] == KIND_VC:
        why = f"neither VC {job.queue} nor the shared pool can hold it where it runs"
    else:
        why = "the shared pool cannot hold it where it runs"
    fit = CellFit(state.cluster, rec.pods, kind=KIND_OPP)
    # The placer's copy of the charge says opportunistic: any guaranteed job may
    # preempt it here (HiveD's lazy preemption); the quota tree keeps the record.
    binding.commit(state, job, dataclasses.replace(rec.charge, mode=Mode.OPPORTUNISTIC), fit)
    state.j.setitem(state.demoted, job.key, why)
    note(state, rec, preferred=False)


def note(state: PlacerState, rec: Restored, preferred: bool) -> None:
    """Keep ``rec`` (and its indexes) for later restores."""
    j = state.j
    key = rec.job.key
    j.set(rec, "preferred", preferred)
    j.setitem(state.restored, key, rec)
    if rec.contested:
        for chain in rec.chains:
            j.setitem(state.restored_in[chain], key, None)
            if not preferred:
                j.setitem(state.fallbacks[chain], key, None)
            if chain not in state.rank_bound or state.rank_bound[chain] < rec.rank:
                j.setitem(state.rank_bound, chain, rec.rank)


def vc_plan(state: PlacerState, vc: str, leaves: list[Cell]) -> list[Cell] | None:
    """Cells to bind to ``vc`` so that every leaf is inside one of its bound cells.

    Leaves already inside a cell bound to ``vc`` need none.  For the others, per
    chain: the lowest level at which ``vc`` is owed a cell whose cell holding all
    remaining leaves is free, else the lowest such level for the first remaining
    leaf, until none remain.  None if some leaf has no such cell.
    """
    alloc = state.alloc
    rest_by_chain: dict[str, list[Cell]] = {}
    for leaf in leaves:
        tag = leaf.tag
        if tag is not None and tag.kind == allocator.VC and tag.vc == vc:
            continue
        rest_by_chain.setdefault(leaf.chain, []).append(leaf)
    plan: list[Cell] = []
    for chain, rest in rest_by_chain.items():
        owed = list(alloc.vc_owed[vc][chain])
        levels = [level for level, n in enumerate(alloc.configured[vc][chain]) if n > 0]
        while rest:
            cell = _choose(state, levels, owed, plan, rest)
            if cell is None:
                return None
            plan.append(cell)
            owed[cell.level] -= 1
            rest = [leaf for leaf in rest if not _contains(cell, leaf)]
    return plan


def _choose(
    state: PlacerState, levels: list[int], owed: list[int], plan: list[Cell], rest: list[Cell]
) -> Cell | None:
    common = lowest_common(rest)
    if common is not None:
        for level in levels:
            if level >= common.level and owed[level] > 0:
                cell = _ancestor(common, level)
                if _free(state, cell, plan):
                    return cell
    for level in levels:
        if owed[level] > 0:
            cell = _ancestor(rest[0], level)
            if _free(state, cell, plan):
                return cell
    return None


def _ancestor(cell: Cell, level: int) -> Cell:
    c = cell
    while c.level < level:
        assert c.parent is not None
        c = c.parent
    return c


def _contains(outer: Cell, cell: Cell) -> bool:
    c: Cell | None = cell
    while c is not None and c.level < outer.level:
        c = c.parent
    return c is outer


def _free(state: PlacerState, cell: Cell, plan: list[Cell]) -> bool:
    """Wholly unreserved, and not overlapping a cell already planned."""
    if state.alloc.free_root_of(cell) is None:
        return False
    return not any(_contains(cell, p) or _contains(p, cell) for p in plan)


def pin_mismatch(state: PlacerState, job: Job, leaves: list[Cell]) -> str | None:
    """Why ``job`` cannot be held in its pinned cell on ``leaves`` (None: it can)."""
    pinned = state.pinned_cell_id(job)
    res = state.alloc.pins.get(str(pinned))
    if res is None or res.vc != job.queue:
        return f"VC {job.queue} has no pinned cell {pinned}"
    for leaf in leaves:
        if leaf.tag is not res:
            return f"GPU {leaf.leaf_index} of node {leaf.node} is outside pinned cell {pinned}"
    return None


def commutes(state: PlacerState, rec: Restored) -> bool:
    """Whether holding ``rec`` after the records ranked after it gives what holding it first gives.

    True when it got its first kind; a VC job's VC has cells of one level in each
    of its chains (so the cells it binds are those holding its leaves, whatever
    is bound already); no VC is short of cells in those chains (then every
    subset of what is held now keeps every VC safe, so each record after it
    passes the same checks when ``rec`` comes first, and ``rec`` passes them
    before those records); and no record after it that fell back to another
    kind belongs to a VC with cells of several levels in those chains.  For the
    others, falling back is monotone: a VC job of a one-level VC fails when one
    of the cells holding its leaves cannot be bound, which more reservations
    never change (``rec`` cannot bind a cell holding their leaves either: the
    cell was not bindable for them, and reservations only grow), and the
    shared pool likewise.  A VC with several levels chooses among nested cells
    (:func:`vc_plan`), where one more reservation can change the choice.
    """
    if not rec.preferred:
        return False
    alloc = state.alloc
    held = state.held[rec.job.key]
    for chain in rec.chains:
        if held.kind == KIND_VC and _levels(state, rec.job.queue, chain) > 1:
            return False
        if any(alloc.shortage(chain)):
            return False
        multi = {vc for vc in alloc.configured if _levels(state, vc, chain) > 1}
        if not multi:
            continue
        for key in state.fallbacks[chain]:
            other = state.restored[key]
            if other.rank > rec.rank and other.job.queue in multi:
                return False
    return True


def _levels(state: PlacerState, vc: str, chain: str) -> int:
    """Number of levels at which ``vc`` has virtual cells in ``chain``."""
    return sum(1 for n in state.alloc.configured[vc][chain] if n > 0)


def redo(state: PlacerState, rec: Restored) -> None:
    """Release the records ranked after ``rec`` that may depend on it, hold it, hold them again."""
    after = dependents(state, rec)
    for other in reversed(after):
        ownership.release(state, other.job.key)
    hold(state, rec)
    for other in after:
        hold(state, other)


def dependents(state: PlacerState, rec: Restored) -> list[Restored]:
    """Contested records ranked after ``rec`` sharing a chain with it (transitively), by rank."""
    out: dict[str, Restored] = {}
    chains = set(rec.chains)
    todo = list(rec.chains)
    while todo:
        chain = todo.pop()
        for key in state.restored_in[chain]:
            other = state.restored[key]
            if key in out or other.rank < rec.rank:
                continue
            out[key] = other
            for more in other.chains:
                if more not in chains:
                    chains.add(more)
                    todo.append(more)
    return sorted(out.values(), key=_rank)


def _rank(rec: Restored) -> tuple[int, int, str]:
    return rec.rank
