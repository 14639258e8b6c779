"""The cell placer's reference searches: what every counted shortcut must answer.

Theory of operation: production (:mod:`fleet.core.cells.packing`,
:mod:`~fleet.core.cells.fitting`, :mod:`~fleet.core.cells.vc_search`,
:mod:`~fleet.core.cells.shared_search`) answers a question without victims or
released jobs from counters: leaf masks and a memoized in-node choice
(``pack_counted``, ``spread_counted``), containers skipped by their unowned
leaves and those of the leaving jobs, bound VC cells skipped by a lower bound
on their key, the opportunistic room and the shared pool's settled ceiling
counted before any search, and a fresh VC binding's safety counted without
binding (ADR 0027, ADR 0033).  This module is the same search without any of
those shortcuts: every container packed leaf by leaf (:func:`pack` reads the
usable leaves of every node), every bound cell asked, a spread asks every
container for every pod, and a fresh binding's safety is checked by binding
for real in an undo scope.  The equivalence tests
(``tests/cells/test_counted_search.py``) ask production and this oracle the
same questions on the same state and want identical answers.  The pieces
that have one implementation (``usable``, ``in_node``, ``across``, the
answer built from a placement, the shared pool's safety check) are
production's own.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from fleet.core.cells import (
    allocator,
    demands,
    fitting,
    ownership,
    packing,
    shared_search,
    vc_search,
    victims,
)
from fleet.core.cells.fitting import Found
from fleet.core.cells.packing import Choice
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.state import (
    KIND_OPP,
    KIND_PIN,
    KIND_SHARED,
    KIND_VC,
    CellFit,
    HoldKind,
    PlacerState,
)
from fleet.core.cells.topology import Cell, Reservation
from fleet.core.cells.victims import Question
from fleet.core.jobs import Job, Mode, Pod
from fleet.core.placement import Fit, NoFit


def fit(
    placer: CellPlacer,
    job: Job,
    pods: Sequence[Pod],
    mode: Mode,
    *,
    preempt: bool = False,
    released: frozenset[str] = frozenset(),
) -> Fit | NoFit:
    """:meth:`CellPlacer.fit` by the reference searches (changes no state)."""
    state = placer.state
    state.j.begin()
    try:
        return _fit(state, job, pods, mode, preempt, released)
    finally:
        state.j.rollback()


def _fit(
    state: PlacerState,
    job: Job,
    pods: Sequence[Pod],
    mode: Mode,
    preempt: bool,
    released: frozenset[str],
) -> Fit | NoFit:
    """Where ``pods`` of ``job`` go (inside an open journal transaction the caller undoes)."""
    cluster = state.cluster
    kind, vc, why = fitting.kind_of(state, job, mode)
    if why is not None:
        return NoFit(cluster, why)
    leaf_types = demands.leaf_types(state, job)
    if not leaf_types:
        return NoFit(cluster, f"no leaf cells of type {job.gpu_sku} in {cluster}")
    if (
        kind == KIND_SHARED
        and not state.held.get(job.key)
        and _no_shared_room(state, pods, leaf_types)
    ):
        # Answered from the counters: no search, no victims asked for.
        return NoFit(cluster, fitting.why_not(state, job, kind, vc, pods, preempt))
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
                fitted = fitting.answer(state, job, pods, mode, (zero, kind, []), question)
                if fitted is None:
                    return NoFit(cluster, f"no healthy node in {cluster} for pods needing no cells")
                return fitted
            for chain in state.topo.leaf_chains[leaf_type]:
                found = _search(state, job, kind, vc, chain, needs, question)
                if found is None:
                    continue
                fitted = fitting.answer(state, job, pods, mode, found, question)
                if fitted is None:
                    # ``bind`` would refuse this plan once the leaving jobs have left;
                    # the released jobs leave for sure: search again without them.
                    retry = (kind, vc, chain, needs)
                    fitted = _after_released(state, job, pods, mode, retry, question)
                if fitted is not None:
                    return fitted
                refused.append(chain)
    why = fitting.why_not(state, job, kind, vc, pods, preempt)
    if refused:
        where = ", ".join(refused)
        why += f" (a placement in chain(s) {where} could not be bound once the leaving jobs left)"
    return NoFit(cluster, why)


def _after_released(
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
        placed = _search(state, job, kind, vc, chain, needs, again)
        return None if placed is None else fitting.answer(state, job, pods, mode, placed, again)
    finally:
        state.undo()


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
            if not state.alloc.shared_hopeless(chain, need):
                return False
    return True


def _search(
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
        tops = [(top, packing.ANY) for top in state.topo.chain_tops[chain]]
        choice = best_over(state, tops, needs, question, opportunistic=True)
        return (choice, KIND_OPP, []) if choice else None
    if kind == KIND_PIN:
        res = state.alloc.pins[str(state.pinned_cell_id(job))]
        if res.cell.chain != chain:
            return None
        choice = best_over(state, [(res.cell, res)], needs, question)
        return (choice, KIND_PIN, []) if choice else None
    if kind == KIND_VC and vc is not None:
        found = search_vc(state, vc, chain, needs, question)
        if found is not None:
            return found[0], KIND_VC, found[1]
        if held is not None or not state.vc_spills:
            return None  # an incremental VC job grows inside its VC; HiveD's rule
    if held is not None and held.kind != KIND_SHARED:
        return None
    choice = search_shared(state, chain, needs, question)
    return (choice, KIND_SHARED, []) if choice else None


def best_over(
    state: PlacerState,
    containers: Sequence[tuple[Cell, object]],
    needs: list[tuple[int, int]],
    question: Question,
    opportunistic: bool = False,
) -> Choice | None:
    """The best packing in any one of ``containers`` (cell, want), else spread over them."""
    best: Choice | None = None
    # Without victims or released jobs a cell with fewer unowned leaves than the
    # gang is rejected by ``pack``'s first counter: not asked at all.
    counted = not question.preempt and not question.released
    need = sum(k for _, k in needs)
    for cell, want in containers:
        if need and counted and cell.size - cell.used < need:
            continue
        choice = pack(state, cell, want, needs, question, opportunistic)
        if choice is not None and (
            best is None or (choice.level, choice.key) < (best.level, best.key)
        ):
            best = choice
    if best is None and len(needs) > 1:
        best = spread(state, list(containers), needs, question, opportunistic)
    return best


def spread(
    state: PlacerState,
    containers: list[tuple[Cell, object]],
    needs: list[tuple[int, int]],
    question: Question,
    opportunistic: bool,
) -> Choice | None:
    """Pods one by one over several containers, each asked for every pod."""
    leaves: dict[int, list[Cell]] = {}
    victims: set[str] = set()
    try:
        for idx, k in needs:
            best: Choice | None = None
            for cell, want in containers:
                choice = pack(state, cell, want, [(idx, k)], question, opportunistic)
                if choice is not None and (best is None or choice.key < best.key):
                    best = choice
            if best is None:
                return None
            leaves[idx] = best.leaves[idx]
            victims |= best.victims
            question.taken.update(leaf.id for leaf in best.leaves[idx])
        return Choice(leaves, (len(victims),), victims)
    finally:
        for ls in leaves.values():
            for leaf in ls:
                question.taken.discard(leaf.id)


def pack(
    state: PlacerState,
    root: Cell,
    want: object,
    needs: list[tuple[int, int]],
    question: Question,
    opportunistic: bool,
) -> Choice | None:
    """The best placement of ``needs`` under ``root`` using leaves ``want`` allows."""
    need = sum(k for _, k in needs)
    if need == 0:
        return packing.zero_choice(idx for idx, _ in needs)
    if root.node_cell is not None and not root.node_cell.healthy:
        return None
    if not question.preempt and not question.released:
        # Upper bounds from the counters: unowned leaves, and for the shared pool
        # unreserved ones (``unres`` may overcount inside a reserved root; still a bound).
        room = root.size - root.used
        if want is None and root.unres < room:
            room = root.unres
        if room < need:
            return None
    info, total = packing.usable(state, root, want, question)
    if total < need:
        return None
    best: Choice | None = None
    # Inside one node (or one sub-node root).  Nodes come in id order, so a
    # placement at the lowest possible level with nothing to spare is final.
    floor = demands.lowest_level_in(state, root.chain, need)
    for node, free, vict, reserved in info.values():
        if len(free) + len(vict) < need:
            continue
        placed = packing.in_node(state, node, needs, free, vict)
        if placed is None:
            continue
        leaves, level, nvict = placed
        victims = {leaf.owner for ls in leaves.values() for leaf in ls if leaf in vict}
        pref = reserved if opportunistic else 0
        key = (level, len(victims), nvict, pref, len(free) + len(vict) - need, node.id)
        if best is None or key < best.key:
            best = Choice(leaves, key, {v for v in victims if v is not None})
            if key[:5] == (floor, 0, 0, 0, 0):
                break
    if best is not None:
        best.key = best.key[1:]
        return best
    if root.node_cells == [] or root.is_node:
        return None
    # Across nodes: the lowest cell above node level whose nodes hold the gang.
    node_level = state.topo.node_level[root.chain]
    for level in range(node_level + 1, root.level + 1):
        for cell in packing.cells_at(state, root, level):
            nodes = [info[n.id] for n in cell.node_cells if n.id in info]
            if sum(len(f) + len(v) for _, f, v, _ in nodes) < need:
                continue
            placed_multi = packing.across(state, nodes, needs, opportunistic)
            if placed_multi is None:
                continue
            leaves, nvict, pref = placed_multi
            victims = {
                leaf.owner
                for ls in leaves.values()
                for leaf in ls
                if leaf.owner and leaf.owner not in question.released
            }
            mkey: tuple[int, ...] = (len(victims), nvict, pref, cell.id)
            if best is None or mkey < best.key:
                best = Choice(leaves, mkey, {v for v in victims if v is not None})
        if best is not None:
            return best
    return None


def search_vc(
    state: PlacerState, vc: str, chain: str, needs: list[tuple[int, int]], question: Question
) -> tuple[Choice, list[Cell]] | None:
    """The best placement for VC ``vc`` in ``chain``: (choice, cells to bind to ``vc``)."""
    alloc = state.alloc
    total = sum(k for _, k in needs)
    owed = alloc.vc_owed[vc][chain]
    weights = alloc.weight[chain]
    counted = not question.preempt and not question.released
    if counted:
        # Without victims only cells with unowned leaves can take pods: the open
        # ones (a VC may hold a thousand full cells), and of those the ones with
        # room for the gang (:func:`packing.pack` answers None for the others).
        opened = alloc.vc_open[vc][chain]
        # Counters only: unowned leaves of the bound cells plus what the owed cells
        # could still add (bounded by the chain's unreserved leaves).
        fresh_room = sum(n * w for n, w in zip(owed, weights, strict=True))
        room = 0
        bound = []
        for r in opened.values():
            unowned = r.cell.size - r.cell.used
            room += unowned
            if unowned >= total:
                bound.append(r)
        room += min(fresh_room, alloc.unres_total[chain][0])
        if room < total:
            return None
    else:
        bound = [r for r in alloc.vc_bound[vc].values() if r.cell.chain == chain]
    best: tuple[tuple[int, ...], Choice, list[Cell]] | None = None
    # Every bound cell, in id order.
    for res in sorted(bound, key=vc_search._cell_id):
        choice = pack(state, res.cell, res, needs, question, False)
        if choice is not None:
            key = (choice.level, 0, *choice.key)
            if best is None or key < best[0]:
                best = (key, choice, [])
    for level in range(1, len(owed)):
        if owed[level] <= 0 or weights[level] < total:
            continue
        if best is not None and best[1].level <= level:
            break
        found = fresh(state, vc, chain, level, needs, question)
        if found is not None:
            key = (found.level, 1, *found.key)
            if best is None or key < best[0]:
                best = (key, found, [vc_search.fresh_cell(found, level)])
    if best is not None:
        return best[1], best[2]
    if (
        len(needs) <= 1
        and not any(owed)
        and not any(r.cell.chain == chain for r in alloc.vc_bound[vc].values())
    ):
        return None
    return spread_vc(state, vc, chain, needs, question)


def fresh(
    state: PlacerState,
    vc: str,
    chain: str,
    level: int,
    needs: list[tuple[int, int]],
    question: Question,
) -> Choice | None:
    """The first safe free cell of ``level`` (buddy order) that holds the gang."""
    alloc = state.alloc
    before = alloc.shortage(chain)
    tried = 0
    for cell in alloc.candidates(chain, level):
        choice = pack(state, cell, None, needs, question, False)
        if choice is None:
            tried += 1
            if tried > vc_search.FRESH_TRIES:
                return None
            continue
        # Safety: binding must not break any other VC's guarantee (bound for real).
        state.mark()
        alloc.bind_vc(vc, cell)
        safe = alloc.no_worse(chain, before)
        state.undo()
        if safe:
            return choice
    return None


def spread_vc(
    state: PlacerState, vc: str, chain: str, needs: list[tuple[int, int]], question: Question
) -> tuple[Choice, list[Cell]] | None:
    """Spread pods over several of the VC's cells, binding owed cells as needed."""
    alloc = state.alloc
    leaves: dict[int, list[Cell]] = {}
    victims: set[str] = set()
    new_bound: list[Cell] = []
    used_containers: list[Reservation] = []
    # Leaves picked so far per bound cell: without victims or released jobs a cell
    # whose unowned leaves minus the picked ones cannot hold a pod is skipped.
    picked: dict[int, int] = {}
    counted = not question.preempt and not question.released
    state.mark()
    try:
        for idx, k in needs:
            if k == 0:
                leaves[idx] = []
                continue
            placed: Choice | None = None
            # Without victims a full cell cannot take a pod: the open ones suffice.
            candidates = (
                alloc.vc_open[vc][chain].values()
                if counted
                else (r for r in alloc.vc_bound[vc].values() if r.cell.chain == chain)
            )
            bound = sorted(candidates, key=lambda r: (r not in used_containers, r.cell.id))
            for res in bound:
                cell = res.cell
                if counted and cell.size - cell.used - picked.get(cell.id, 0) < k:
                    continue
                placed = pack(state, cell, res, [(idx, k)], question, False)
                if placed is not None:
                    if res not in used_containers:
                        used_containers.append(res)
                    break
            if placed is None:
                owed = alloc.vc_owed[vc][chain]
                for level in range(1, len(owed)):
                    if owed[level] <= 0 or alloc.weight[chain][level] < k:
                        continue
                    placed = fresh(state, vc, chain, level, [(idx, k)], question)
                    if placed is not None:
                        cell = vc_search.fresh_cell(placed, level)
                        res = alloc.bind_vc(vc, cell)
                        new_bound.append(cell)
                        used_containers.append(res)
                        break
            if placed is None:
                return None
            leaves[idx] = placed.leaves[idx]
            victims |= placed.victims
            question.taken.update(leaf.id for leaf in placed.leaves[idx])
            for leaf in placed.leaves[idx]:
                tag = leaf.tag
                if tag is not None:
                    picked[tag.cell.id] = picked.get(tag.cell.id, 0) + 1
        choice = Choice(leaves, (len(victims), len(new_bound)), victims)
        return choice, new_bound
    finally:
        for ls in leaves.values():
            for leaf in ls:
                question.taken.discard(leaf.id)
        state.undo()


def search_shared(
    state: PlacerState, chain: str, needs: list[tuple[int, int]], question: Question
) -> Choice | None:
    """Unreserved leaves, taken only if no VC's owed cells are put at risk.

    Candidates are tried best first ((level, key) order, at most 8, the first
    safe one wins), generated lazily: tops are packed in id order only while
    their lower bound (the lowest level whose cells hold ``need`` leaves, no
    victims, ids at least the top's) could still beat the best packed one.
    Without victims or released jobs only tops with unreserved leaves count.
    """
    alloc = state.alloc
    need = sum(k for _, k in needs)
    if alloc.shared_hopeless(chain, need):
        return None  # no safe placement, whoever leaves (the VCs are owed the rest)
    tops: list[Cell]
    if question.preempt or question.released:
        # Victims' shared leaves may sit in tops with no unreserved leaf left.
        tops = state.topo.chain_tops[chain]
    else:
        if alloc.unres_total[chain][0] < need:
            return None
        tops = sorted(alloc.open_tops[chain].values(), key=shared_search._cell_id)
    low = demands.lowest_level_in(state, chain, need)
    node_level = state.topo.node_level[chain]
    across = low > node_level
    order: list[shared_search.Bound]
    if across or question.preempt or question.released or state.suggested is not None:
        # Across nodes the node counters give no tighter bound than the level.
        order = [(low, (0, 0, 0, top.id) if across else (0, 0, 0, 0, top.id), top) for top in tops]
    else:
        order = shared_search.bounds(tops, need, low, node_level)
    before = alloc.shortage(chain)
    heap: list[tuple[int, tuple[int, ...], int, Choice]] = []
    seq = 0
    tried = 0
    i = 0
    while tried < shared_search.TRIES:
        if i < len(order):
            level_bound, bound, top = order[i]
            if not heap or (heap[0][0], heap[0][1]) >= (level_bound, bound):
                i += 1
                choice = pack(state, top, None, needs, question, False)
                if choice is not None:
                    heapq.heappush(heap, (choice.level, choice.key, seq, choice))
                    seq += 1
                continue
        if not heap:
            if seq or len(needs) <= 1:
                return None
            spreadout = spread(state, [(t, None) for t in tops], needs, question, False)
            if spreadout is None:
                return None
            heap.append((spreadout.level, spreadout.key, seq, spreadout))
            seq += 1
        choice = heapq.heappop(heap)[3]
        tried += 1
        if victims.nobody_leaves(state, choice.victims, question):
            # Nothing leaves first: the takes' effect on the free lists is arithmetic.
            leaves = [leaf for ls in choice.leaves.values() for leaf in ls]
            delta = alloc.take_delta(chain, leaves)
            if delta is not None:
                after = alloc.shortage(chain, delta)
                if all(a <= b for a, b in zip(after, before, strict=True)):
                    return choice
                continue
        state.mark()
        victims.make_leave(state, choice.victims, question)
        # ``bind`` checks the takes against the shortage once the jobs have left:
        # leaving may free cells that cover owed ones (a shortage from bad nodes),
        # and those must not be taken.
        left = alloc.shortage(chain)
        for ls in choice.leaves.values():
            for leaf in ls:
                alloc.take(leaf, Reservation(allocator.SHARED, leaf, job=question.job))
        safe = alloc.no_worse(chain, left)
        state.undo()
        if safe:
            return choice
    return None
