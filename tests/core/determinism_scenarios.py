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
from fleet.core.cells.config import load_cell_config
from fleet.core.cells.placer import CellPlacer
from fleet.core.cycle import Preempt, cycle
from fleet.core.jobs import Job
from fleet.core.placement import Placer
from fleet.core.state import SchedulerState
from fleet.testing.cells import rack_config
from tests.core.factories import make_job, make_nodes, make_state, make_tree

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


def capacity_state(tree: Mapping[str, Any]) -> SchedulerState:
    return make_state(tree, {"c1": make_nodes(NODES, gpus=GPUS)})


def cell_state(tree: Mapping[str, Any]) -> SchedulerState:
    # Two racks of two nodes; VC team-a owns two nodes, team-b is shared-pool only.
    config = rack_config(2, NODES // 2, GPUS, {"team-a": [("RACK.NODE", 2)]})
    placer: Placer = CellPlacer("c1", load_cell_config(config))
    return SchedulerState(make_tree(tree), {"c1": placer})


#: Placer name -> a scheduler state over one cluster ``c1`` with that placer, for a tree.
PLACERS: Mapping[str, Callable[[Mapping[str, Any]], SchedulerState]] = {
    "capacity": capacity_state,
    "cells": cell_state,
}


def run_cycles(state: SchedulerState, steps: list[list[Job]]) -> Iterator[str]:
    """Submit each step's jobs, run one cycle per step, yield the decisions' reprs."""
    for n, jobs in enumerate(steps):
        for job in jobs:
            events.apply(state, events.Submitted(job))
        yield f"-- cycle {n}"
        decisions = cycle(state, float(n))
        for decision in decisions:
            yield repr(decision)
        for decision in decisions:  # the shell confirms every preemption
            if isinstance(decision, Preempt) and not decision.unit:
                events.apply(state, events.Stopped(decision.job))
        state.check_invariants()


#: A scenario: its quota tree and its steps (the jobs submitted before each cycle).
Scenario = tuple[Mapping[str, Any], Callable[[], list[list[Job]]]]


def reclaim() -> list[list[Job]]:
    """team-b borrows the whole cluster; team-a's gang reclaims two borrowed jobs."""
    b = [make_job(f"b{i}", queue="team-b", gpus=GPUS, seq=i) for i in range(4)]
    a = [make_job("a-gang", queue="team-a", pods=2, gpus=GPUS, seq=10)]
    return [b, a]


#: team-a and team-b may not borrow: a job above max must preempt in its queue.
CAPPED: dict[str, Any] = {
    "name": "root",
    "min": {GPU: 16},
    "children": [
        {"name": "team-a", "min": {GPU: 8}, "max": {GPU: 8}},
        {"name": "team-b", "min": {GPU: 8}, "max": {GPU: 8}},
    ],
}


def priority() -> list[list[Job]]:
    """Low-priority jobs of team-a fill its max; a high-priority gang preempts two of them."""
    low = [make_job(f"low{i}", queue="team-a", gpus=2, priority=10, seq=i) for i in range(4)]
    high = [make_job("high", queue="team-a", pods=2, gpus=2, priority=100, seq=10)]
    return [low, high]


def gang_min() -> list[list[Job]]:
    """Elastic gangs start with their minimum, then the rest of the cluster fills."""
    steps = [
        [make_job("filler", queue="team-b", gpus=3, seq=0)],
        [
            make_job("elastic", queue="team-a", pods=4, gpus=GPUS, min_members=2, seq=1),
            make_job("elastic-2", queue="team-b", pods=3, gpus=2, min_members=1, seq=2),
        ],
        [make_job("tail", queue="team-a", gpus=1, seq=3)],
    ]
    return steps


def opportunistic() -> list[list[Job]]:
    """Opportunistic jobs soak up idle GPUs; guaranteed jobs preempt them."""
    oppo = [
        make_job(f"oppo{i}", queue=("team-a", "team-b")[i % 2], gpus=2, priority=-1, seq=i)
        for i in range(8)
    ]
    owners = [
        make_job("owner-a", queue="team-a", pods=2, gpus=GPUS, seq=20),
        make_job("owner-b", queue="team-b", pods=2, gpus=2, seq=21),
    ]
    return [oppo, owners]


SCENARIOS: Mapping[str, Scenario] = {
    "reclaim": (TREE, reclaim),
    "priority": (CAPPED, priority),
    "gang-min": (TREE, gang_min),
    "opportunistic": (TREE, opportunistic),
}


def main() -> None:
    out = sys.stdout
    for name, (tree, steps) in SCENARIOS.items():
        for placer_name, new_state in PLACERS.items():
            out.write(f"== {name} / {placer_name}\n")
            for line in run_cycles(new_state(tree), steps()):
                out.write(line + "\n")


if __name__ == "__main__":
    main()
