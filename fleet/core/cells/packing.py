"""Packing a gang's pods onto the leaves under one cell, best placement first.

Theory of operation: a gang is packed under the lowest common cell that can
hold it.  :func:`pack` looks at the usable leaves under a root cell, per node
(:func:`usable`: which leaves the wanted reservation and the
:class:`~fleet.core.cells.victims.Question` let it use, free before victims).
Inside one node pods get leaves by buddy choice (:func:`in_node`: the smallest
sub-node cell with enough usable leaves, fewest victims, best fit); across
nodes by first-fit decreasing over the nodes of the lowest cell above node
level that holds the gang (:func:`across`).  Candidates are ranked by a key
``(level, victim jobs, victim leaves, preference, spare, id)``; the level is
that of the lowest common cell of the chosen leaves (:class:`Choice`).  When
no single container holds a gang, :func:`spread` places pods one by one over
several containers.

*What may be used* is the ``want`` of a container: a :class:`Reservation`
(the leaves tagged with it), ``None`` (unreserved leaves — the shared pool,
plus the shared leaves of victims and released jobs) or :data:`ANY` (any leaf:
opportunistic and borrowed jobs, who prefer nodes with fewer reserved leaves).
Without victims or released jobs, counters (``used``, ``unres``, full nodes)
reject a root before its leaves are read; with them, :func:`best_over` and
:func:`spread` skip a container whose unowned leaves plus the leaves of the
victims and released jobs under it (:func:`leaving_leaves`) are too few for
the pod or the gang, or where no node has that many for its largest pod
Packing changes no state: picked leaves of a spread are only remembered in
``Question.taken``.  The leaf-by-leaf searches that every counted shortcut
here answers like (for questions without victims or released jobs) are the
tests' oracle (``tests/cells/oracle.py``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from fleet.core.cells import allocator, demands, topology
from fleet.core.cells.state import PlacerState
from fleet.core.cells.topology import Cell
from fleet.core.cells.victims import Question
from fleet.core.checks import InvariantError

#: Leaf filter: any leaf (opportunistic) — otherwise ``None`` (unreserved) or a Reservation.
ANY: Final = object()

#: Per node under a root: (node, free leaves, victim leaves, reserved leaves).
NodeLeaves = tuple[Cell, list[Cell], list[Cell], int]


class Choice:
    """A candidate placement: leaves per pod (by demand index), its level and costs."""

    __slots__ = ("key", "leaves", "level", "victims")

    key: tuple[int, ...]

    def __init__(
        self,
        leaves: dict[int, list[Cell]],
        key: tuple[int, ...],
        victims: set[str],
        level: int | None = None,
    ):
        self.leaves = leaves
        self.key = key
        self.victims = victims
        if level is not None:  # known by the caller (the lowest common cell's level)
            self.level = level
            return
        cells = [leaf for ls in leaves.values() for leaf in ls]
        common = topology.lowest_common(cells)
        if common is None:
            self.level = max(c.top.level for c in cells) + 1 if cells else 0
        else:
            self.level = common.level


def zero_choice(indices: Iterable[int]) -> Choice:
    """The placement of pods that need no leaf cells (level 1, no cost)."""
    choice = Choice({idx: [] for idx in indices}, (0,), set())
    choice.level = 1
    return choice


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
    # gang is rejected by ``pack``'s first counter: not asked at all.  With them,
    # ``pack`` can use at most the unowned leaves and those of the victims and
    # the released jobs: a cell where even these are too few is not asked either.
    counted = not question.preempt and not question.released
    need = sum(k for _, k in needs)
    widest = max((k for _, k in needs), default=0)
    leaving: dict[int, int] | None = None
    for cell, want in containers:
        if need:
            room = cell.size - cell.used
            if counted:
                if room < need:
                    continue
            elif room < need or not _node_with(cell, widest, _NOTHING):
                # the unowned leaves alone do not settle it: count the leaving jobs'
                if leaving is None:
                    leaving = leaving_leaves(state, question)
                if room + leaving.get(cell.id, 0) < need or not _node_with(cell, widest, leaving):
                    continue
        choice = pack(state, cell, want, needs, question, opportunistic)
        if choice is not None and (
            best is None or (choice.level, choice.key) < (best.level, best.key)
        ):
            best = choice
    if best is None and len(needs) > 1:
        if countable(state, containers, question):
            best = spread_counted(state, containers, needs, question, opportunistic)
        else:
            best = spread(state, list(containers), needs, question, opportunistic, leaving)
    return best


#: No leaving jobs (the unowned leaves alone).
_NOTHING: Final[dict[int, int]] = {}


def _node_with(cell: Cell, k: int, leaving: dict[int, int]) -> bool:
    """Whether some node under ``cell`` (or ``cell``'s own node) may give one pod ``k``
    leaves: its unowned leaves and those of the leaving jobs (a pod is on one node)."""
    nodes = cell.node_cells or [cell]
    return any(n.size - n.used + leaving.get(n.id, 0) >= k for n in nodes)


def leaving_leaves(state: PlacerState, question: Question) -> dict[int, int]:
    """Cell id -> the leaves under it (the cell's own included) that ``question``'s
    victims and released jobs own: what a search may use besides unowned leaves."""
    out: dict[int, int] = {}
    held = state.held
    for key in question.victims_ok | question.released:  # a count: any order
        unit = held.get(key)
        if unit is None:
            continue
        for leaves in unit.leaves.values():
            for leaf in leaves:
                cell: Cell | None = leaf
                while cell is not None:
                    out[cell.id] = out.get(cell.id, 0) + 1
                    cell = cell.parent
    return out


def countable(
    state: PlacerState, containers: Sequence[tuple[Cell, object]], question: Question
) -> bool:
    """Whether :func:`spread_counted` answers for ``containers`` as :func:`spread` does."""
    if question.preempt or question.released or state.suggested is not None:
        return False
    for root, want in containers:
        if not root.node_cells or not (want is ANY or want is None or want is root.res):
            return False
    return True


def spread_counted(
    state: PlacerState,
    containers: Sequence[tuple[Cell, object]],
    needs: list[tuple[int, int]],
    question: Question,
    opportunistic: bool,
) -> Choice | None:
    """:func:`spread` without victims or released jobs, from the nodes' leaf masks.

    Pod by pod (largest first) each container offers its best node as
    :func:`pack` ranks them (level first) and the pod goes to the offer with the
    smallest key (preference, spare, node id), as in :func:`spread`.  A
    container's offer is remembered until a pod lands in it or the pod size
    changes, so a gang of equal pods looks at each container about once.
    """
    picked = _taken_bits(state, question.taken) if question.taken else {}
    index = {root.id: i for i, (root, _) in enumerate(containers)}
    offers: dict[int, tuple[int, Offer | None]] = {}
    leaves: dict[int, list[Cell]] = {}
    for idx, k in needs:
        if k == 0:
            leaves[idx] = []
            continue
        best: Offer | None = None
        for i, (root, want) in enumerate(containers):
            known = offers.get(i)
            if known is not None and known[0] == k:
                offer = known[1]
            else:
                offer = _offer(state, root, want, k, picked, opportunistic)
                offers[i] = (k, offer)
            if offer is not None and (best is None or offer[0] < best[0]):
                best = offer
        if best is None:
            return None
        _, node, positions = best
        chosen = [node.leaves[p] for p in positions]
        leaves[idx] = chosen
        bits = 0
        for leaf in chosen:
            bits |= leaf.bits
        picked[node.id] = picked.get(node.id, 0) | bits
        up: Cell | None = node
        while up is not None:  # the containers holding the node offer again
            at = index.get(up.id)
            if at is not None:
                offers.pop(at, None)
            up = up.parent
    return Choice(leaves, (0,), set())


#: A container's best node for one pod: (key without level, node, leaf positions).
Offer = tuple[tuple[int, ...], Cell, tuple[int, ...]]


def _offer(
    state: PlacerState,
    root: Cell,
    want: object,
    k: int,
    picked: dict[int, int],
    opportunistic: bool,
) -> Offer | None:
    """The node :func:`pack` picks under ``root`` for one pod of ``k`` leaves."""
    if root.size - root.used < k:
        return None
    floor = demands.lowest_level_in(state, root.chain, k)
    shared = want is None
    ks = (k,)
    best: tuple[int, ...] | None = None
    best_node: Cell | None = None
    best_at: tuple[int, ...] = ()
    for node in root.node_cells:
        if not node.healthy:
            continue
        mask = node.freemask
        if shared:
            mask &= ~node.tagmask
        mask &= ~picked.get(node.id, 0)
        cnt = mask.bit_count()
        if cnt < k:
            continue
        pref = node.tagmask.bit_count() if opportunistic else 0
        spare = cnt - k
        if best is not None and (floor, pref, spare, node.id) >= best:
            continue
        positions, level = in_node_by_mask(state, node, mask, ks)
        key = (level, pref, spare, node.id)
        if best is None or key < best:
            best, best_node, best_at = key, node, positions[0]
            if level == floor and pref == 0 and spare == 0:
                break
    if best is None or best_node is None:
        return None
    return (0, 0, best[1], best[2], best[3]), best_node, best_at


def usable(
    state: PlacerState, root: Cell, want: object, question: Question
) -> tuple[dict[int, NodeLeaves], int]:
    """Per node under ``root``: (node, free leaves, victim leaves, reserved leaves)."""
    out: dict[int, NodeLeaves] = {}
    total = 0
    nodes = root.node_cells or [root]
    taken = question.taken
    released = question.released
    victims_ok = question.victims_ok
    suggested = state.suggested
    if suggested is not None:  # a node restriction (CellPlacer.suggest_nodes): filter once
        nodes = [n for n in nodes if n.node_cell is not None and n.node_cell.node in suggested]
    if root.res is not None and want is root.res and not question.preempt and not released:
        # Inside the wanted reservation every leaf carries it: usable = unowned.
        for node in nodes:
            node_cell = node.node_cell
            if node_cell is None or not node_cell.healthy or node.used == node.size:
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
        leaves = node.leaves
        if node.used == node.size and not question.preempt and not released:
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
                    and tag.kind == allocator.SHARED
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
        return zero_choice(idx for idx, _ in needs)
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
        if (
            state.suggested is None
            and (want is ANY or want is None or want is root.res)
            and (root.is_node or root.node_cells)
        ):
            return pack_counted(state, root, want, needs, need, question, opportunistic)
    info, total = usable(state, root, want, question)
    if total < need:
        return None
    best: Choice | None = None
    # Inside one node (or one sub-node root).  Nodes come in id order, so a
    # placement at the lowest possible level with nothing to spare is final.
    floor = demands.lowest_level_in(state, root.chain, need)
    for node, free, vict, reserved in info.values():
        if len(free) + len(vict) < need:
            continue
        placed = in_node(state, node, needs, free, vict)
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
        for cell in cells_at(state, root, level):
            nodes = [info[n.id] for n in cell.node_cells if n.id in info]
            if sum(len(f) + len(v) for _, f, v, _ in nodes) < need:
                continue
            placed_multi = across(state, nodes, needs, opportunistic)
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


def pack_counted(
    state: PlacerState,
    root: Cell,
    want: object,
    needs: list[tuple[int, int]],
    need: int,
    question: Question,
    opportunistic: bool,
) -> Choice | None:
    """:func:`pack` without victims or released jobs, from the nodes' leaf masks.

    The same answer as the leaf-by-leaf search: a node's usable leaves are its
    unowned leaves (``freemask``; for the shared pool also unreserved:
    ``~tagmask``; inside the wanted reservation every leaf carries it) less the
    ones the gang already picked, so the candidate key ``(level, 0, 0,
    preference, spare, node id)`` is known from counters except for the level,
    which is the in-node buddy choice for that mask (:func:`in_node_by_mask`,
    memoized).  A node whose key cannot beat the best one even at the lowest
    level is not packed at all.  ``root`` is a node or a cell above nodes.
    """
    nodes = root.node_cells
    taken = _taken_bits(state, question.taken) if question.taken else None
    floor = demands.lowest_level_in(state, root.chain, need)
    ks = tuple(k for _, k in needs)
    shared = want is None
    best_key: tuple[int, ...] | None = None
    best_node: Cell | None = None
    best_in: tuple[tuple[tuple[int, ...], ...], int] | None = None
    for node in nodes:
        if not node.healthy:
            continue
        mask = node.freemask
        if shared:
            mask &= ~node.tagmask
        if taken is not None:
            mask &= ~taken.get(node.id, 0)
        cnt = mask.bit_count()
        if cnt < need:
            continue
        pref = node.tagmask.bit_count() if opportunistic else 0
        spare = cnt - need
        if best_key is not None and (floor, 0, 0, pref, spare, node.id) >= best_key:
            continue
        placed = in_node_by_mask(state, node, mask, ks)
        key = (placed[1], 0, 0, pref, spare, node.id)
        if best_key is None or key < best_key:
            best_key, best_node, best_in = key, node, placed
            if placed[1] == floor and pref == 0 and spare == 0:
                break
    if best_node is not None and best_key is not None and best_in is not None:
        leaves = {
            idx: [best_node.leaves[p] for p in best_in[0][i]] for i, (idx, _) in enumerate(needs)
        }
        return Choice(leaves, best_key[1:], set(), level=best_in[1])
    if root.is_node:
        return None
    # Across nodes: the lowest cell above node level whose nodes hold the gang.
    info: dict[int, tuple[Cell, int, int, int]] = {}
    for node in nodes:
        if not node.healthy:
            continue
        mask = node.freemask
        if shared:
            mask &= ~node.tagmask
        if taken is not None:
            mask &= ~taken.get(node.id, 0)
        if mask:
            info[node.id] = (node, mask.bit_count(), mask, node.tagmask.bit_count())
    best: Choice | None = None
    node_level = state.topo.node_level[root.chain]
    for level in range(node_level + 1, root.level + 1):
        for cell in cells_at(state, root, level):
            members = [info[n.id] for n in cell.node_cells if n.id in info]
            if sum(m[1] for m in members) < need:
                continue
            placed_multi = across_counted(state, members, needs, opportunistic)
            if placed_multi is None:
                continue
            leaves, pref_total = placed_multi
            mkey: tuple[int, ...] = (0, 0, pref_total, cell.id)
            if best is None or mkey < best.key:
                best = Choice(leaves, mkey, set())
        if best is not None:
            return best
    return None


def _taken_bits(state: PlacerState, taken: set[int]) -> dict[int, int]:
    """Node id -> bits of the leaves in ``taken`` (leaf ids)."""
    out: dict[int, int] = {}
    cells = state.topo.cells
    for cid in taken:
        leaf = cells[cid]
        node = leaf.node_cell
        assert node is not None
        out[node.id] = out.get(node.id, 0) | leaf.bits
    return out


#: Bound on memoized in-node choices per placer (cleared when reached).
MEMO_LIMIT = 100_000


def in_node_by_mask(
    state: PlacerState, node: Cell, mask: int, ks: tuple[int, ...]
) -> tuple[tuple[tuple[int, ...], ...], int]:
    """:func:`in_node` without victims for the leaves of ``mask``, by leaf positions.

    Nodes of one cell type have the same shape (the config fixes every child
    count) and their cells' ids follow that shape, so the buddy choice depends
    only on (cell type, mask, leaves per pod): it is computed once per
    placer and remembered (``PlacerState.in_node_memo``).  Returns (positions
    in ``node.leaves`` per pod in ``ks``'s order, level of the lowest common cell).
    """
    memo = state.in_node_memo
    key = (node.ctype.name, mask, ks)
    hit = memo.get(key)
    if hit is None:
        free = [leaf for leaf in node.leaves if leaf.bits & mask]
        placed = in_node(state, node, list(enumerate(ks)), free, [])
        if placed is None:
            raise InvariantError(f"{node}: {sum(ks)} of {len(free)} free leaves not placed")
        out, level, _ = placed
        positions = tuple(
            tuple(leaf.bits.bit_length() - 1 for leaf in out[i]) for i in range(len(ks))
        )
        if len(memo) >= MEMO_LIMIT:
            memo.clear()
        hit = memo[key] = (positions, level)
    return hit


def across_counted(
    state: PlacerState,
    nodes: list[tuple[Cell, int, int, int]],
    needs: list[tuple[int, int]],
    opportunistic: bool,
) -> tuple[dict[int, list[Cell]], int] | None:
    """:func:`across` without victims, from (node, usable count, mask, reserved leaves)."""
    # First-fit decreasing as :func:`across` ranks nodes without victims: fewest
    # reserved leaves (opportunistic only), then least spare, then id.
    remaining = {n.id: cnt for n, cnt, _, _ in nodes}
    by_id = {n.id: (n, mask, reserved if opportunistic else 0) for n, _, mask, reserved in nodes}
    assign: dict[int, list[tuple[int, int]]] = {}
    pref_total = 0
    for idx, k in needs:
        best_id = -1
        best_pref = best_spare = 0
        for nid, nf in remaining.items():
            if nf < k:
                continue
            pref = by_id[nid][2]
            spare = nf - k
            if (
                best_id < 0
                or pref < best_pref
                or (
                    pref == best_pref
                    and (spare < best_spare or (spare == best_spare and nid < best_id))
                )
            ):
                best_id, best_pref, best_spare = nid, pref, spare
        if best_id < 0:
            return None
        remaining[best_id] -= k
        assign.setdefault(best_id, []).append((idx, k))
        pref_total += best_pref
    leaves: dict[int, list[Cell]] = {}
    for nid, dems in assign.items():
        node, mask, _ = by_id[nid]
        positions, _level = in_node_by_mask(state, node, mask, tuple(k for _, k in dems))
        for i, (idx, _) in enumerate(dems):
            leaves[idx] = [node.leaves[p] for p in positions[i]]
    return leaves, pref_total


def cells_at(state: PlacerState, root: Cell, level: int) -> list[Cell]:
    """The cells of ``level`` under ``root`` (cached)."""
    key = (root.id, level)
    cells = state.at_level.get(key)
    if cells is None:
        cells = list(topology.descendants_at(root, level))
        state.at_level[key] = cells
    return cells


def subcells_of(state: PlacerState, node: Cell) -> list[Cell]:
    """``node`` and every cell under it, by (level, id) (cached)."""
    cells = state.subcells.get(node.id)
    if cells is None:
        cells = []
        stack = [node]
        while stack:
            c = stack.pop()
            cells.append(c)
            stack.extend(c.children)
        cells.sort(key=lambda c: (c.level, c.id))
        state.subcells[node.id] = cells
    return cells


def in_node(
    state: PlacerState,
    node: Cell,
    needs: list[tuple[int, int]],
    free: list[Cell],
    vict: list[Cell],
) -> tuple[dict[int, list[Cell]], int, int] | None:
    """Buddy choice of leaves for ``needs`` in one node: (leaves, level, victim leaves)."""
    avail = {leaf.id: 0 for leaf in free}
    for leaf in vict:
        avail[leaf.id] = 1
    out: dict[int, list[Cell]] = {}
    chosen: list[Cell] = []
    nvict = 0
    subcells = subcells_of(state, node)
    for idx, k in needs:
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
    common = topology.lowest_common(chosen)
    level = common.level if common is not None else node.level
    return out, level, nvict


def across(
    state: PlacerState,
    nodes: list[NodeLeaves],
    needs: list[tuple[int, int]],
    opportunistic: bool,
) -> tuple[dict[int, list[Cell]], int, int] | None:
    """First-fit decreasing of pods over nodes, best fit, free leaves before victims."""
    remaining = {n.id: [len(f), len(v)] for n, f, v, _ in nodes}
    by_id = {n.id: (n, f, v, r) for n, f, v, r in nodes}
    assign: dict[int, list[tuple[int, int]]] = {}
    pref_total = 0
    for idx, k in needs:
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
        placed = in_node(state, node, dems, free, vict)
        if placed is None:
            return None
        leaves.update(placed[0])
        nvict += placed[2]
    return leaves, nvict, pref_total


def spread(
    state: PlacerState,
    containers: list[tuple[Cell, object]],
    needs: list[tuple[int, int]],
    question: Question,
    opportunistic: bool,
    leaving: dict[int, int] | None = None,
) -> Choice | None:
    """Pods one by one over several containers (gang spanning top-level cells).

    ``leaving``: :func:`leaving_leaves` of ``question`` if the caller counted it."""
    leaves: dict[int, list[Cell]] = {}
    victims: set[str] = set()
    # What each container could give at most (unowned leaves, and the leaves of
    # the victims and released jobs): a pod that needs more is not asked there,
    # and a gang that needs more than all of them together is not spread.
    gone = leaving_leaves(state, question) if leaving is None else leaving
    bound = [c.size - c.used + gone.get(c.id, 0) for c, _ in containers]
    if sum(bound) < sum(k for _, k in needs):
        return None
    try:
        for idx, k in needs:
            best: Choice | None = None
            for at, (cell, want) in enumerate(containers):
                if k and (bound[at] < k or not _node_with(cell, k, gone)):
                    continue
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
