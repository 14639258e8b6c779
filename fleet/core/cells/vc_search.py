"""Where a guaranteed gang goes inside its VC: bound cells, fresh bindings, spreading.

Theory of operation (HiveD's guaranteed path): a VC's virtual cells are bound
to physical cells lazily.  A gang of VC ``v`` in a chain is packed into every
cell ``v`` already has bound, and into one *fresh* binding per level at which
``v`` is still owed cells (:func:`fresh`: wholly free cells of that level in
buddy order — free cells of the level, then inside higher ones — the first
that holds the gang and whose binding leaves every other VC safe, tried as a
real bind in an undo scope).  The lowest common cell wins; on a tie a bound
cell beats a fresh one.  Fresh levels at or above the best level found are
not tried.  If no single cell holds the gang, pods are spread one by one over
``v``'s bound cells (cells already used by the gang first), binding owed cells
as needed (:func:`spread_vc`).  Without victims or released jobs the counters
(unowned leaves of bound cells plus what owed cells could add, bounded by the
chain's unreserved leaves) reject a gang that cannot fit before any packing.
"""

from __future__ import annotations

from fleet.core.cells import demands, packing
from fleet.core.cells.packing import Choice
from fleet.core.cells.state import PlacerState
from fleet.core.cells.topology import Cell, Reservation
from fleet.core.cells.victims import Question
from fleet.core.checks import InvariantError

#: Free cells of a level that may fail to hold the gang before ``fresh`` gives up.
FRESH_TRIES = 64


def search(
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
    # Bound cells in id order, each skipped when even its best conceivable key
    # cannot beat the best found (:func:`_lower_bound`): the minimum is the same.
    floor = demands.lowest_level_in(state, chain, total) if total else 0
    in_node = floor <= state.topo.node_level[chain]
    for res in sorted(bound, key=_cell_id) if len(bound) > 1 else bound:
        if best is not None and total and _lower_bound(res.cell, floor, in_node) >= best[0]:
            continue
        choice = packing.pack(state, res.cell, res, needs, question, False)
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
                best = (key, found, [fresh_cell(found, level)])
    if best is not None:
        return best[1], best[2]
    if (
        len(needs) <= 1
        and not any(owed)
        and not any(r.cell.chain == chain for r in alloc.vc_bound[vc].values())
    ):
        return None
    return spread_vc(state, vc, chain, needs, question)


def _lower_bound(root: Cell, floor: int, in_node: bool) -> tuple[int, ...]:
    """No placement under ``root`` has a smaller key ``(level, 0, *choice.key)``.

    Its level is at least ``floor``; every id in a key (a node's, or the cell
    holding a placement across nodes) is at least ``root``'s (ids follow the
    tree, depth first).  When the gang may fit in one node the id comes after
    the spare leaves; otherwise only placements across nodes exist, whose key
    ends with the cell's id.
    """
    if in_node:
        return (floor, 0, 0, 0, 0, 0, root.id)
    return (floor, 0, 0, 0, 0, root.id)


def _cell_id(res: Reservation) -> int:
    return res.cell.id


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
        choice = packing.pack(state, cell, None, needs, question, False)
        if choice is None:
            tried += 1
            if tried > FRESH_TRIES:
                return None
            continue
        # Safety: binding must not break any other VC's guarantee (counted, as
        # ``bind_vc`` then ``no_worse`` would answer: the tests' oracle binds).
        if alloc.binding_is_safe(cell, before):
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
                placed = packing.pack(state, cell, res, [(idx, k)], question, False)
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
                        cell = fresh_cell(placed, level)
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


def fresh_cell(choice: Choice, level: int) -> Cell:
    """The cell of ``level`` that holds the choice's leaves (a fresh VC binding)."""
    for ls in choice.leaves.values():
        for leaf in ls:
            c: Cell | None = leaf
            while c is not None and c.level < level:
                c = c.parent
            if c is None:
                raise InvariantError(f"{leaf} has no ancestor at level {level} to bind")
            return c
    raise InvariantError("a fresh binding without leaves")
