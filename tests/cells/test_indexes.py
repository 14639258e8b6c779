"""Free-capacity indexes of the cell allocator: counters, open tops, what-if takes, hints."""

from __future__ import annotations

from typing import Any

from fleet.core.cells.allocator import SHARED
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.topology import Reservation
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit
from fleet.core.resources import GPU, Resources
from fleet.testing.cells import rack_config


def config(racks: int = 3, owed: int = 1) -> dict[str, Any]:
    """Racks of two nodes of 4 PCIe pairs; VC ``a`` is owed ``owed`` racks."""
    return rack_config(racks, 2, 8, {"a": [("RACK", owed)]}, pairs=True)


def job(key: str, queue: str, pods: int, gpus: int) -> Job:
    return Job(f"t/{key}", queue, 10, 0, (ReplicaGroup("Worker", pods, Resources({GPU: gpus})),))


def place(p: CellPlacer, j: Job) -> Fit:
    fit = p.fit(j, j.pods, Mode.GUARANTEED)
    assert isinstance(fit, Fit), fit
    p.bind(j, charge_for(j, Mode.GUARANTEED), fit)
    p.check_invariants()
    return fit


def test_capacity_and_allocated_are_kept_incrementally() -> None:
    p = CellPlacer("c", load_cell_config(config()))
    assert p.capacity()[GPU] == 48 and not p.allocated()
    place(p, job("x", "a", 2, 8))
    place(p, job("y", "team", 1, 3))
    assert p.allocated()[GPU] == 19
    p.set_node_health("r2n1", False)
    p.set_node_health("r2n1", False)  # twice: counted once
    assert p.capacity()[GPU] == 40
    p.check_invariants()
    p.release("t/x")
    assert p.allocated()[GPU] == 3
    p.set_node_health("r2n1", True)
    assert p.capacity()[GPU] == 48
    p.check_invariants()


def test_fit_leaves_counters_and_indexes_unchanged() -> None:
    p = CellPlacer("c", load_cell_config(config()))
    place(p, job("x", "team", 1, 3))
    before = (p.allocated(), dict(p.alloc.open_tops["RACK"]), list(p.alloc.unres_total["RACK"]))
    for queue in ("a", "team"):
        j = job(f"q-{queue}", queue, 2, 8)
        assert isinstance(p.fit(j, j.pods, Mode.GUARANTEED), Fit)
    after = (p.allocated(), dict(p.alloc.open_tops["RACK"]), list(p.alloc.unres_total["RACK"]))
    assert after == before
    p.check_invariants()


def test_open_tops_follow_reservations() -> None:
    p = CellPlacer("c", load_cell_config(config(racks=2, owed=1)))
    tops = p.topo.chain_tops["RACK"]
    assert set(p.alloc.open_tops["RACK"]) == {t.id for t in tops}
    place(p, job("x", "a", 2, 8))  # binds a whole rack to VC a
    assert len(p.alloc.open_tops["RACK"]) == 1
    assert p.alloc.unres_total["RACK"] == [16]
    p.release("t/x")
    assert set(p.alloc.open_tops["RACK"]) == {t.id for t in tops}
    p.check_invariants()


def test_shared_pool_is_rejected_by_the_counters_when_it_cannot_hold_the_gang() -> None:
    # Two racks, one owed to VC a: the shared pool holds 16 GPUs, not 24.
    p = CellPlacer("c", load_cell_config(config(racks=2, owed=1)))
    big = job("big", "team", 3, 8)
    fit = p.fit(big, big.pods, Mode.GUARANTEED)
    assert not isinstance(fit, Fit)
    assert "shared pool" in fit.reason
    assert isinstance(place(p, job("ok", "team", 2, 8)), Fit)


def test_take_delta_matches_real_takes() -> None:
    p = CellPlacer("c", load_cell_config(config()))
    alloc = p.alloc
    node = p.topo.nodes["r1n0"][0]
    picks = [node.leaves[0], node.leaves[1], node.leaves[2], p.topo.nodes["r1n1"][0].leaves[7]]
    delta = alloc.take_delta("RACK", picks)
    assert delta is not None
    counts = [len(level) for level in alloc.free["RACK"]]
    expected = [c + d for c, d in zip(counts, delta, strict=True)]
    what_if = alloc.shortage("RACK", delta)
    p.j.begin()
    for leaf in picks:
        alloc.take(leaf, Reservation(SHARED, leaf, job="t/z"))
    assert [len(level) for level in alloc.free["RACK"]] == expected
    assert alloc.shortage("RACK") == what_if
    p.j.rollback()
    assert alloc.take_delta("RACK", [picks[0], picks[0]]) is None
    p.check_invariants()


def test_lowest_level_is_a_lower_bound_reached_by_tight_fits() -> None:
    p = CellPlacer("c", load_cell_config(config()))
    cases = [((1, 1), 0), ((1, 2), 1), ((1, 3), 2), ((2, 4), 2), ((2, 8), 3), ((4, 8), 4)]
    for (pods, gpus), level in cases:
        j = job(f"l{pods}x{gpus}", "team", pods, gpus)
        assert p.lowest_level(j, j.pods) == level, (pods, gpus)
        fit = p.fit(j, j.pods, Mode.GUARANTEED)
        assert isinstance(fit, Fit) and fit.level >= level
        if (pods, gpus) != (4, 8):  # 32 GPUs span racks: level above the top
            assert fit.level == level
    zero = job("zero", "team", 2, 0)
    assert p.lowest_level(zero, zero.pods) == 0


def test_a_vc_keeps_its_open_cells_and_spreads_into_a_cell_it_just_bound() -> None:
    cfg = config(racks=2)
    cfg["virtualClusters"] = {"a": {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": 2}]}}
    p = CellPlacer("c", load_cell_config(cfg))
    opened = p.state.alloc.vc_open["a"]

    def open_nodes() -> list[str]:
        return sorted(res.cell.node for cells in opened.values() for res in cells.values())

    # Three 4-GPU pods fit in no one node: the second goes into the node the first
    # one's pod had VC "a" bind, the third binds the VC's other node.
    fit = place(p, job("g", "a", 3, 4))
    per_node = {pod.node: 0 for pod in fit.pods}
    for pod in fit.pods:
        per_node[pod.node] += 1
    assert sorted(per_node.values()) == [1, 2]
    half = next(node for node, n in per_node.items() if n == 1)
    assert open_nodes() == [half]  # the full node is no longer open
    second = place(p, job("h", "a", 1, 4))
    assert [pod.node for pod in second.pods] == [half]
    assert open_nodes() == []
    p.release("t/h")
    p.check_invariants()
    assert open_nodes() == [half]
    p.release("t/g")
    p.check_invariants()
    assert open_nodes() == []  # unbound with its last pod
