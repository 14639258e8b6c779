"""Scheduling scenarios that print every decision, for comparing runs under different hash seeds.

``python -m tests.core.determinism_scenarios`` runs every scenario with the
capacity placer and with the cell placer and prints, per run, a header line
``== scenario / placer`` and then the ``repr`` of each decision of each cycle
in the order the cycle returned them (cycles separated by ``-- cycle N``).
Nothing is sorted: two runs are the same only if they print the same bytes.
``tests/core/test_determinism.py`` runs this module under several
``PYTHONHASHSEED`` values and compares the output.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from fleet.core import events
from fleet.core.capacity import CapacityPlacer
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cycle import Preempt, cycle
from fleet.core.jobs import Job
from fleet.core.placement import Placer
from fleet.core.state import SchedulerState
from tests.cells.factories import rack_config
from tests.core.factories import make_job, make_node, make_nodes, make_tree

GPU = "nvidia.com/gpu"

TREE: dict[str, Any] = {
    "name": "root",
    "min": {GPU: 16},
    "max": {GPU: 16},
    "children": [
        {"name": "team-a", "min": {GPU: 8}, "max": {GPU: 16}},
        {"name": "team-b", "min": {GPU: 8}, "max": {GPU: 16}},
    ],
}

#: Four nodes of four GPUs each: the capacity placer's nodes and the cell placer's racks.
NODES, GPUS = 4, 4


def capacity_placer() -> Placer:
    return CapacityPlacer("c1", make_nodes(NODES, gpus=GPUS))


def cell_placer() -> Placer:
    # Two racks of two nodes; VC team-a owns two nodes, team-b is shared-pool only.
    config = rack_config(2, NODES // 2, GPUS, {"team-a": [("RACK.NODE", 2)]})
    return CellPlacer("c1", load_cell_config(config))


PLACERS: Mapping[str, Callable[[], Placer]] = {"capacity": capacity_placer, "cells": cell_placer}


def new_state(placer: Placer, tree: Mapping[str, Any] = TREE) -> SchedulerState:
    return SchedulerState(make_tree(tree), {"c1": placer})


def run_cycles(state: SchedulerState, steps: list[list[Job]]) -> Iterator[str]:
    """Submit each step's jobs, run one cycle per step, yield the decisions' reprs."""
    for n, jobs in enumerate(steps):
        for job in jobs:
            events.apply(state, events.Submitted(job))
        yield f"-- cycle {n}"
        decisions = cycle(state, float(n))
        for decision in decisions:
            yield repr(decision)
        state.check_invariants()
        for decision in decisions:  # the shell confirms every preemption
            if isinstance(decision, Preempt) and not decision.unit:
                events.apply(state, events.Stopped(decision.job))


def reclaim(state: SchedulerState) -> Iterator[str]:
    """team-b borrows the whole cluster; team-a's gang reclaims two borrowed jobs."""
    b = [make_job(f"b{i}", queue="team-b", gpus=GPUS, seq=i) for i in range(4)]
    a = [make_job("a-gang", queue="team-a", pods=2, gpus=GPUS, seq=10)]
    yield from run_cycles(state, [b, a])


def priority(state: SchedulerState) -> Iterator[str]:
    """Low-priority jobs of team-a fill its max; a high-priority gang preempts two of them."""
    tree = {
        "name": "root",
        "min": {GPU: 16},
        "children": [
            {"name": "team-a", "min": {GPU: 8}, "max": {GPU: 8}},
            {"name": "team-b", "min": {GPU: 8}, "max": {GPU: 8}},
        ],
    }
    events.apply(state, events.QuotaTreeReplaced(make_node(tree)))
    low = [make_job(f"low{i}", queue="team-a", gpus=2, priority=10, seq=i) for i in range(4)]
    high = [make_job("high", queue="team-a", pods=2, gpus=2, priority=100, seq=10)]
    yield from run_cycles(state, [low, high])


def gang_min(state: SchedulerState) -> Iterator[str]:
    """Elastic gangs start with their minimum, then the rest of the cluster fills."""
    steps = [
        [make_job("filler", queue="team-b", gpus=3, seq=0)],
        [
            make_job("elastic", queue="team-a", pods=4, gpus=GPUS, min_members=2, seq=1),
            make_job("elastic-2", queue="team-b", pods=3, gpus=2, min_members=1, seq=2),
        ],
        [make_job("tail", queue="team-a", gpus=1, seq=3)],
    ]
    yield from run_cycles(state, steps)


def opportunistic(state: SchedulerState) -> Iterator[str]:
    """Opportunistic jobs soak up idle GPUs; guaranteed jobs preempt them."""
    oppo = [
        make_job(f"oppo{i}", queue=("team-a", "team-b")[i % 2], gpus=2, priority=-1, seq=i)
        for i in range(8)
    ]
    owners = [
        make_job("owner-a", queue="team-a", pods=2, gpus=GPUS, seq=20),
        make_job("owner-b", queue="team-b", pods=2, gpus=2, seq=21),
    ]
    yield from run_cycles(state, [oppo, owners])


SCENARIOS: Mapping[str, Callable[[SchedulerState], Iterator[str]]] = {
    "reclaim": reclaim,
    "priority": priority,
    "gang-min": gang_min,
    "opportunistic": opportunistic,
}


def main() -> None:
    out = sys.stdout
    for name, scenario in SCENARIOS.items():
        for placer_name, make in PLACERS.items():
            out.write(f"== {name} / {placer_name}\n")
            for line in scenario(new_state(make())):
                out.write(line + "\n")


if __name__ == "__main__":
    main()
