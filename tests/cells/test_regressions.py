"""Regressions: zero-leaf pods with skuTypes, sku arithmetic, plans ``bind`` refused.

Each case failed before its fix: a crash (``fresh binding without leaves``), a
wrong leaf count (resources compared by identity), or a ``CellFit`` whose plan
``bind`` refused once the victims or released jobs had left (growth steps of a
preempted job included).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from fleet.core.cells.config import load_cell_config
from fleet.core.cells.demands import leaf_cells_needed
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.spec import SkuType
from fleet.core.cells.state import CellFit
from fleet.core.charges import charge_for, unit_key
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, NoFit, PodPlacement
from fleet.core.resources import CPU, GPU, MEMORY, Resources

GI = 2**30


def rack_config(
    racks: int,
    nodes: int,
    gpus: int,
    vcs: dict[str, list[tuple[str, int]]],
    sku: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``racks`` racks of ``nodes`` nodes of ``gpus`` GPUs; VC -> [(cell type, number)]."""
    pc: dict[str, Any] = {
        "cellTypes": {
            "NODE": {"childCellType": "GPU", "childCellNumber": gpus, "isNodeLevel": True},
            "RACK": {"childCellType": "NODE", "childCellNumber": nodes},
        },
        "physicalCells": [
            {
                "cellType": "RACK",
                "cellChildren": [{"cellAddress": f"r{r}n{n}"} for n in range(nodes)],
            }
            for r in range(racks)
        ],
    }
    if sku is not None:
        pc["skuTypes"] = {"GPU": sku}
    return {
        "physicalCluster": pc,
        "virtualClusters": {
            vc: {"virtualCells": [{"cellType": t, "cellNumber": n} for t, n in cells]}
            for vc, cells in vcs.items()
        },
    }


def make_job(
    name: str,
    queue: str,
    priority: int,
    *groups: tuple[str, int, dict[str, int]],
    gang: bool = True,
) -> Job:
    reps = tuple(ReplicaGroup(role, n, Resources(req)) for role, n, req in groups)
    return Job(f"t/{name}", queue, priority, 0, reps, gang=gang)


def mode_of(job: Job) -> Mode:
    return Mode.OPPORTUNISTIC if job.priority < 0 else Mode.GUARANTEED


def place(p: CellPlacer, job: Job, mode: Mode | None = None, preempt: bool = False) -> Fit:
    mode = mode or mode_of(job)
    fit = p.fit(job, job.pods, mode, preempt=preempt)
    assert isinstance(fit, Fit), fit
    for victim in fit.victims:
        p.release(victim)
    p.bind(job, charge_for(job, mode), fit)
    p.check_invariants()
    return fit


# -- 2. leaf cells per pod: each resource against its own sku amount ----------------------


@pytest.mark.parametrize(
    ("request_", "sku", "expected"),
    [
        # cpu (1) equal to the GPU count (1) on a sku without cpu: not "GPUs of a CPU-only sku"
        ({GPU: 1, CPU: 1}, SkuType("g", 1, 0, 0), 1),
        ({GPU: 2, MEMORY: 2}, SkuType("g", 1, 0, 0), 2),
        ({GPU: 3, CPU: 3, MEMORY: 3}, SkuType("g", 1, 0, 0), 3),
        # GPUs of a sku without GPUs never fit, whatever else is asked
        ({GPU: 1}, SkuType("c", 0, 8000, 64 * GI), None),
        ({GPU: 2, CPU: 2}, SkuType("c", 0, 8000, 64 * GI), None),
        # cpu and memory each divided by their own amount
        ({CPU: 16000}, SkuType("c", 0, 8000, 64 * GI), 2),
        ({CPU: 1000, MEMORY: 100 * GI}, SkuType("c", 0, 8000, 64 * GI), 2),
        ({GPU: 1, CPU: 20000}, SkuType("g", 1, 8000, 64 * GI), 3),
        # a resource the sku has none of is ignored; nothing asked needs nothing
        ({CPU: 5000}, SkuType("g", 1, 0, 64 * GI), 0),
        ({}, SkuType("g", 1, 8000, 64 * GI), 0),
        ({GPU: 2, CPU: 9000}, None, 2),
    ],
)
def test_leaf_cells_needed(request_: dict[str, int], sku: SkuType | None, expected: int) -> None:
    assert leaf_cells_needed(Resources(request_), sku) == expected


# -- 1. pods needing no leaf cells with skuTypes ------------------------------------------

SKU = {"gpu": 1, "cpu": "8", "memory": "64Gi"}
SKU_NO_CPU = {"gpu": 1, "memory": "64Gi"}
NOTHING: dict[str, int] = {}
ONE_GPU = {GPU: 1, CPU: 1000}


@pytest.mark.parametrize(
    ("sku", "queue", "mode", "groups", "bad", "expected"),
    [
        # a CPU-only pod asking nothing, guaranteed in a VC: any healthy node, no GPUs
        (SKU, "a", Mode.GUARANTEED, [("Worker", 1, NOTHING)], [], [("r0n0", 0)]),
        (SKU, "a", Mode.GUARANTEED, [("Worker", 3, NOTHING)], [], [("r0n0", 0)] * 3),
        # cpu on a sku without cpu needs no leaf either
        (SKU_NO_CPU, "a", Mode.GUARANTEED, [("Worker", 2, {CPU: 4000})], [], [("r0n0", 0)] * 2),
        # the first healthy node
        (SKU, "a", Mode.GUARANTEED, [("Worker", 1, NOTHING)], ["r0n0"], [("r0n1", 0)]),
        # shared pool and opportunistic jobs alike
        (SKU, "team", Mode.GUARANTEED, [("Worker", 1, NOTHING)], [], [("r0n0", 0)]),
        (SKU, "a", Mode.OPPORTUNISTIC, [("Worker", 1, NOTHING)], [], [("r0n0", 0)]),
        # a master asking nothing goes on the node of the gang's first pod
        (
            SKU,
            "a",
            Mode.GUARANTEED,
            [("Master", 1, NOTHING), ("Worker", 2, ONE_GPU)],
            [],
            [("r0n0", 0), ("r0n0", 1), ("r0n0", 1)],
        ),
        (
            SKU,
            "a",
            Mode.GUARANTEED,
            [("Master", 1, NOTHING), ("Worker", 2, {GPU: 4})],
            [],
            [("r0n0", 0), ("r0n0", 4), ("r0n1", 4)],
        ),
        # no healthy node at all: a clear NoFit
        (SKU, "a", Mode.GUARANTEED, [("Worker", 1, NOTHING)], ["r0n0", "r0n1"], None),
        (None, "a", Mode.GUARANTEED, [("Worker", 1, NOTHING)], ["r0n0", "r0n1"], None),
    ],
)
def test_pods_needing_no_leaf_cells(
    sku: dict[str, Any] | None,
    queue: str,
    mode: Mode,
    groups: list[tuple[str, int, dict[str, int]]],
    bad: list[str],
    expected: list[tuple[str, int]] | None,
) -> None:
    config = rack_config(1, 2, 4, {"a": [("RACK.NODE", 2)]}, sku)
    p = CellPlacer("t", load_cell_config(config))
    for node in bad:
        p.set_node_health(node, False)
    priority = -1 if mode is Mode.OPPORTUNISTIC else 10
    job = make_job("zero", queue, priority, *groups)
    fit = p.fit(job, job.pods, mode)
    if expected is None:
        assert isinstance(fit, NoFit)
        assert "no healthy node" in fit.reason
        return
    assert isinstance(fit, Fit), fit
    assert [(pp.node, len(pp.gpus)) for pp in fit.pods] == expected
    p.bind(job, charge_for(job, mode), fit)
    p.check_invariants()
    p.release(job.key)
    p.check_invariants()


# -- 3. a fit never plans what ``bind`` refuses once the leaving jobs have left -----------


def fit_release_bind(
    p: CellPlacer, job: Job, mode: Mode, preempt: bool, released: frozenset[str]
) -> Fit | NoFit:
    """Fit, release the victims and the released jobs as the cycle does, bind."""
    fit = p.fit(job, job.pods, mode, preempt=preempt, released=released)
    p.check_invariants()
    if isinstance(fit, Fit):
        for key in sorted({*fit.victims, *released}):
            p.release(key)
        p.bind(job, charge_for(job, mode), fit)  # must never refuse
        p.check_invariants()
    return fit


def scenario_opportunistic_in_a_released_vc_cell() -> tuple[CellPlacer, Job, Mode, bool, set[str]]:
    # VC a's job holds node r0n0 (its bound NODE cell); r0n1 is full of shared work.
    # A borrowed job may use r0n0's leaves once the VC job is released, and the
    # release unbinds the VC cell: the opportunistic fit must bind nothing.
    p = CellPlacer("t", load_cell_config(rack_config(1, 2, 2, {"a": [("RACK.NODE", 1)]})))
    place(p, make_job("vcjob", "a", 10, ("Worker", 1, {GPU: 2})))
    place(p, make_job("full", "team", 10, ("Worker", 1, {GPU: 2})))
    job = make_job("borrow", "a", 10, ("Worker", 1, {GPU: 2}))
    return p, job, Mode.BORROWED, False, {"t/vcjob"}


def scenario_shared_pool_over_a_doomed_vc_cell() -> tuple[CellPlacer, Job, Mode, bool, set[str]]:
    # VC a is owed one node.  A shared-pool job holds r0n0, then r0n1 goes bad: a's
    # node is doomed.  Preempting the shared job frees r0n0, which a's owed node
    # then needs: the preemptor must not take it (bind checks after the release).
    p = CellPlacer("t", load_cell_config(rack_config(1, 2, 2, {"a": [("RACK.NODE", 1)]})))
    place(p, make_job("low", "team", 10, ("Worker", 1, {GPU: 2})))
    p.set_node_health("r0n1", False)
    p.check_invariants()
    job = make_job("high", "team", 100, ("Worker", 1, {GPU: 2}))
    return p, job, Mode.GUARANTEED, True, set()


def scenario_vc_cell_with_a_bad_node() -> tuple[CellPlacer, Job, Mode, bool, set[str]]:
    # VC a holds rack r0 (one job on r0n0); r0n1 goes bad; rack r1 is shared work.
    # Preempting a's job unbinds r0, whose bad node is then reserved as bad: r0
    # cannot be bound again, so a placement on r0n0 cannot be bound either.
    p = CellPlacer("t", load_cell_config(rack_config(2, 2, 2, {"a": [("RACK", 1)]})))
    low = place(p, make_job("low", "a", 10, ("Worker", 1, {GPU: 2})))
    assert [pp.node for pp in low.pods] == ["r0n0"]
    shared = place(p, make_job("shared", "team", 10, ("Worker", 2, {GPU: 2})))
    assert sorted(pp.node for pp in shared.pods) == ["r1n0", "r1n1"]
    p.set_node_health("r0n1", False)
    p.check_invariants()
    job = make_job("high", "a", 100, ("Worker", 1, {GPU: 2}))
    return p, job, Mode.GUARANTEED, True, set()


def scenario_released_vc_cell_with_a_bad_node() -> tuple[CellPlacer, Job, Mode, bool, set[str]]:
    # The same with the VC's job released instead of preempted: once it has left,
    # VC a is owed a rack again and r1 is free, so the job goes there.
    p = CellPlacer("t", load_cell_config(rack_config(2, 2, 2, {"a": [("RACK", 1)]})))
    place(p, make_job("low", "a", 10, ("Worker", 1, {GPU: 2})))
    p.set_node_health("r0n1", False)
    p.check_invariants()
    job = make_job("high", "a", 100, ("Worker", 1, {GPU: 2}))
    return p, job, Mode.GUARANTEED, False, {"t/low"}


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (scenario_opportunistic_in_a_released_vc_cell, [("r0n0", (0, 1))]),
        (scenario_shared_pool_over_a_doomed_vc_cell, None),
        (scenario_vc_cell_with_a_bad_node, None),
        (scenario_released_vc_cell_with_a_bad_node, [("r1n0", (0, 1))]),
    ],
)
def test_fit_with_leaving_jobs_is_bindable(
    scenario: Any, expected: list[tuple[str, tuple[int, ...]]] | None
) -> None:
    p, job, mode, preempt, released = scenario()
    fit = fit_release_bind(p, job, mode, preempt, frozenset(released))
    if expected is None:
        assert isinstance(fit, NoFit), fit
    else:
        assert isinstance(fit, CellFit), fit
        assert [(pp.node, pp.gpus) for pp in fit.pods] == expected
        if fit.kind != "vc":
            assert fit.bindings == ()


def test_a_preempted_first_unit_takes_its_growth_steps_along() -> None:
    # VC a is owed the one node.  An incremental job of a runs one pod in its
    # first unit and one in a growth step (both keep the VC cell bound); work
    # nobody may preempt fills the rest.  Preempting the first unit stops the
    # whole job, so the growth step leaves too and the VC cell is unbound: the
    # fit must bind it again (it used to plan as if the growth step stayed).
    p = CellPlacer("t", load_cell_config(rack_config(1, 1, 4, {"a": [("RACK.NODE", 1)]})))
    grow = make_job("grow", "a", 10, ("Worker", 2, {GPU: 1}), gang=False)
    first = p.fit(grow, grow.pods[:1], Mode.GUARANTEED)
    assert isinstance(first, Fit), first
    p.bind(grow, charge_for(grow, Mode.GUARANTEED, grow.request_of(grow.pods[:1])), first)
    step = dataclasses.replace(grow, key=unit_key(grow.key, 2))
    second = p.fit(step, grow.pods[1:], Mode.GUARANTEED)
    assert isinstance(second, Fit), second
    p.bind(step, charge_for(grow, Mode.GUARANTEED, grow.request_of(grow.pods[1:]), 2), second)
    fill = dataclasses.replace(
        make_job("fill", "team", -1, ("Worker", 2, {GPU: 1}), gang=False), preemptible=False
    )
    place(p, fill)
    high = make_job("high", "a", 100, ("Worker", 1, {GPU: 1}))
    fit = p.fit(high, high.pods, Mode.GUARANTEED, preempt=True)
    p.check_invariants()
    assert isinstance(fit, CellFit), fit
    assert fit.victims == ("t/grow",)
    assert fit.bindings, "the VC cell is unbound once the whole job has left"
    for key in ("t/grow#2", "t/grow"):  # the cycle stops every unit of the job
        p.release(key)
    p.bind(high, charge_for(high, Mode.GUARANTEED), fit)  # must not refuse
    p.check_invariants()
    assert p.placement_of("t/high") == fit.pods


def test_refused_bind_of_a_held_shared_job_leaves_no_reservation_behind() -> None:
    # An incremental shared-pool job grows by two pods; the second pod's GPU does
    # not exist, so bind fails after the first pod's shared take.  The rollback
    # must also drop that take from the job's own list (release used to trip on it).
    p = CellPlacer("t", load_cell_config(rack_config(1, 2, 2, {})))
    job = make_job("grow", "team", 10, ("Worker", 3, {GPU: 2}), gang=False)
    first = p.fit(job, job.pods[:1], Mode.GUARANTEED)
    assert isinstance(first, Fit)
    p.bind(job, charge_for(job, Mode.GUARANTEED), first)
    second = p.fit(job, job.pods[1:2], Mode.GUARANTEED)
    assert isinstance(second, CellFit)
    bogus = PodPlacement(job.pods[2].name, "r0n1", (7,))
    with pytest.raises(ValueError, match="no GPU 7"):
        p.bind(
            job,
            charge_for(job, Mode.GUARANTEED),
            CellFit(**{**_fields(second), "pods": (*second.pods, bogus)}),
        )
    p.check_invariants()
    p.release(job.key)
    p.check_invariants()
    assert p.free_leaves == 4


def _fields(fit: CellFit) -> dict[str, Any]:
    return {
        "cluster": fit.cluster,
        "pods": fit.pods,
        "level": fit.level,
        "fragmentation": fit.fragmentation,
        "victims": fit.victims,
        "kind": fit.kind,
        "bindings": fit.bindings,
    }
