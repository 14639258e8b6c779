"""Answering ``fit``: how the job is held, which search, and the answer it gives.

Theory of operation: a question first settles the job's *kind* — a job already
held keeps its own; an opportunistic or borrowed job (or a negative priority)
may use any unowned leaf; a guaranteed job with a pinned cell uses that cell;
one whose queue is a VC here uses the VC (then, if the VC cannot hold it, the
shared pool); any other guaranteed job uses the shared pool.  Leaf types and
their chains are tried in order (a gang stays within one chain), first in a
pass without victims, then — if preemption is allowed and there are jobs the
rules let it preempt — in a pass with them; the first placement found wins.
Pods needing no leaf cells (for the leaf type tried; with or without
``skuTypes``) take none and go next to the gang's first placed pod, the job's
other pods or the first healthy node (none: ``NoFit``).  The answer is a
:class:`CellFit`: the pods' nodes and GPU indices, the level of the lowest
common cell, the fragmentation left behind and the VC cells ``bind`` must
bind.  When nobody leaves, the searches have checked the plan against the
current state and the fragmentation is counter arithmetic.  When victims or
released jobs leave, leaving can unbind VC cells, free shared reservations and
re-reserve bad nodes, which the searches (run before anyone leaves) do not
see: the jobs leave inside the query's journal and the plan is committed
exactly as ``bind`` will commit it (re-binding the job's own VC cells that the
leaving unbound); a plan ``bind`` would refuse is dropped — with released jobs
the chain is searched again once they have left — so ``fit`` never answers a
plan that ``bind`` refuses right after the victims and released jobs left.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from fleet.core import charges, resources, wording
from fleet.core.cells import (
    allocator,
    binding,
    demands,
    health,
    ownership,
    packing,
    shared_search,
    vc_search,
    victims,
)
from fleet.core.cells.packing import Choice
from fleet.core.cells.state import (
    KIND_OPP,
    KIND_PIN,
    KIND_SHARED,
    KIND_VC,
    CellFit,
    HoldKind,
    PlacerState,
)
from fleet.core.cells.topology import Cell
from fleet.core.cells.victims import Question
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import BindError, Fit, NoFit, PodPlacement

#: What a search found: the placement, the kind it is held as, VC cells to bind.
Found = tuple[Choice, HoldKind, list[Cell]]


def fit(
    state: PlacerState,
    job: Job,
    pods: Sequence[Pod],
    mode: Mode,
    preempt: bool,
    released: frozenset[str],
) -> Fit | NoFit:
    """Where ``pods`` of ``job`` go (inside an open journal transaction the caller undoes)."""
    cluster = state.cluster
    kind, vc, why = kind_of(state, job, mode)
    if why is not None:
        return NoFit(cluster, why)
    leaf_types = demands.leaf_types(state, job)
    if not leaf_types:
        types = " or ".join(job.gpu_types) or str(None)  # (the text it always was)
        return NoFit(cluster, f"no leaf cells of type {types} in {cluster}")
    if (
        kind == KIND_SHARED
        and not state.held.get(job.key)
        and _no_shared_room(state, pods, leaf_types)
    ):
        # Answered from the counters: no search, no victims asked for.
        return NoFit(cluster, why_not(state, job, kind, vc, pods, preempt))
    victims_ok: frozenset[str] = frozenset()
    if preempt:
        victims_ok = victims.allowed(state, job, mode, released)
    refused: list[str] = []
    passes: list[frozenset[str]] = [frozenset(), *([victims_ok] if victims_ok else [])]
    for ok in passes:
        question = Question(job.key, released, ok)
        for leaf_type in leaf_types:
            needs = demands.demands(state, pods, leaf_type)
            if needs is None:
                continue  # a pod does not fit a leaf cell of this type
            if all(k == 0 for _, k in needs):
                # Nothing to allocate: pods go next to the job (or on a healthy node).
                zero = packing.zero_choice(range(len(pods)))
                fitted = answer(state, job, pods, mode, (zero, kind, []), question)
                if fitted is None:
                    return NoFit(cluster, f"no healthy node in {cluster} for pods needing no cells")
                return fitted
            for chain in state.topo.leaf_chains[leaf_type]:
                found = search(state, job, kind, vc, chain, needs, question)
                if found is None:
                    continue
                fitted = answer(state, job, pods, mode, found, question)
                if fitted is None:
                    # ``bind`` would refuse this plan once the leaving jobs have left;
                    # the released jobs leave for sure: search again without them.
                    retry = (kind, vc, chain, needs)
                    fitted = after_released(state, job, pods, mode, retry, question)
                if fitted is not None:
                    return fitted
                refused.append(chain)
    why = why_not(state, job, kind, vc, pods, preempt)
    if refused:
        where = ", ".join(refused)
        why += f" (a placement in chain(s) {where} could not be bound once the leaving jobs left)"
    return NoFit(cluster, why)


def _no_shared_room(state: PlacerState, pods: Sequence[Pod], leaf_types: list[str]) -> bool:
    """Whether no chain's shared pool can ever take the gang while the VCs are safe
    (:meth:`~fleet.core.cells.allocator.Allocator.shared_hopeless`)."""
    for leaf_type in leaf_types:
        needs = demands.demands(state, pods, leaf_type)
        if needs is None:
            continue
        need = sum(k for _, k in needs)
        if need == 0:
            return False
        for chain in state.topo.leaf_chains[leaf_type]:
            if not state.alloc.settled_hopeless(chain, need):
                return False
    return True


def after_released(
    state: PlacerState,
    job: Job,
    pods: Sequence[Pod],
    mode: Mode,
    found: tuple[HoldKind, str | None, str, list[tuple[int, int]]],
    question: Question,
) -> CellFit | None:
    """Search a chain again once the released jobs have left (undone after).

    ``found`` is (kind, VC, chain, demands) of the search whose plan ``bind``
    would refuse.  That search saw the released jobs' leaves as free but not
    what their leaving does to the reservations (VC cells unbound, bad nodes
    re-reserved, shared cells freed); this one searches the state ``bind`` will
    see.  None if no released job is held or nothing fits there either.
    """
    left = victims.leaving(state, question.released)
    if not left:
        return None
    kind, vc, chain, needs = found
    state.mark()
    try:
        for key in left:
            ownership.release(state, key)
        again = Question(job.key, frozenset(), question.victims_ok)
        placed = search(state, job, kind, vc, chain, needs, again)
        return None if placed is None else answer(state, job, pods, mode, placed, again)
    finally:
        state.undo()


def kind_of(state: PlacerState, job: Job, mode: Mode) -> tuple[HoldKind, str | None, str | None]:
    """(kind, VC, reason it cannot be placed at all) for ``job`` asked in ``mode``."""
    pinned = state.pinned_cell_id(job)
    held = state.held.get(job.key)
    if held is not None:
        return held.kind, held.vc, None
    if mode is not Mode.GUARANTEED or job.priority < 0:
        return KIND_OPP, None, None
    if pinned:
        res = state.alloc.pins.get(pinned)
        if res is None or res.vc != job.queue:
            return KIND_PIN, None, f"VC {job.queue} has no pinned cell {pinned}"
        return KIND_PIN, job.queue, None
    if job.queue in state.config.vcs:
        return KIND_VC, job.queue, None
    return KIND_SHARED, None, None


def search(
    state: PlacerState,
    job: Job,
    kind: HoldKind,
    vc: str | None,
    chain: str,
    needs: list[tuple[int, int]],
    question: Question,
) -> Found | None:
    """Find a placement in ``chain``; returns (choice, kind, cells bound to the VC)."""
    held = state.held.get(job.key)
    if kind == KIND_OPP:
        counted = not question.preempt and not question.released
        if counted and not opp_room(state, chain, needs):
            return None
        tops = [(top, packing.ANY) for top in state.topo.chain_tops[chain]]
        choice = packing.best_over(state, tops, needs, question, opportunistic=True)
        return (choice, KIND_OPP, []) if choice else None
    if kind == KIND_PIN:
        res = state.alloc.pins[str(state.pinned_cell_id(job))]
        if res.cell.chain != chain:
            return None
        choice = packing.best_over(state, [(res.cell, res)], needs, question)
        return (choice, KIND_PIN, []) if choice else None
    if kind == KIND_VC and vc is not None:
        found = vc_search.search(state, vc, chain, needs, question)
        if found is not None:
            return found[0], KIND_VC, found[1]
        if held is not None or not state.vc_spills:
            return None  # an incremental VC job grows inside its VC; HiveD's rule
    if held is not None and held.kind != KIND_SHARED:
        return None
    choice = shared_search.search(state, chain, needs, question)
    return (choice, KIND_SHARED, []) if choice else None


def opp_room(state: PlacerState, chain: str, needs: list[tuple[int, int]]) -> bool:
    """Whether the chain's healthy nodes could hold every pod on unowned leaves.

    A node with ``f`` unowned leaves holds at most ``f // k`` pods of ``k`` or
    more leaves, so for every pod size ``k`` the nodes (counted by unowned
    leaves: ``PlacerState.free_hist``) must offer as many places as there are
    pods of at least ``k``: a necessary condition, read from counters.
    """
    hist = state.free_hist[chain]
    top = len(hist)
    sizes = sorted({k for _, k in needs if k > 0}, reverse=True)
    for k in sizes:
        if k >= top:
            return False
        pods = sum(1 for _, n in needs if n >= k)
        places = 0
        for f in range(k, top):
            places += hist[f] * (f // k)
            if places >= pods:
                break
        if places < pods:
            return False
    return True


def answer(
    state: PlacerState,
    job: Job,
    pods: Sequence[Pod],
    mode: Mode,
    found: Found,
    question: Question,
) -> CellFit | None:
    """The :class:`CellFit` for ``found``; None if ``bind`` would refuse its plan.

    When nobody leaves, the searches have already checked the plan against the
    current state.  Otherwise the victims and released jobs leave, which may
    unbind VC cells, free shared reservations and re-reserve bad nodes, and the
    plan is committed exactly as ``bind`` will commit it then (all inside an undo
    scope): a plan ``bind`` would refuse is never answered.
    """
    choice, kind, bindings = found
    placements = placements_of(state, job, pods, choice.leaves)
    if placements is None:
        return None
    if victims.nobody_leaves(state, choice.victims, question):
        # Nothing leaves: the fragmentation after the placement is counter arithmetic.
        return CellFit(
            cluster=state.cluster,
            pods=placements,
            level=max(0, choice.level - 1),
            fragmentation=round(fragmentation_after(state, choice), 6),
            victims=(),
            kind=kind,
            bindings=tuple(c.id for c in bindings),
        )
    # The job's own VC cells holding chosen leaves: a leaving job may unbind them,
    # and then they must be bound again.  (Other kinds bind nothing: a leaf of a VC
    # cell that an opportunistic job uses is simply unreserved once the cell is.)
    before: list[Cell] = []
    if kind == KIND_VC:
        for ls in choice.leaves.values():
            for leaf in ls:
                tag = leaf.tag
                if tag is not None and tag.kind == allocator.VC and tag.cell not in before:
                    before.append(tag.cell)
    state.mark()
    try:
        victims.make_leave(state, choice.victims, question)
        plan = list(bindings)
        for cell in before:
            if cell.res is None and cell not in plan:
                plan.append(cell)
        fit = CellFit(
            cluster=state.cluster,
            pods=placements,
            level=max(0, choice.level - 1),
            fragmentation=0.0,
            victims=tuple(sorted(choice.victims)),
            kind=kind,
            bindings=tuple(c.id for c in plan),
        )
        try:
            binding.commit(state, job, charges.charge_for(job, mode), fit)
        except (BindError, ValueError):
            return None
        return dataclasses.replace(fit, fragmentation=round(state.fragmentation(), 6))
    finally:
        state.undo()


def fragmentation_after(state: PlacerState, choice: Choice) -> float:
    """``fragmentation()`` once ``choice``'s (unowned) leaves are owned."""
    free, whole = state.free_leaves, state.whole_free_leaves
    touched: set[int] = set()
    for ls in choice.leaves.values():
        last = None
        for leaf in ls:
            node = leaf.node_cell
            assert node is not None
            if node.healthy:
                free -= 1
            if node is last:
                continue  # a pod's leaves are in one node: count the node once
            last = node
            if node.healthy and node.used == 0 and node.id not in touched:
                whole -= node.size
            touched.add(node.id)
    return (free - whole) / free if free > 0 else 0.0


def anchor_node(state: PlacerState, job: Job, leaves: Mapping[int, list[Cell]]) -> str | None:
    """Where pods needing no leaf cells go: the node of the gang's first placed pod,
    else of the job's pods already placed, else the first healthy (suggested) node."""
    for ls in leaves.values():
        if ls and ls[0].node is not None:
            return ls[0].node
    held = state.held.get(job.key)
    if held and held.pods:
        return next(iter(held.pods.values())).node
    suggested = state.suggested
    for name, cells in state.topo.nodes.items():
        if suggested is not None and name not in suggested:
            continue
        if all(c.healthy for c in cells):
            return name
    return None


def placements_of(
    state: PlacerState, job: Job, pods: Sequence[Pod], leaves: Mapping[int, list[Cell]]
) -> tuple[PodPlacement, ...] | None:
    """Pods with their node and GPU indices; pods with no leaves go to the anchor node.

    None if some pod needs no leaves and there is no node to put it on.
    """
    anchor: str | None = None
    out: list[PodPlacement] = []
    for i, pod in enumerate(pods):
        ls = leaves.get(i, [])
        if ls:
            node = ls[0].node
            assert node is not None
            out.append(PodPlacement(pod.name, node, tuple([leaf.leaf_index or 0 for leaf in ls])))
        else:
            if anchor is None:
                anchor = anchor_node(state, job, leaves)
                if anchor is None:
                    return None
            out.append(PodPlacement(pod.name, anchor, ()))
    return tuple(out)


def why_not(
    state: PlacerState, job: Job, kind: HoldKind, vc: str | None, pods: Sequence[Pod], preempt: bool
) -> str:
    """The reason of a :class:`NoFit`, for a human."""
    cluster = state.cluster
    gpus = sum(p.gpus for p in pods)
    what = f"{wording.count(len(pods), 'pod')} with {wording.amount(resources.GPU, gpus)}"
    if job.gpu_types:
        what += f" of {' or '.join(job.gpu_types)}"
    tail = "" if preempt else " without preemption"
    if kind == KIND_VC and vc is not None:
        doomed = health.doomed_cells(state).get(vc, 0)
        extra = f"; {doomed} of its cells are doomed by bad nodes" if doomed else ""
        return f"VC {vc} cells and the shared pool of {cluster} cannot hold {what}{tail}{extra}"
    if kind == KIND_PIN:
        return f"pinned cell of VC {vc} in {cluster} cannot hold {what}{tail}"
    if kind == KIND_SHARED:
        return f"shared pool of {cluster} cannot hold {what}{tail}"
    return f"free cells of {cluster} cannot hold {what}{tail}"
