"""Where a guaranteed gang goes in the shared pool: unreserved leaves, VCs kept safe.

Theory of operation: the shared pool is every leaf no reservation holds.  A
gang may take such leaves only if no VC's owed cells are put at risk: the
allocator's shortage vector of the chain must not grow at any level (as if
the leaves were taken one by one).  Candidates come from the *open tops* (top
cells with unreserved leaves; every top when victims or released jobs may
free shared leaves elsewhere), best first and lazily: a top is packed only
while its lower bound can still beat the best packed candidate.  The bound is
the lowest level whose cells hold the gang; for a gang that fits in one node
the node counters (``shfree``: leaves neither reserved nor owned) give a
tighter one — (level, fewest spare leaves of a node that holds the gang, top
id) — and rule out tops with no room (:func:`bounds`).  At most
:data:`TRIES` candidates are checked for safety, best first; the first safe
one wins.  Without victims or released jobs the check is arithmetic on the
free counts (``Allocator.take_delta``); otherwise the victims leave and the
leaves are taken for real in an undo scope.  If no top holds the gang, its
pods are spread over the tops.
"""

from __future__ import annotations

import heapq

from fleet.core.cells import allocator, demands, packing, victims
from fleet.core.cells.packing import Choice
from fleet.core.cells.state import PlacerState
from fleet.core.cells.topology import Cell, Reservation
from fleet.core.cells.victims import Question

#: Safety checks of candidates before the shared pool gives up.
TRIES = 8

#: An open top with a lower bound on its best placement: (level, rest of key, top).
Bound = tuple[int, tuple[int, ...], Cell]


def search(
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
        tops = sorted(alloc.open_tops[chain].values(), key=_cell_id)
    low = demands.lowest_level_in(state, chain, need)
    node_level = state.topo.node_level[chain]
    across = low > node_level
    order: list[Bound]
    if across or question.preempt or question.released or state.suggested is not None:
        # Across nodes the node counters give no tighter bound than the level.
        order = [(low, (0, 0, 0, top.id) if across else (0, 0, 0, 0, top.id), top) for top in tops]
    else:
        order = bounds(tops, need, low, node_level)
    before = alloc.shortage(chain)
    heap: list[tuple[int, tuple[int, ...], int, Choice]] = []
    seq = 0
    tried = 0
    i = 0
    while tried < TRIES:
        if i < len(order):
            level_bound, bound, top = order[i]
            if not heap or (heap[0][0], heap[0][1]) >= (level_bound, bound):
                i += 1
                choice = packing.pack(state, top, None, needs, question, False)
                if choice is not None:
                    heapq.heappush(heap, (choice.level, choice.key, seq, choice))
                    seq += 1
                continue
        if not heap:
            if seq or len(needs) <= 1:
                return None
            spread = packing.spread(state, [(t, None) for t in tops], needs, question, False)
            if spread is None:
                return None
            heap.append((spread.level, spread.key, seq, spread))
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


def bounds(tops: list[Cell], need: int, low: int, node_level: int) -> list[Bound]:
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
    order: list[Bound] = []
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


def _bound_key(entry: Bound) -> tuple[int, tuple[int, ...]]:
    return entry[0], entry[1]


def _cell_id(cell: Cell) -> int:
    return cell.id
