"""Seed lab 6 experiments at the placer level (the cycle-level scenarios live elsewhere)."""

from __future__ import annotations

from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, NoFit
from fleet.core.resources import Resources
from tests.cells.conftest import FIXTURES, load_yaml

CARD = {"nvidia.com/gpu": 1, "cpu": 2000, "memory": 4 * 2**30}


def placer(name: str) -> CellPlacer:
    return CellPlacer("lab", load_cell_config(load_yaml(FIXTURES / name)))


def job(name: str, queue: str, priority: int, pods: int = 1, gang: bool = True) -> Job:
    group = ReplicaGroup("Worker", pods, Resources(CARD))
    return Job(f"lab/{name}", queue, priority, 0, (group,), gang=gang)


def mode_of(j: Job) -> Mode:
    return Mode.OPPORTUNISTIC if j.priority < 0 else Mode.GUARANTEED


def place(p: CellPlacer, j: Job, preempt: bool = False) -> Fit | NoFit:
    fit = p.fit(j, j.pods, mode_of(j), preempt=preempt)
    if isinstance(fit, Fit):
        for victim in fit.victims:
            p.release(victim)
        p.bind(j, charge_for(j, mode_of(j)), fit)
    p.check_invariants()
    return fit


def test_vc_safety_vc1_never_runs_guaranteed_work_on_defaults_node() -> None:
    p = placer("lab6-two-vcs.yaml")
    first = place(p, job("a", "vc1", 10))
    assert isinstance(first, Fit) and first.pods[0].node == "hostname-dan"
    for name in ("b", "c", "d"):
        waiting = p.fit(job(name, "vc1", 10), job(name, "vc1", 10).pods, Mode.GUARANTEED)
        assert isinstance(waiting, NoFit), "default's idle node must stay default's"
        assert "VC vc1" in waiting.reason
        assert isinstance(
            p.fit(job(name, "vc1", 10), job(name, "vc1", 10).pods, Mode.GUARANTEED, preempt=True),
            NoFit,
        )


def test_prod_preempts_a_running_test_job_in_the_same_vc() -> None:
    p = placer("lab6-two-vcs.yaml")
    assert isinstance(place(p, job("test", "vc1", 10)), Fit)
    prod = job("prod", "vc1", 100)
    assert isinstance(p.fit(prod, prod.pods, Mode.GUARANTEED), NoFit)
    fit = place(p, prod, preempt=True)
    assert isinstance(fit, Fit) and fit.victims == ("lab/test",)
    assert fit.pods[0].node == "hostname-dan"
    assert not p.holds("lab/test") and p.holds("lab/prod")


def test_test_job_does_not_preempt_prod() -> None:
    p = placer("lab6-two-vcs.yaml")
    place(p, job("prod", "vc1", 100))
    later = job("test", "vc1", 10)
    assert isinstance(p.fit(later, later.pods, Mode.GUARANTEED, preempt=True), NoFit)


def test_oppo_runs_on_idle_default_cells_and_is_preempted_by_defaults_test_job() -> None:
    p = placer("lab6-two-vcs.yaml")
    place(p, job("prod", "vc1", 100))
    oppo = place(p, job("oppo", "vc1", -1))
    assert isinstance(oppo, Fit) and oppo.pods[0].node == "hostname-carol"
    mine = job("mine", "default", 10)
    assert isinstance(p.fit(mine, mine.pods, Mode.GUARANTEED), NoFit)
    fit = place(p, mine, preempt=True)
    assert isinstance(fit, Fit) and fit.victims == ("lab/oppo",)
    assert fit.pods[0].node == "hostname-carol"


def test_two_node_gang_never_starts_one_replica_early() -> None:
    p = placer("lab6-one-vc.yaml")
    place(p, job("one", "default", 10))
    gang = job("gang", "default", 10, pods=2)
    assert isinstance(p.fit(gang, gang.pods, Mode.GUARANTEED), NoFit)
    assert not p.holds("lab/gang")
    p.release("lab/one")
    fit = place(p, gang)
    assert isinstance(fit, Fit)
    assert sorted(pp.node for pp in fit.pods) == ["hostname-carol", "hostname-dan"]


def test_non_gang_job_places_one_pod_now_and_another_later() -> None:
    p = placer("lab6-one-vc.yaml")
    place(p, job("one", "default", 10))
    elastic = job("elastic", "default", 10, pods=2, gang=False)
    first = p.fit(elastic, elastic.pods[:1], Mode.GUARANTEED)
    assert isinstance(first, Fit)
    p.bind(elastic, charge_for(elastic, Mode.GUARANTEED), first)
    assert isinstance(p.fit(elastic, elastic.pods[1:], Mode.GUARANTEED), NoFit)
    p.release("lab/one")
    second = p.fit(elastic, elastic.pods[1:], Mode.GUARANTEED)
    assert isinstance(second, Fit)
    p.bind(elastic, charge_for(elastic, Mode.GUARANTEED), second)
    p.check_invariants()
    assert {pp.pod for pp in p.placement_of("lab/elastic")} == {"Worker-0", "Worker-1"}


def test_more_than_the_cluster_never_fits() -> None:
    p = placer("lab6-one-vc.yaml")
    big = job("big", "default", 10, pods=4)
    assert isinstance(p.fit(big, big.pods, Mode.GUARANTEED, preempt=True), NoFit)


def test_bad_node_reports_jobs_and_dooms_the_vc_cell() -> None:
    p = placer("lab6-two-vcs.yaml")
    place(p, job("a", "vc1", 10))
    assert p.set_node_health("hostname-dan", False) == ["lab/a"]
    p.release("lab/a")
    p.check_invariants()
    assert p.doomed_cells() == {"vc1": 1}
    assert p.capacity()["nvidia.com/gpu"] == 1
    assert p.set_node_health("hostname-dan", True) == []
    assert p.doomed_cells() == {}
    p.check_invariants()
