"""Answering ``fit``: how the job is held, which search, and the answer it gives.

Theory of operation: a question first settles the job's *kind* — a job already
held keeps its own; an opportunistic or borrowed job (or a negative priority)
may use any unowned leaf; a guaranteed job with a pinned cell uses that cell;
one whose queue is a VC here uses the VC (then, if the VC cannot hold it, the
shared pool); any other guaranteed job uses the shared pool.  Leaf types and
their chains are tried in order (a gang stays within one chain), first in a
pass without victims, then — if preemption is allowed and there are jobs the
rules let it preempt — in a pass with them; the first placement found wins.
Pods needing no leaf cells (without ``skuTypes``) take none and go next to the
job's other pods.  The answer is a :class:`CellFit`: the pods' nodes and GPU
indices, the level of the lowest common cell, the fragmentation left behind
(counter arithmetic when nobody leaves; otherwise victims and released jobs
leave and the leaves are owned, all inside the query's journal, which the
caller rolls back) and the VC cells ``bind`` must bind, including VC cells a
leaving victim unbinds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from fleet.core.cells import (
    allocator,
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
    PlacerState,
)
from fleet.core.cells.topology import Cell
from fleet.core.cells.victims import Question
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import Fit, NoFit, PodPlacement

#: What a search found: the placement, the kind it is held as, VC cells to bind.
Found = tuple[Choice, str, list[Cell]]


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
        return NoFit(cluster, f"no leaf cells of type {job.gpu_sku} in {cluster}")
    victims_ok: frozenset[str] = frozenset()
    if preempt:
        victims_ok = victims.allowed(state, job, mode, released)
    if (
        all(demands.leaf_cells_needed(p.request, None) == 0 for p in pods)
        and not state.config.sku_types
    ):
        # Nothing to allocate: pods go next to the job (or on the first healthy node).
        zero = packing.zero_choice(range(len(pods)))
        return answer(state, job, pods, (zero, kind, []), Question(job.key, released, frozenset()))
    passes: list[frozenset[str]] = [frozenset(), *([victims_ok] if victims_ok else [])]
    for ok in passes:
        question = Question(job.key, released, ok)
        for leaf_type in leaf_types:
            needs = demands.demands(state, pods, leaf_type)
            if needs is None:
                continue  # a pod does not fit a leaf cell of this type
            for chain in state.topo.leaf_chains[leaf_type]:
                found = search(state, job, kind, vc, chain, needs, question)
                if found is not None:
                    return answer(state, job, pods, found, question)
    return NoFit(cluster, why_not(state, job, kind, vc, pods, preempt))


def kind_of(state: PlacerState, job: Job, mode: Mode) -> tuple[str, str | None, str | None]:
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
    kind: str,
    vc: str | None,
    chain: str,
    needs: list[tuple[int, int]],
    question: Question,
) -> Found | None:
    """Find a placement in ``chain``; returns (choice, kind, cells bound to the VC)."""
    held = state.held.get(job.key)
    if kind == KIND_OPP:
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
        if held is not None:
            return None  # an incremental VC job grows inside its VC
    if held is not None and held.kind != KIND_SHARED:
        return None
    choice = shared_search.search(state, chain, needs, question)
    return (choice, KIND_SHARED, []) if choice else None


def answer(
    state: PlacerState, job: Job, pods: Sequence[Pod], found: Found, question: Question
) -> CellFit:
    """The :class:`CellFit` for ``found`` (may change state: the caller rolls it back)."""
    choice, kind, bindings = found
    placements = placements_of(state, job, pods, choice.leaves)
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
    # Apply the placement (the fit's journal rolls it back): victims and released jobs
    # leave first; a VC cell they leave empty is unbound and must be bound again.
    before = [
        leaf.tag.cell
        for ls in choice.leaves.values()
        for leaf in ls
        if leaf.tag is not None and leaf.tag.kind == allocator.VC
    ]
    victims.make_leave(state, choice.victims, question)
    bindings = list(bindings)
    for cell in before:
        if cell.res is None and cell not in bindings:
            bindings.append(cell)
    # Every chosen leaf was free, a victim's or a released job's: all unowned now.
    leaves = [leaf for ls in choice.leaves.values() for leaf in ls]
    ownership.own_many(state, leaves, job.key, guaranteed=False)
    return CellFit(
        cluster=state.cluster,
        pods=placements,
        level=max(0, choice.level - 1),
        fragmentation=round(state.fragmentation(), 6),
        victims=tuple(sorted(choice.victims)),
        kind=kind,
        bindings=tuple(c.id for c in bindings),
    )


def fragmentation_after(state: PlacerState, choice: Choice) -> float:
    """``fragmentation()`` once ``choice``'s (unowned) leaves are owned."""
    free, whole = state.free_leaves, state.whole_free_leaves
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


def placements_of(
    state: PlacerState, job: Job, pods: Sequence[Pod], leaves: Mapping[int, list[Cell]]
) -> tuple[PodPlacement, ...]:
    """Pods with their node and GPU indices; pods with no leaves go to an anchor node."""
    anchor: str | None = None
    for ls in leaves.values():
        if ls and ls[0].node is not None:
            anchor = ls[0].node
            break
    if anchor is None:
        held = state.held.get(job.key)
        if held and held.pods:
            anchor = next(iter(held.pods.values())).node
        else:
            anchor = next(
                (n for n, cells in state.topo.nodes.items() if all(c.healthy for c in cells)),
                next(iter(state.topo.nodes)),
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


def why_not(
    state: PlacerState, job: Job, kind: str, vc: str | None, pods: Sequence[Pod], preempt: bool
) -> str:
    """The reason of a :class:`NoFit`, for a human."""
    cluster = state.cluster
    gpus = sum(p.gpus for p in pods)
    what = f"{len(pods)} pod(s) / {gpus} GPU(s)"
    if job.gpu_sku:
        what += f" of {job.gpu_sku}"
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
