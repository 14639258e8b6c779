"""Hypothesis state machine: random small cell configs and operations keep the invariants.

Every fit it is given is bound right away, after its victims (and, in
``preempt_release_bind``, the released jobs) have left: ``bind`` must never
refuse a fit it was just given.  Configs with ``skuTypes`` make cpu count as
leaf cells and let pods need none at all.
"""

from __future__ import annotations

from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, rule

from fleet.core.cells.config import load_cell_config
from fleet.core.cells.demands import leaf_cells_needed
from fleet.core.cells.placer import CellPlacer
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit
from fleet.core.resources import Resources

#: The skuType of the leaves when a config has one: 4 cores per GPU.
SKU = {"gpu": 1, "cpu": "4", "memory": "16Gi"}


def make_config(
    leaves: int, nodes: int, racks: int, owed_a: int, owed_b: int, sku: bool = False
) -> dict[str, Any]:
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
    physical: dict[str, Any] = {
        "cellTypes": {
            "PAIR": {"childCellType": "GPU", "childCellNumber": 2},
            "NODE": {"childCellType": "PAIR", "childCellNumber": leaves, "isNodeLevel": True},
            "RACK": {"childCellType": "NODE", "childCellNumber": nodes},
        },
        "physicalCells": cells,
    }
    if sku:
        physical["skuTypes"] = {"GPU": SKU}
    return {"physicalCluster": physical, "virtualClusters": vcs}


class CellMachine(RuleBasedStateMachine):
    jobs = Bundle("jobs")

    def __init__(self) -> None:
        super().__init__()
        self.placer: CellPlacer | None = None
        self.n = 0
        self.nodes: list[str] = []
        self.sku: object | None = None

    @initialize(
        leaves=st.integers(1, 2),
        nodes=st.integers(1, 3),
        racks=st.integers(1, 3),
        owed_a=st.integers(0, 3),
        owed_b=st.integers(0, 2),
        sku=st.booleans(),
    )
    def setup(
        self, leaves: int, nodes: int, racks: int, owed_a: int, owed_b: int, sku: bool
    ) -> None:
        config = load_cell_config(make_config(leaves, nodes, racks, owed_a, owed_b, sku))
        self.placer = CellPlacer("sm", config)
        self.nodes = sorted(config.nodes())
        self.sku = config.sku_types.get("GPU")

    def new_job(
        self, queue: str, priority: int, borrowed: bool, pods: int, gpus: int, cpu: int
    ) -> tuple[Job, Mode]:
        self.n += 1
        request = {"nvidia.com/gpu": gpus, "cpu": cpu}
        group = ReplicaGroup("Worker", pods, Resources(request))
        job = Job(f"ns/j{self.n}", queue, priority, self.n, (group,))
        mode = (
            Mode.OPPORTUNISTIC if priority < 0 else Mode.BORROWED if borrowed else Mode.GUARANTEED
        )
        return job, mode

    def fit_and_bind(
        self, job: Job, mode: Mode, preempt: bool, released: frozenset[str] = frozenset()
    ) -> None:
        """Fit; if it fits, the victims and released jobs leave and ``bind`` must accept."""
        assert self.placer is not None
        fit = self.placer.fit(job, job.pods, mode, preempt=preempt, released=released)
        self.placer.check_invariants()
        if not isinstance(fit, Fit):
            return
        leaves = leaf_cells_needed(job.pods[0].request, self.sku)
        assert len(fit.pods) == len(job.pods)
        assert all(len(p.gpus) == leaves for p in fit.pods)
        if not preempt:
            assert fit.victims == ()
        for key in sorted({*fit.victims, *released}):
            self.placer.release(key)
        self.placer.bind(job, charge_for(job, mode), fit)  # never refuses a fit it was just given

    @rule(
        target=jobs,
        queue=st.sampled_from(["a", "b", "team"]),
        priority=st.sampled_from([-1, 10, 100]),
        borrowed=st.booleans(),
        pods=st.integers(1, 3),
        gpus=st.integers(0, 4),
        cpu=st.sampled_from([0, 0, 3000, 8000]),
        preempt=st.booleans(),
    )
    def place(
        self,
        queue: str,
        priority: int,
        borrowed: bool,
        pods: int,
        gpus: int,
        cpu: int,
        preempt: bool,
    ) -> str:
        job, mode = self.new_job(queue, priority, borrowed, pods, gpus, cpu)
        self.fit_and_bind(job, mode, preempt)
        return job.key

    @rule(
        target=jobs,
        queue=st.sampled_from(["a", "b", "team"]),
        priority=st.sampled_from([10, 100, 120]),
        borrowed=st.booleans(),
        pods=st.integers(1, 2),
        gpus=st.integers(0, 4),
        released=st.lists(jobs, max_size=2, unique=True),
    )
    def preempt_release_bind(
        self,
        queue: str,
        priority: int,
        borrowed: bool,
        pods: int,
        gpus: int,
        released: list[str],
    ) -> str:
        """Fit with preemption and released jobs, both leave, then bind."""
        job, mode = self.new_job(queue, priority, borrowed, pods, gpus, 0)
        self.fit_and_bind(job, mode, True, frozenset(released))
        return job.key

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
