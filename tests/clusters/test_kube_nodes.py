"""A real member's nodes as its topology reads them: reported after the first list,
then on changes (at most once a second), not on heartbeats, not while not ready."""

from __future__ import annotations

from typing import Any

from fleet.clock import VirtualClock
from fleet.clusters.base import MemberEvent, NodeHealth, NodesObserved
from fleet.clusters.kube import objects
from fleet.clusters.kube.nodes import NodeTracker
from fleet.clusters.kube.readiness import OBSERVE_INTERVAL, Readiness
from fleet.manifests.topology import Topology

RACK = "fleet.io/rack"
PRODUCT = "nvidia.com/gpu.product"


def node(
    name: str,
    rack: str = "r1",
    gpus: int = 4,
    *,
    ready: bool = True,
    heartbeat: str = "t0",
    **labels: str,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {PRODUCT: "A100", RACK: rack, **labels},
            "resourceVersion": heartbeat,
        },
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "lastHeartbeatTime": heartbeat,
                }
            ],
            "capacity": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"},
            "allocatable": {
                "nvidia.com/gpu": str(gpus),
                "cpu": "63500m",
                "memory": "500Gi",
                "pods": "110",
            },
        },
    }


def control_plane() -> dict[str, Any]:
    return {
        "metadata": {"name": "control", "labels": {"node-role.kubernetes.io/control-plane": ""}},
        "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}},
    }


def test_what_the_topology_reads_of_a_node() -> None:
    seen = objects.observed_node(node("n-0"))
    assert seen.name == "n-0"
    assert seen.labels == {PRODUCT: "A100", RACK: "r1"}
    # GPUs from the capacity, cpu and memory from the allocatable, nothing else
    assert seen.capacity == {"nvidia.com/gpu": "4", "cpu": "63500m", "memory": "500Gi"}
    assert seen.document()["capacity"] == dict(seen.capacity)


def test_the_tracker_lists_the_nodes_the_topology_counts_and_follows_the_cells() -> None:
    tracker = NodeTracker(["n-0"])
    tracker.replace([node("n-1"), node("n-0"), control_plane()])
    assert [n.name for n in tracker.observed(Topology((RACK,)))] == ["n-0", "n-1"]
    selected = Topology((RACK,), node_selector=lambda labels: labels.get(RACK) == "r2")
    assert tracker.observed(selected) == ()
    tracker.put(node("n-0", ready=False))
    assert tracker.changes(ready=True) == [("n-0", False)]
    # the cells now have n-0 (still bad) and n-1 (healthy until said otherwise)
    assert tracker.follow(["n-0", "n-1"]) == ["n-0"]
    assert tracker.changes(ready=True) == []
    assert tracker.follow(["n-1"]) == []  # n-0 left: forgotten
    tracker.remove(node("n-1"))
    assert tracker.changes(ready=True) == [("n-1", False)]
    assert not tracker.exists("n-1") and tracker.exists("n-0")


async def test_changes_are_reported_once_a_second_and_heartbeats_not_at_all() -> None:
    clock = VirtualClock(100.0)
    emitted: list[MemberEvent] = []
    health = Readiness("m", clock, NodeTracker([]), emitted.append, Topology((RACK,)))
    health.probed(None)
    await health.sync_nodes([node("n-0"), node("n-1")])
    observed = [e for e in emitted if isinstance(e, NodesObserved)]
    assert [[n.name for n in e.nodes] for e in observed] == [["n-0", "n-1"]]
    assert observed[0].at == 100.0
    emitted.clear()

    await clock.advance(5)
    await health.node_event("MODIFIED", node("n-0", heartbeat="t1"))  # a heartbeat
    await clock.advance(5)
    assert emitted == []

    await health.node_event("MODIFIED", node("n-0", rack="r2"))  # relabelled: at once
    await health.node_event("ADDED", node("n-2"))  # within the second: waits
    await health.node_event("DELETED", node("n-1"))
    assert [[n.name for n in e.nodes] for e in emitted] == [["n-0", "n-1"]]
    assert emitted[0].nodes[0].labels[RACK] == "r2"
    await clock.advance(OBSERVE_INTERVAL)
    assert [[n.name for n in e.nodes] for e in emitted] == [["n-0", "n-1"], ["n-0", "n-2"]]
    emitted.clear()

    health.probed("HTTP 401")  # not ready: nothing is said
    await clock.advance(5)
    await health.node_event("ADDED", node("n-3"))
    await clock.advance(5)
    assert not [e for e in emitted if isinstance(e, NodesObserved)]
    emitted.clear()
    health.probed(None)  # ready again: what changed meanwhile
    observed = [e for e in emitted if isinstance(e, NodesObserved)]
    assert [[n.name for n in e.nodes] for e in observed] == [["n-0", "n-2", "n-3"]]

    emitted.clear()
    bad = health.follow(["n-0", "n-2", "n-3", "n-9"], Topology((RACK,)))
    assert bad == []
    assert [e for e in emitted if isinstance(e, NodeHealth)] == [
        NodeHealth("m", "n-9", False, clock.now())
    ]
    await health.close()
