"""The allocator's hot paths: flat undo log, whole-cell shared-pool binds, one safety check."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from fleet.core.cells.allocator import SHARED, Allocator, Journal
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.topology import Cell, Reservation
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit
from fleet.core.resources import GPU, Resources
from fleet.testing.cells import rack_config


def config(racks: int = 3, nodes: int = 2, owed: int = 1) -> dict[str, Any]:
    """Racks of ``nodes`` nodes of 4 PCIe pairs; VC ``a`` is owed ``owed`` racks."""
    return rack_config(racks, nodes, 8, {"a": [("RACK", owed)]}, pairs=True)


def job(key: str, queue: str, pods: int, gpus: int) -> Job:
    return Job(f"t/{key}", queue, 10, 0, (ReplicaGroup("Worker", pods, Resources({GPU: gpus})),))


def free_lists(alloc: Allocator) -> list[list[int]]:
    """Free roots per level of chain RACK, in the free lists' (buddy) order."""
    return [list(level) for level in alloc.free["RACK"]]


def inside_reserved(cell: Cell) -> bool:
    parent = cell.parent
    while parent is not None:
        if parent.res is not None:
            return True
        parent = parent.parent
    return False


class Box:
    def __init__(self) -> None:
        self.x = 1
        self.y = "a"


def test_journal_undoes_every_change_in_reverse_and_to_nested_marks() -> None:
    j = Journal()
    box = Box()
    d = {1: "one", 2: "two", 3: "three"}
    counts = [5, 6]
    j.begin()
    j.set(box, "y", "b")
    j.add(box, "x", 4)
    outer = j.mark()
    j.delitem(d, 2)
    j.setitem(d, 4, "four")
    j.setitem(d, 1, "uno")
    inner = j.mark()
    j.listitem(counts, 1, -6)
    j.add(box, "x", 10)
    assert (box.x, counts) == (15, [5, 0])
    j.undo_to(inner)
    assert (box.x, counts) == (5, [5, 6])
    assert d == {1: "uno", 3: "three", 4: "four"}
    j.undo_to(outer)
    assert d == {1: "one", 3: "three", 2: "two"}  # a deleted key comes back last
    assert (box.x, box.y) == (5, "b")
    j.rollback()
    assert (box.x, box.y) == (1, "a")
    j.begin()
    j.add(box, "x", 1)
    j.commit()
    assert box.x == 2
    j.set(box, "y", "c")  # outside a transaction: applied, not logged
    assert box.y == "c"


def test_shared_bind_takes_whole_cells_with_the_free_lists_of_one_take_per_leaf() -> None:
    p = CellPlacer("c", load_cell_config(config(racks=3)))
    # Reference: the same cluster, one take per leaf in the bind's order.
    ref = CellPlacer("c", load_cell_config(config(racks=3)))
    gang = job("g", "team", 3, 8)
    single = job("s", "team", 1, 3)
    bound: list[Fit] = []
    for j in (gang, single):
        fit = p.fit(j, j.pods, Mode.GUARANTEED)
        assert isinstance(fit, Fit)
        p.bind(j, charge_for(j, Mode.GUARANTEED), fit)
        bound.append(fit)
        p.check_invariants()
    held = p._held["t/g"]
    # Each 8-GPU pod is one node-level reservation, not eight leaf reservations.
    assert [r.cell.level for r in held.shared] == [3, 3, 3]
    assert all(r.cell.is_node for r in held.shared)
    ref_leaves: list[Cell] = []
    for fit in bound:
        for placement in fit.pods:
            ref_leaves.extend(ref.topo.leaf_at[(placement.node, i)] for i in placement.gpus)
    ref.j.begin()
    for leaf in ref_leaves:
        ref.alloc.take(leaf, Reservation(SHARED, leaf, job="t/ref"))
    ref.j.commit()
    assert free_lists(p.alloc) == free_lists(ref.alloc)
    # ``unres`` is kept for cells not strictly inside a reserved root (see allocator.py).
    counted = [c.id for c in p.topo.cells if not inside_reserved(c)]
    assert [p.topo.cells[i].unres for i in counted] == [ref.topo.cells[i].unres for i in counted]
    assert p.alloc.open_tops == {
        chain: {cid: p.topo.cells[cid] for cid in tops}
        for chain, tops in ref.alloc.open_tops.items()
    }
    # Releasing restores the same free lists as one untake per leaf.
    p.release("t/g")
    p.release("t/s")
    ref.j.begin()
    for leaf in ref_leaves:
        ref.alloc.untake(leaf)
    ref.j.commit()
    assert free_lists(p.alloc) == free_lists(ref.alloc)
    p.check_invariants()


def test_stale_shared_fit_that_would_break_a_vc_is_refused_and_rolled_back() -> None:
    # Two racks, VC a owed one: the shared pool may use either rack while both are free.
    p = CellPlacer("c", load_cell_config(config(racks=2)))
    j = job("x", "team", 1, 8)
    fit = p.fit(j, j.pods, Mode.GUARANTEED)
    assert isinstance(fit, Fit)
    used = fit.pods[0].node
    other = "r1n0" if used.startswith("r0") else "r0n0"
    p.set_node_health(other, False)  # the other rack is no longer whole: a needs this one
    before = (free_lists(p.alloc), [c.unres for c in p.topo.cells], p.allocated())
    try:
        p.bind(j, charge_for(j, Mode.GUARANTEED), fit)
    except ValueError as err:
        assert "owed to a VC" in str(err)
    else:
        raise AssertionError("a shared bind that breaks VC a's guarantee was accepted")
    assert not p.holds(j.key)
    assert (free_lists(p.alloc), [c.unres for c in p.topo.cells], p.allocated()) == before
    p.check_invariants()


@settings(max_examples=150, deadline=None)
@given(
    nodes=st.integers(1, 3),
    racks=st.integers(1, 3),
    owed=st.integers(0, 3),
    bad=st.lists(st.integers(0, 8), max_size=2),
    picks=st.lists(st.integers(0, 71), min_size=1, max_size=24, unique=True),
)
def test_safety_after_every_take_equals_safety_after_all_takes(
    nodes: int, racks: int, owed: int, bad: list[int], picks: list[int]
) -> None:
    """Why a shared bind checks the shortage once: taking free cells one after another
    never lowers the highest level whose shortage changes, so "no level grew at any
    step" and "no level grew overall" are the same answer."""
    p = CellPlacer("c", load_cell_config(config(racks, nodes, min(owed, racks))))
    names = sorted(p.topo.nodes)
    for i in bad:
        p.set_node_health(names[i % len(names)], False)
    alloc = p.alloc
    leaves = [p.topo.cells[c.id] for c in p.topo.cells if not c.children]
    chosen = [leaves[i % len(leaves)] for i in picks]
    chosen = [leaf for leaf in dict.fromkeys(chosen) if leaf.tag is None]
    start = alloc.shortage("RACK")
    p.j.begin()
    stepwise = True
    for leaf in chosen:
        before = alloc.shortage("RACK")
        alloc.take(leaf, Reservation(SHARED, leaf, job="t/z"))
        stepwise = stepwise and alloc.no_worse("RACK", before)
    overall = alloc.no_worse("RACK", start)
    p.j.rollback()
    assert stepwise == overall
    p.check_invariants()


def test_shared_single_pod_takes_the_tightest_node_found_through_the_counters() -> None:
    p = CellPlacer("c", load_cell_config(config(racks=3)))
    for key, gpus in (("a", 5), ("b", 8), ("c", 8), ("d", 7)):
        fit = p.fit(job(key, "team", 1, gpus), job(key, "team", 1, gpus).pods, Mode.GUARANTEED)
        assert isinstance(fit, Fit)
        p.bind(
            job(key, "team", 1, gpus), charge_for(job(key, "team", 1, gpus), Mode.GUARANTEED), fit
        )
    p.check_invariants()
    spare = {n: cells[0].shfree for n, cells in p.topo.nodes.items()}
    assert sorted(spare.values())[:3] == [0, 0, 1]
    one = job("one", "team", 1, 1)
    fit = p.fit(one, one.pods, Mode.GUARANTEED)
    assert isinstance(fit, Fit)
    assert spare[fit.pods[0].node] == 1  # the node with exactly one free GPU
