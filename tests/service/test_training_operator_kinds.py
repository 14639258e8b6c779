"""TFJob and MPIJob v1, as their projects' examples write them, run whole on simulated members.

The upstream examples (``tests/kinds/examples/``, with their sources) are
submitted as written but for their namespace (a leaf of the test tree lists
``team-a``) and the simulated run time, each with a policy that selects its
kind; every pod of each starts together, and the jobs succeed.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from fleet.clock import VirtualClock
from fleet.testing import running
from fleet.testing.running import new_jobs, running_service, settings
from tests import paths
from tests.service.test_loop import states


def example(name: str) -> dict[str, Any]:
    (doc,) = yaml.safe_load_all((paths.KIND_EXAMPLES / name).read_text())
    doc["metadata"]["namespace"] = "team-a"
    doc["metadata"]["annotations"] = {"fleet.io/simulated-duration": "30s"}
    return dict(doc)


def policy(doc: dict[str, Any]) -> dict[str, Any]:
    name = doc["metadata"]["name"]
    selector = {"apiVersion": doc["apiVersion"], "kind": doc["kind"], "name": name}
    return {
        "apiVersion": "policy.one.alibabacloud.com/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "resourceSelectors": [selector],
            "placement": {"replicaScheduling": {"customSchedulingType": "Gang"}},
        },
    }


@pytest.mark.parametrize(
    ("file", "pods"),
    [
        ("tfjob-simple.yaml", ["Worker-0", "Worker-1"]),
        ("mpijob-v1.yaml", ["Launcher-0", "Worker-0", "Worker-1"]),
    ],
)
async def test_an_upstream_example_runs_whole(
    database_url: str, file: str, pods: list[str]
) -> None:
    doc = example(file)
    key = f"team-a/{doc['metadata']['name']}"
    clock = VirtualClock(0.0)
    async with running_service(settings(database_url), clock) as svc:
        text = yaml.safe_dump_all([policy(doc), doc])
        await svc.intake.accept(new_jobs(text, svc.tree, svc.clusters))
        await running.settle(svc.loop, clock)
        assert await states(svc) == {key: "Running"}
        assert sorted(p.pod for p in svc.loop.state.running[key].pods) == pods
        await running.settle(svc.loop, clock, 31)
        assert await states(svc) == {key: "Succeeded"}
        svc.loop.state.check_invariants()
