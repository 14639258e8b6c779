"""Hypothesis state machine: random small cell configs and operations keep the invariants."""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from fleet.core.cells import CellPlacer, load_cell_config
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit
from fleet.core.resources import Resources


def make_config(leaves: int, nodes: int, racks: int, owed_a: int, owed_b: int) -> dict[str, Any]:
    cells = [
        {
            "cellType": "RACK",
            "cellChildren": [{"cellAddress": f"r{r}n{n}"} for n in range(nodes)],
        }
        for r in range(racks)
    ]
    total = nodes * racks
    owed_a = min(owed_a, total)
    owed_b = min(owed_b, total - owed_a)
    vcs: dict[str, Any] = {}
    if owed_a:
        vcs["a"] = {"virtualCells": [{"cellType": "RACK.NODE", "cellNumber": owed_a}]}
    if owed_b:
        vcs["b"] = {"virtualCells": [{"cellType": "RACK.NODE.PAIR", "cellNumber": owed_b * leaves}]}
    return {
        "physicalCluster": {
            "cellTypes": {
                "PAIR": {"childCellType": "GPU", "childCellNumber": 2},
                "NODE": {"childCellType": "PAIR", "childCellNumber": leaves, "isNodeLevel": True},
                "RACK": {"childCellType": "NODE", "childCellNumber": nodes},
            },
            "physicalCells": cells,
        },
        "virtualClusters": vcs,
    }


class CellMachine(RuleBasedStateMachine):
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.placer: CellPlacer | None = None
        self.n = 0
        self.nodes: list[str] = []

    @initialize(
        leaves=st.integers(1, 2),
        nodes=st.integers(1, 3),
        racks=st.integers(1, 3),
        owed_a=st.integers(0, 3),
        owed_b=st.integers(0, 2),
    )
    def setup(self, leaves: int, nodes: int, racks: int, owed_a: int, owed_b: int) -> None:
        config = load_cell_config(make_config(leaves, nodes, racks, owed_a, owed_b))
        self.placer = CellPlacer("sm", config)
        self.nodes = sorted(config.nodes())

    @rule(
        target=jobs,
        queue=st.sampled_from(["a", "b", "team"]),
        priority=st.sampled_from([-1, 10, 100]),
        borrowed=st.booleans(),
        pods=st.integers(1, 3),
        gpus=st.integers(0, 4),
        preempt=st.booleans(),
    )
    def place(
        self, queue: str, priority: int, borrowed: bool, pods: int, gpus: int, preempt: bool
    ) -> str:
        assert self.placer is not None
        self.n += 1
        key = f"ns/j{self.n}"
        group = ReplicaGroup("Worker", pods, Resources({"nvidia.com/gpu": gpus}))
        job = Job(key, queue, priority, self.n, (group,))
        mode = (
            Mode.OPPORTUNISTIC if priority < 0 else Mode.BORROWED if borrowed else Mode.GUARANTEED
        )
        fit = self.placer.fit(job, job.pods, mode, preempt=preempt)
        self.placer.check_invariants()
        if isinstance(fit, Fit):
            assert len(fit.pods) == pods
            assert all(len(p.gpus) == gpus for p in fit.pods)
            if not preempt:
                assert fit.victims == ()
            for victim in fit.victims:
                self.placer.release(victim)
            self.placer.bind(job, mode, fit)
        return key

    @rule(key=jobs)
    def release(self, key: str) -> None:
        assert self.placer is not None
        self.placer.release(key)
        assert not self.placer.holds(key)

    @rule(index=st.integers(0, 20), healthy=st.booleans())
    def health(self, index: int, healthy: bool) -> None:
        assert self.placer is not None
        node = self.nodes[index % len(self.nodes)]
        affected = self.placer.set_node_health(node, healthy)
        if healthy:
            assert affected == []
        for key in affected:
            self.placer.release(key)

    @invariant()
    def consistent(self) -> None:
        if self.placer is not None:
            self.placer.check_invariants()


CellMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
TestCellMachine = CellMachine.TestCase
