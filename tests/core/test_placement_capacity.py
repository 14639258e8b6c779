"""The capacity-only placer: best fit by free GPUs, whole gangs, victims where they help."""

from __future__ import annotations

import pytest

from fleet.core.capacity import CapacityPlacer
from fleet.core.charges import charge_for
from fleet.core.checks import InvariantError
from fleet.core.jobs import Job, Mode
from fleet.core.placement import BindError, Fit, NoFit
from fleet.core.resources import Resources
from tests.core.factories import make_job, make_nodes


def placer(nodes: int = 2, gpus: int = 8, **extra: str) -> CapacityPlacer:
    return CapacityPlacer("c1", make_nodes(nodes, gpus=gpus, **extra))


def bind(p: CapacityPlacer, job: Job, mode: Mode = Mode.GUARANTEED) -> Fit:
    fit = p.fit(job, job.pods, mode)
    assert isinstance(fit, Fit), fit
    p.bind(job, charge_for(job, mode), fit)
    p.check_invariants()
    return fit


def test_gpu_indices_are_handed_out_lowest_first_and_never_twice() -> None:
    p = placer(nodes=1)
    first = bind(p, make_job("a", gpus=3))
    second = bind(p, make_job("b", gpus=2))
    assert first.pods[0].gpus == (0, 1, 2)
    assert second.pods[0].gpus == (3, 4)


def test_best_fit_prefers_the_fullest_node_that_still_fits() -> None:
    p = placer(nodes=2)
    bind(p, make_job("half", gpus=4))  # node-0 now has 4 free
    fit = bind(p, make_job("small", gpus=2))
    assert fit.pods[0].node == "node-0"


def test_a_gang_is_placed_whole_or_not_at_all() -> None:
    p = placer(nodes=2)
    bind(p, make_job("blocker", gpus=4))
    gang = make_job("gang", pods=2, gpus=8)
    assert isinstance(p.fit(gang, gang.pods, Mode.GUARANTEED), NoFit)
    assert p.allocated()["nvidia.com/gpu"] == 4


def test_cpu_and_memory_limit_nodes_that_declare_them() -> None:
    p = placer(nodes=1, gpus=8, cpu="4", memory="16Gi")
    bind(p, make_job("a", gpus=1, cpu="3"))
    fat = make_job("b", gpus=1, cpu="2")
    assert isinstance(p.fit(fat, fat.pods, Mode.GUARANTEED), NoFit)


def test_sku_jobs_only_land_on_nodes_of_that_sku() -> None:
    nodes = {
        "a100": Resources.parse({"nvidia.com/gpu": 8}),
        "h100": Resources.parse({"nvidia.com/gpu": 8}),
    }
    p = CapacityPlacer("c1", nodes, skus={"a100": "A100", "h100": "H100"})
    fit = bind(p, make_job("typed", gpus=2, sku="H100"))
    assert fit.pods[0].node == "h100"


def test_released_jobs_count_as_free() -> None:
    p = placer(nodes=1)
    bind(p, make_job("old", gpus=8))
    new = make_job("new", gpus=8)
    assert isinstance(p.fit(new, new.pods, Mode.GUARANTEED), NoFit)
    fit = p.fit(new, new.pods, Mode.GUARANTEED, released=frozenset({"default/old"}))
    assert isinstance(fit, Fit) and fit.victims == ()


@pytest.mark.parametrize(
    ("victim_mode", "victim_priority", "preemptor_mode", "expected"),
    [
        pytest.param(Mode.OPPORTUNISTIC, -1, Mode.BORROWED, True, id="anyone-preempts-oppo"),
        pytest.param(Mode.BORROWED, 10, Mode.GUARANTEED, True, id="guaranteed-preempts-borrowed"),
        pytest.param(Mode.BORROWED, 10, Mode.BORROWED, False, id="borrowed-spares-borrowed"),
        pytest.param(Mode.GUARANTEED, 10, Mode.GUARANTEED, True, id="higher-priority-same-queue"),
    ],
)
def test_victim_rules(
    victim_mode: Mode, victim_priority: int, preemptor_mode: Mode, expected: bool
) -> None:
    p = placer(nodes=1)
    bind(p, make_job("victim", gpus=8, priority=victim_priority), victim_mode)
    job = make_job("preemptor", gpus=8, priority=100)
    fit = p.fit(job, job.pods, preemptor_mode, preempt=True)
    assert isinstance(fit, Fit) is expected
    if expected:
        assert isinstance(fit, Fit) and fit.victims == ("default/victim",)


def test_guaranteed_jobs_of_other_queues_and_non_preemptible_jobs_are_never_victims() -> None:
    p = placer(nodes=2)
    bind(p, make_job("other-queue", queue="team-b", gpus=8, priority=10))
    bind(p, make_job("crit", gpus=8, priority=10, preemptible=False))
    job = make_job("preemptor", gpus=8, priority=100)
    assert isinstance(p.fit(job, job.pods, Mode.GUARANTEED, preempt=True), NoFit)


def test_victims_are_taken_on_one_node_where_they_make_room() -> None:
    p = placer(nodes=2)
    # node-0: two 4-GPU opportunistic jobs; node-1: eight 1-GPU opportunistic jobs.
    for i in range(2):
        bind(p, make_job(f"big-{i}", gpus=4, priority=-1), Mode.OPPORTUNISTIC)
    for i in range(8):
        bind(p, make_job(f"small-{i}", gpus=1, priority=-1), Mode.OPPORTUNISTIC)
    job = make_job("eight", gpus=8, priority=10)
    fit = p.fit(job, job.pods, Mode.GUARANTEED, preempt=True)
    assert isinstance(fit, Fit)
    assert sorted(fit.victims) == ["default/big-0", "default/big-1"]
    assert fit.pods[0].node == "node-0"


def test_release_returns_everything() -> None:
    p = placer(nodes=1)
    bind(p, make_job("a", pods=2, gpus=4))
    p.release("default/a")
    p.check_invariants()
    assert p.allocated() == Resources() and p.free_gpus() == 8 and not p.holds("default/a")


def test_the_allocated_total_is_checked_when_every_node_is_bad() -> None:
    p = placer(nodes=2)
    bind(p, make_job("a", pods=2, gpus=4))
    for node in ("node-0", "node-1"):
        p.set_node_health(node, False)
    assert p.capacity() == Resources() and p.allocated()["nvidia.com/gpu"] == 8
    p.check_invariants()  # the jobs still hold their GPUs on the bad nodes
    p._free._allocated["nvidia.com/gpu"] += 1  # a real drift is still caught
    with pytest.raises(InvariantError, match="allocated total drifted"):
        p.check_invariants()
    p._free._allocated["nvidia.com/gpu"] -= 1
    p.release("default/a")
    p.check_invariants()


def test_a_fit_overtaken_by_another_bind_is_refused_even_when_answered_last() -> None:
    # The fit answered last binds without a second check only while no node
    # changed since; here another job took its GPUs in between.
    p = placer(nodes=1)
    first, last = make_job("first", gpus=8), make_job("last", gpus=8)
    early = p.fit(first, first.pods, Mode.BORROWED)
    late = p.fit(last, last.pods, Mode.BORROWED)
    assert isinstance(early, Fit) and isinstance(late, Fit)
    p.bind(first, charge_for(first, Mode.BORROWED), early)
    with pytest.raises(BindError, match="no longer fits"):
        p.bind(last, charge_for(last, Mode.BORROWED), late)
    assert not p.holds(last.key)
    assert p.placement_of(first.key) == early.pods
    p.check_invariants()


def test_the_fit_just_answered_binds_as_answered() -> None:
    p = placer(nodes=2)
    bind(p, make_job("half", gpus=4))
    gang = make_job("gang", pods=3, gpus=4)
    fit = p.fit(gang, gang.pods, Mode.BORROWED)
    assert isinstance(fit, Fit)
    p.bind(gang, charge_for(gang, Mode.BORROWED), fit)
    assert p.placement_of(gang.key) == fit.pods
    assert p.allocated()["nvidia.com/gpu"] == 16
    # Binding it again is refused: its pods are placed already.
    with pytest.raises(BindError, match="not a pod it can place"):
        p.bind(gang, charge_for(gang, Mode.BORROWED), fit)
    p.check_invariants()
