"""CPU-only and mixed jobs: pods asking for no GPU on CPU-only node pools, a GPU pod's
cpu and memory counted on its node, and quota in cpu and memory.

A cluster here is a HiveD cell config with a GPU pool (``V100`` nodes of 4 GPUs,
each GPU with 4 cpu and 16Gi) and a CPU-only pool (``CPU`` leaves of 2 cpu and
8Gi, 8 to a node: 16 cpu and 64Gi), placed by both placers.
"""

from __future__ import annotations

from typing import Any

import pytest

from fleet.core.capacity import CapacityPlacer
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.spec import CellConfig, CellConfigError
from fleet.core.charges import charge_for
from fleet.core.cycle import Admit, Wait, cycle
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, NoFit, Placer
from fleet.core.quota import QuotaTree
from fleet.core.resources import Resources
from fleet.core.state import SchedulerState
from fleet.manifests.placers import capacity_placer
from tests.core.factories import confirm_stops, make_node

GPU = "nvidia.com/gpu"


def cells(
    gpu_nodes: int = 2, cpu_nodes: int = 2, vcs: dict[str, Any] | None = None
) -> dict[str, Any]:
    types: dict[str, Any] = {}
    physical = []
    if gpu_nodes:
        types["V100-NODE"] = {"childCellType": "V100", "childCellNumber": 4, "isNodeLevel": True}
        types["V100-POOL"] = {"childCellType": "V100-NODE", "childCellNumber": gpu_nodes}
        children = [{"cellAddress": f"g{i}"} for i in range(gpu_nodes)]
        physical.append({"cellType": "V100-POOL", "cellChildren": children})
    if cpu_nodes:
        types["CPU-NODE"] = {"childCellType": "CPU", "childCellNumber": 8, "isNodeLevel": True}
        types["CPU-POOL"] = {"childCellType": "CPU-NODE", "childCellNumber": cpu_nodes}
        children = [{"cellAddress": f"c{i}"} for i in range(cpu_nodes)]
        physical.append({"cellType": "CPU-POOL", "cellChildren": children})
    return {
        "physicalCluster": {
            "skuTypes": {
                "V100": {"gpu": 1, "cpu": 4, "memory": "16Gi"},
                "CPU": {"cpu": 2, "memory": "8Gi"},
            },
            "cellTypes": types,
            "physicalCells": physical,
        },
        "virtualClusters": vcs or {},
    }


def config(**kw: Any) -> CellConfig:
    return load_cell_config(cells(**kw))


def both(**kw: Any) -> list[Placer]:
    """The cell placer and the capacity placer over the same cell config."""
    c = config(**kw)
    return [CellPlacer("c", c), capacity_placer("c", c)]


PLACERS = pytest.mark.parametrize("kind", ["cells", "capacity"])


def placer(kind: str, **kw: Any) -> Placer:
    c = config(**kw)
    return CellPlacer("c", c) if kind == "cells" else capacity_placer("c", c)


_seq = iter(range(1, 10_000))


def job(
    name: str,
    *groups: tuple[str, int, dict[str, Any]],
    priority: int = 10,
    queue: str = "q",
    sku: str | None = None,
) -> Job:
    return Job(
        key=f"default/{name}",
        queue=queue,
        priority=priority,
        seq=next(_seq),
        groups=tuple(ReplicaGroup(r, n, Resources.parse(p)) for r, n, p in groups),
        gpu_sku=sku,
    )


def bind(p: Placer, j: Job, mode: Mode = Mode.GUARANTEED) -> Fit:
    fit = p.fit(j, j.pods, mode)
    assert isinstance(fit, Fit), fit
    p.bind(j, charge_for(j, mode), fit)
    p.check_invariants()
    return fit


def where(fit: Fit) -> dict[str, tuple[str, int]]:
    return {pp.pod: (pp.node, len(pp.gpus)) for pp in fit.pods}


# -- the cell config ----------------------------------------------------------------------


def test_a_skutype_without_gpu_makes_a_cpu_only_node_pool() -> None:
    c = config()
    assert c.cpu_leaf_types == ("CPU",)
    assert c.leaf_types == ("V100",)
    assert c.chains == ("V100-POOL",)
    assert [top.cell_type for top in c.cpu_cells] == ["CPU-POOL"]
    nodes = c.nodes()
    assert nodes["c0"] == Resources.parse({"cpu": 16, "memory": "64Gi"})
    assert nodes["g0"] == Resources.parse({GPU: 4, "cpu": 16, "memory": "64Gi"})
    assert set(c.cell_nodes()) == {"g0", "g1"}
    assert set(c.cpu_nodes()) == {"c0", "c1"}


def test_a_virtual_cluster_may_not_own_cpu_only_cells() -> None:
    vcs = {"q": {"virtualCells": [{"cellType": "CPU-POOL.CPU-NODE", "cellNumber": 1}]}}
    with pytest.raises(CellConfigError) as e:
        config(vcs=vcs)
    assert e.value.path == "spec.cells.virtualClusters.q.virtualCells[0].cellType"
    assert "CPU-only node pool" in e.value.message
    assert "quota tree's min" in e.value.message


def test_a_cluster_of_cpu_only_nodes_alone_places_cpu_pods() -> None:
    for p in both(gpu_nodes=0, cpu_nodes=1):
        fit = bind(p, job("cpu", ("Worker", 2, {"cpu": "4"})))
        assert where(fit) == {"Worker-0": ("c0", 0), "Worker-1": ("c0", 0)}
        gpu = job("gpu", ("Worker", 1, {GPU: 1}))
        assert isinstance(p.fit(gpu, gpu.pods, Mode.GUARANTEED), NoFit)


# -- CPU-only pods ---------------------------------------------------------------------------


@PLACERS
def test_cpu_only_pods_go_to_cpu_only_nodes_and_take_no_gpu(kind: str) -> None:
    p = placer(kind)
    fit = bind(p, job("cpu", ("Worker", 3, {"cpu": "6", "memory": "8Gi"})))
    # first fit by cpu and memory, the gang's node first: two pods fill c0's 16 cpu
    assert where(fit) == {"Worker-0": ("c0", 0), "Worker-1": ("c0", 0), "Worker-2": ("c1", 0)}
    assert p.allocated()[GPU] == 0
    assert p.allocated()["cpu"] == 18_000
    p.release("default/cpu")
    p.check_invariants()
    assert p.allocated()["cpu"] == 0


@PLACERS
def test_cpu_only_pods_never_use_a_gpu_nodes_cpu(kind: str) -> None:
    """A full GPU node has cpu left, but it belongs to its GPUs: CPU pods wait for CPU nodes."""
    p = placer(kind)
    bind(p, job("gpus", ("Worker", 2, {GPU: 4, "cpu": "1"})))
    bind(p, job("fill", ("Worker", 2, {"cpu": "16"})))
    more = job("more", ("Worker", 1, {"cpu": "1"}))
    answer = p.fit(more, more.pods, Mode.GUARANTEED)
    assert isinstance(answer, NoFit)
    assert "asking no GPU (1 CPU in all)" in answer.reason
    assert "CPU-only nodes" in answer.reason


@PLACERS
def test_a_cpu_only_job_naming_a_gpu_type_still_goes_to_cpu_only_nodes(kind: str) -> None:
    p = placer(kind)
    fit = bind(p, job("cpu", ("Worker", 1, {"cpu": "1"}), sku="V100"))
    assert where(fit) == {"Worker-0": ("c0", 0)}


@PLACERS
def test_a_cpu_only_pod_larger_than_every_cpu_node_does_not_fit(kind: str) -> None:
    p = placer(kind)
    big = job("big", ("Worker", 1, {"cpu": "17"}))
    assert isinstance(p.fit(big, big.pods, Mode.GUARANTEED), NoFit)
    heavy = job("heavy", ("Worker", 1, {"memory": "65Gi"}))
    assert isinstance(p.fit(heavy, heavy.pods, Mode.GUARANTEED), NoFit)


@PLACERS
def test_a_guaranteed_cpu_only_job_preempts_opportunistic_ones_on_cpu_nodes(kind: str) -> None:
    p = placer(kind)
    bind(p, job("oppo", ("Worker", 2, {"cpu": "16"}), priority=-1), Mode.OPPORTUNISTIC)
    mine = job("mine", ("Worker", 1, {"cpu": "8"}))
    assert isinstance(p.fit(mine, mine.pods, Mode.GUARANTEED), NoFit)
    fit = p.fit(mine, mine.pods, Mode.GUARANTEED, preempt=True)
    assert isinstance(fit, Fit), fit
    assert fit.victims == ("default/oppo",)
    p.release("default/oppo")
    p.bind(mine, charge_for(mine, Mode.GUARANTEED), fit)
    p.check_invariants()
    # released by the cycle (quota reclaim): its room counts as free
    other = job("other", ("Worker", 1, {"cpu": "16"}))
    assert isinstance(
        p.fit(other, other.pods, Mode.GUARANTEED, released=frozenset({"default/mine"})), Fit
    )


# -- mixed jobs and a GPU pod's cpu and memory ------------------------------------------------


@PLACERS
def test_a_mixed_job_puts_its_gpu_master_on_gpus_and_its_workers_on_cpu_nodes(kind: str) -> None:
    p = placer(kind)
    mixed = job("mixed", ("Master", 1, {GPU: 2, "cpu": "2"}), ("Worker", 2, {"cpu": "4"}))
    fit = bind(p, mixed)
    assert where(fit) == {"Master-0": ("g0", 2), "Worker-0": ("c0", 0), "Worker-1": ("c0", 0)}
    assert [pp.pod for pp in fit.pods] == ["Master-0", "Worker-0", "Worker-1"]
    assert p.holds("default/mixed")
    assert p.allocated() == Resources.parse({GPU: 2, "cpu": 10})
    assert p.placement_of("default/mixed") and len(p.placement_of("default/mixed")) == 3
    assert [c.key for c in p.running()] == ["default/mixed"]
    # a bad CPU node names the job; it keeps running
    assert p.set_node_health("c0", False) == ["default/mixed"]
    assert p.capacity()["cpu"] == 16_000 * 3
    assert p.set_node_health("c0", True) == []
    p.release("default/mixed")
    p.check_invariants()
    assert not p.holds("default/mixed")
    assert p.allocated() == Resources()


@PLACERS
def test_a_gpu_first_gang_with_a_cpu_worker_never_puts_gpus_on_a_cpu_node(kind: str) -> None:
    """A CPU-only pod placed first touches a CPU node; the GPU pods after it go elsewhere."""
    p = placer(kind)
    mixed = job("mixed", ("Master", 1, {"cpu": "1"}), ("Worker", 2, {GPU: 1}))
    fit = bind(p, mixed)
    assert where(fit)["Master-0"] == ("c0", 0)
    assert {where(fit)[w][0] for w in ("Worker-0", "Worker-1")} <= {"g0", "g1"}
    assert all(where(fit)[w][1] == 1 for w in ("Worker-0", "Worker-1"))


@PLACERS
def test_a_gpu_pods_cpu_is_counted_on_its_node(kind: str) -> None:
    p = placer(kind)
    # 16 cpu per GPU node: a GPU pod asking 20 cpu fits no node
    greedy = job("greedy", ("Worker", 1, {GPU: 1, "cpu": "20"}))
    assert isinstance(p.fit(greedy, greedy.pods, Mode.GUARANTEED), NoFit)
    hungry = job("hungry", ("Worker", 1, {GPU: 1, "memory": "100Gi"}))
    assert isinstance(p.fit(hungry, hungry.pods, Mode.GUARANTEED), NoFit)
    # two pods of 10 cpu cannot share a node of 16 cpu, whatever their GPUs leave
    fit = bind(p, job("two", ("Worker", 2, {GPU: 1, "cpu": "10"})))
    assert len({pp.node for pp in fit.pods}) == 2


def test_mixed_job_restored_where_it_ran() -> None:
    c = config()
    first = CellPlacer("c", c)
    mixed = job("mixed", ("Master", 1, {GPU: 1}), ("Worker", 2, {"cpu": "8"}))
    fit = bind(first, mixed)
    again = CellPlacer("c", c)
    again.restore(mixed, charge_for(mixed, Mode.GUARANTEED), fit.pods)
    again.check_invariants()
    assert set(again.placement_of(mixed.key)) == set(fit.pods)
    assert again.allocated() == first.allocated()
    # c0 is held again in full: of two pods of 9 cpu only one fits (on c1)
    two = job("two", ("Worker", 2, {"cpu": "9"}))
    assert isinstance(again.fit(two, two.pods, Mode.GUARANTEED), NoFit)
    assert isinstance(first.fit(two, two.pods, Mode.GUARANTEED), NoFit)
    one = job("one", ("Worker", 1, {"cpu": "9"}))
    assert where(bind(again, one)) == {"Worker-0": ("c1", 0)}


def test_without_cpu_only_nodes_the_cell_placer_places_cpu_pods_as_before() -> None:
    """No CPU-only pool: a pod asking no GPU takes leaf cells by its cpu (HiveD's
    proportional skuTypes), as it always did."""
    p = CellPlacer("c", config(cpu_nodes=0))
    fit = bind(p, job("cpu", ("Worker", 1, {"cpu": "6"})))
    assert where(fit) == {"Worker-0": ("g0", 2)}


def test_without_cpu_only_nodes_the_capacity_placer_uses_any_node() -> None:
    p = CapacityPlacer("c", {"g0": Resources.parse({GPU: 4, "cpu": 16})})
    fit = bind(p, job("cpu", ("Worker", 1, {"cpu": "6"})))
    assert where(fit) == {"Worker-0": ("g0", 0)}


# -- quota in cpu and memory ------------------------------------------------------------------


def test_a_queues_cpu_max_admits_within_it_and_refuses_beyond() -> None:
    tree = QuotaTree.build(
        make_node(
            {
                "name": "root",
                "min": {"cpu": 64, "memory": "256Gi", GPU: 8},
                "max": {"cpu": 64, "memory": "256Gi", GPU: 8},
                "children": [
                    {"name": "q", "min": {"cpu": 8}, "max": {"cpu": 20, "memory": "40Gi"}},
                ],
            }
        )
    )
    state = SchedulerState(tree, {"c": CellPlacer("c", config())})
    from fleet.core import events

    fits = job("fits", ("Worker", 2, {"cpu": "8", "memory": "16Gi"}))
    too_much = job("too-much", ("Worker", 1, {"cpu": "6"}))
    too_big = job("too-big", ("Worker", 1, {"memory": "41Gi"}))
    for j in (fits, too_much, too_big):
        events.apply(state, events.Submitted(j))
    decisions = cycle(state, 0.0)
    state.check_invariants()
    confirm_stops(state, decisions)
    admitted = {d.job for d in decisions if isinstance(d, Admit)}
    waits = {d.job: d.reason for d in decisions if isinstance(d, Wait)}
    assert admitted == {"default/fits"}
    assert "CPUs" in waits["default/too-much"]
    assert "memory" in waits["default/too-big"]
    assert state.tree.used("q")["cpu"] == 16_000
    assert state.tree.used("q")["memory"] == 32 * 2**30
