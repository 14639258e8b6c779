"""A job of several GPU types: tried one type at a time, charged for the type it runs on.

Two leaf types in one member (the cell allocator) or on two sets of nodes
(the capacity placer): a job that accepts both starts on the second when the
first is full, its charge types its GPUs by the type used
(``gpu.fleet.io/<type>``), a typed ``max`` holds for that type, a job queued
again asks for both types again, a restored running job is narrowed to its
type, and the waiting reason names what the job asked for.
"""

from __future__ import annotations

import dataclasses

import pytest

from fleet.core import snapshot
from fleet.core.capacity import CapacityPlacer
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cycle import cycle
from fleet.core.decisions import Admit, Wait
from fleet.core.jobs import Job
from fleet.core.placement import Placer
from fleet.core.resources import Resources
from fleet.core.state import SchedulerState
from tests.core.factories import confirm_stops, finish, make_job, make_tree, submit

GPU = "nvidia.com/gpu"
A = "A100-40GB"
B = "A100-80GB"


def cells() -> CellPlacer:
    node = {"childCellNumber": 4, "isNodeLevel": True}
    config = load_cell_config(
        {
            "physicalCluster": {
                "skuTypes": {A: {"gpu": 1}, B: {"gpu": 1}},
                "cellTypes": {
                    "A-NODE": {"childCellType": A, **node},
                    "B-NODE": {"childCellType": B, **node},
                },
                "physicalCells": [
                    {"cellType": "A-NODE", "cellAddress": "a-0"},
                    {"cellType": "B-NODE", "cellAddress": "b-0"},
                ],
            }
        }
    )
    return CellPlacer("c1", config)


def capacity() -> CapacityPlacer:
    nodes = {"a-0": Resources({GPU: 4}), "b-0": Resources({GPU: 4})}
    return CapacityPlacer("c1", nodes, {"a-0": A, "b-0": B})


PLACERS = [pytest.param(cells, id="cells"), pytest.param(capacity, id="capacity")]


def tree(**root_max: int) -> dict[str, object]:
    limit = {GPU: 16, "kube-queue/max-jobs": 10, **root_max}
    return {
        "name": "root",
        "min": {GPU: 8},
        "max": limit,
        "children": [
            {"name": "team-a", "min": {GPU: 8}, "max": {GPU: 16}, "namespaces": ["default"]}
        ],
    }


def state_of(placer: Placer, **root_max: int) -> SchedulerState:
    return SchedulerState(make_tree(tree(**root_max)), {"c1": placer})


def either(name: str, gpus: int = 4) -> Job:
    job = make_job(name, gpus=gpus)
    return dataclasses.replace(job, gpu_skus=(A, B), gpu_terms="GPU memory > 30000")


def admitted(decisions: list[object]) -> dict[str, Admit]:
    return {d.job: d for d in decisions if isinstance(d, Admit)}


@pytest.mark.parametrize("build", PLACERS)
def test_a_two_type_job_starts_on_the_second_type_when_the_first_is_full(build) -> None:  # type: ignore[no-untyped-def]
    state = state_of(build())
    submit(state, make_job("first", gpus=4, sku=A), either("second"))
    found = admitted(cycle(state))
    assert {p.node for p in found["default/first"].pods} == {"a-0"}
    assert {p.node for p in found["default/second"].pods} == {"b-0"}
    # charged for the type it runs on, as a job naming that type would be
    assert state.tree.used("team-a")[f"gpu.fleet.io/{B}"] == 4
    assert state.tree.used("team-a")[f"gpu.fleet.io/{A}"] == 4
    assert state.running["default/second"].job.gpu_sku == B
    state.check_invariants()


@pytest.mark.parametrize("build", PLACERS)
def test_the_first_type_is_tried_first(build) -> None:  # type: ignore[no-untyped-def]
    state = state_of(build())
    submit(state, either("one"))
    found = admitted(cycle(state))
    assert {p.node for p in found["default/one"].pods} == {"a-0"}
    assert state.tree.used("team-a")[f"gpu.fleet.io/{A}"] == 4


@pytest.mark.parametrize("build", PLACERS)
def test_a_typed_max_holds_for_the_type_used(build) -> None:  # type: ignore[no-untyped-def]
    """No room for A100-40GB under the root's typed max: the job runs on the other
    type, though cells of the first are free."""
    state = state_of(build(), **{f"gpu.fleet.io/{A}": 2})
    submit(state, either("one"))
    found = admitted(cycle(state))
    assert {p.node for p in found["default/one"].pods} == {"b-0"}
    assert state.tree.used("root")[f"gpu.fleet.io/{B}"] == 4
    # with both types' maxes full, it waits, and the reason says why for each
    state = state_of(build(), **{f"gpu.fleet.io/{A}": 2, f"gpu.fleet.io/{B}": 2})
    submit(state, either("two"))
    waits = [d for d in cycle(state) if isinstance(d, Wait)]
    assert [w.job for w in waits] == ["default/two"]
    reason = waits[0].reason
    assert reason.startswith(f"waits for GPUs of {A} or {B} (GPU memory > 30000): ")
    assert f"{A} GPUs" in reason and f"{B} GPUs" in reason


@pytest.mark.parametrize("build", PLACERS)
def test_the_waiting_reason_names_the_terms_when_matching_gpus_are_busy(build) -> None:  # type: ignore[no-untyped-def]
    state = state_of(build())
    submit(state, make_job("a", gpus=4, sku=A), make_job("b", gpus=4, sku=B))
    cycle(state)
    submit(state, either("late"))
    waits = {d.job: d.reason for d in cycle(state) if isinstance(d, Wait)}
    assert waits["default/late"] == (
        f"waits for GPUs of {A} or {B} (GPU memory > 30000): "
        "no cluster can hold all the job's pods now: c1: not enough free capacity"
    )


@pytest.mark.parametrize("build", PLACERS)
def test_a_preempted_job_asks_for_every_type_again(build) -> None:  # type: ignore[no-untyped-def]
    state = state_of(build())
    submit(state, either("low"))
    cycle(state)
    assert state.running["default/low"].job.gpu_sku == A
    # a higher-priority job that needs those very GPUs preempts it
    high = dataclasses.replace(make_job("high", gpus=4, sku=A), priority=100)
    submit(state, high)
    decisions = cycle(state)
    confirm_stops(state, decisions)
    queued = state.pending()
    assert [j.key for j in queued] == ["default/low"]
    assert queued[0].gpu_sku is None and queued[0].gpu_skus == (A, B)
    found = admitted(cycle(state))
    assert {p.node for p in found["default/low"].pods} == {"b-0"}
    finish(state, "default/high")
    state.check_invariants()


def test_a_restored_running_job_is_narrowed_to_its_type() -> None:
    state = state_of(cells())
    submit(state, make_job("a", gpus=4, sku=A), either("two"))
    cycle(state)
    taken = snapshot.take(state)
    plain = snapshot.to_plain(taken)
    # the store keeps the job as it asks (several types, none chosen)
    for record in plain["running"]:
        if record["job"]["key"] == "default/two":
            record["job"] = snapshot.job_to_plain(state.running["default/two"].job.asked())
    again = snapshot.restore(snapshot.from_plain(plain), make_tree(tree()), {"c1": cells()})
    assert again.running["default/two"].job.gpu_sku == B
    assert again.running["default/two"].job.gpu_skus == (A, B)
    again.check_invariants()


def test_old_job_records_still_load() -> None:
    job = make_job("old", gpus=1, sku=A)
    plain = snapshot.job_to_plain(job)
    assert "gpu_skus" not in plain and "gpu_terms" not in plain
    assert snapshot.job_from_plain(plain) == job
    several = either("new")
    assert snapshot.job_from_plain(snapshot.job_to_plain(several)) == several
