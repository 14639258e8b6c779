"""A replay where a queue's maxRuntime ends jobs: the loop wakes at their due times."""

from __future__ import annotations

from pathlib import Path

from fleet.sim import engine
from fleet.sim.traces import TraceJob

POLICIES = Path(__file__).resolve().parents[2] / "policies"
H = 3600.0
M = 60.0

#: policies/lab/quota-one-vc.yaml with a maxRuntime of an hour on its one queue
TREE = """
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: lab}
spec:
  root:
    name: root
    min: {nvidia.com/gpu: 2}
    max: {nvidia.com/gpu: 2}
    maxRuntime: 1h
    children:
      - name: default
        min: {nvidia.com/gpu: 2}
        max: {nvidia.com/gpu: 2}
        namespaces: [lab]
"""


def test_a_queues_max_runtime_ends_the_jobs_that_run_past_it() -> None:
    jobs = [
        TraceJob("lab/short", "default", 0.0, 10 * M, 1, 1),
        TraceJob("lab/long", "default", 0.0, 3 * H, 1, 1),
        TraceJob("lab/after", "default", 5 * M, 2 * H, 1, 1),  # waits for short's GPU
    ]
    clusters = (POLICIES / "clusters" / "lab-2.yaml").read_text(encoding="utf-8")
    result = engine.run(jobs, TREE, clusters, "fleet", sample_every=H)
    got = {j.key: (j.state, j.start, j.end) for j in result.jobs}
    assert got == {
        "lab/short": ("Succeeded", 0.0, 10 * M),
        "lab/long": ("Failed", 0.0, H),  # ended at its queue's maxRuntime, not at 3h
        "lab/after": ("Failed", 10 * M, 10 * M + H),
    }
    assert result.horizon == 10 * M + H
