"""A real member described only by its Nodes' labels: its cells come from the KWOK
Nodes Fleet watches, and follow them while jobs run (a node added, a node deleted).

The member is the session's ``alpha`` with Nodes of its own, labelled as the GPU
operator labels them (product, memory) and placed in a zone and a rack; the
topology's nodeSelector takes these Nodes only (``alpha``'s own two stay out).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube.conftest import NAMESPACE, Fleet, submission
from tests.kube.controlplane import ApiError, ControlPlane, wait_for
from tests.kube.real_operator import MemberControllers, kwok_node

pytestmark = pytest.mark.slow

ZONE = "topology.kubernetes.io/zone"
RACK = "fleet.io/rack"
SELECTED = "fleet.io/test-topology"
A100 = "NVIDIA-A100-SXM4-80GB"
LAB = ("alpha-lab-0", "alpha-lab-1", "alpha-lab-2")

QUOTA = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: kube-topology}
spec:
  root:
    name: root
    min: {nvidia.com/gpu: 16, kube-queue/max-jobs: 100}
    max: {nvidia.com/gpu: 16, kube-queue/max-jobs: 100}
    children:
      - name: team-a
        min: {nvidia.com/gpu: 16, kube-queue/max-jobs: 100}
        max: {nvidia.com/gpu: 16, kube-queue/max-jobs: 100}
        namespaces: [team-a]
"""


def add_lab_node(
    plane: ControlPlane, name: str, product: str = A100, memory: str = "81920"
) -> None:
    """A KWOK Node of 4 GPUs (A100-80GB unless told) in zone z1, rack r1, selected by
    the topology."""
    plane.add_node(name, 4)
    plane.admin.request(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {
            "metadata": {
                "labels": {
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.memory": memory,
                    ZONE: "z1",
                    RACK: "r1",
                    SELECTED: "true",
                }
            }
        },
        content_type="application/merge-patch+json",
    )
    kwok_node(plane, name)


def delete_node(plane: ControlPlane, name: str) -> None:
    with contextlib.suppress(ApiError):
        plane.admin.request("DELETE", f"/api/v1/nodes/{name}")


@pytest.fixture
def alpha(
    members: dict[str, ControlPlane], operators: dict[str, MemberControllers]
) -> Iterator[ControlPlane]:
    """``alpha`` with two labelled Nodes (the third is added by the test); all three go
    when the test ends."""
    plane = members["alpha"]
    for name in LAB[:2]:
        add_lab_node(plane, name)
    yield plane
    for name in LAB:
        delete_node(plane, name)


def labelled_member(plane: ControlPlane) -> dict[str, Any]:
    return {
        "apiVersion": "fleet.io/v1alpha1",
        "kind": "MemberCluster",
        "metadata": {"name": "alpha"},
        "spec": {
            "kubeconfig": {"path": str(plane.kubeconfig()), "context": "alpha"},
            "topology": {
                "levels": [ZONE, RACK],
                "nodeSelector": {"matchLabels": {SELECTED: "true"}},
            },
        },
    }


def view(fleet: Fleet) -> dict[str, Any]:
    return fleet.clusters_view()["alpha"]


def cell_map(fleet: Fleet) -> dict[str, dict[str, Any]]:
    found = fleet.request("GET", "/api/v1/clusters/alpha/cells")
    return {n["name"]: n for n in found["nodes"]}


def nodes_are(fleet: Fleet, *names: str) -> bool:
    shown = view(fleet).get("topology") or {}
    return shown.get("nodes") == len(names) and sorted(cell_map(fleet)) == sorted(names)


def test_a_member_described_by_labels_gets_its_cells_and_follows_its_nodes(
    fleet_factory: Any, alpha: ControlPlane
) -> None:
    fleet: Fleet = fleet_factory([labelled_member(alpha)], quota=QUOTA)
    wait_for(lambda: nodes_are(fleet, *LAB[:2]), "the two labelled nodes in the cells", 30)
    shown = view(fleet)
    assert shown["health"] == "Healthy"
    assert shown["gpus"]["total"] == 8
    assert shown["topology"]["gpuTypes"] == [{"product": A100, "gpus": 8, "nodes": 2}]
    assert shown["topology"]["shortfalls"] == []
    mapped = cell_map(fleet)
    assert [c["index"] for c in mapped[LAB[0]]["cells"]] == [0, 1, 2, 3]
    assert mapped[LAB[0]]["gpuType"] == A100

    # A node added while jobs run becomes usable.
    fleet.submit(submission("first", workers=1, gpus=4))
    first = fleet.wait_state("first", "Running")
    (there,) = {p["node"] for p in first["placement"]}
    fleet.submit(submission("wide", workers=2, gpus=4))
    assert fleet.wait_state("wide", "Queued")["cluster"] is None
    add_lab_node(alpha, LAB[2])
    wait_for(lambda: nodes_are(fleet, *LAB), "the added node in the cells", 30)
    wide = fleet.wait_state("wide", "Running")
    assert {p["node"] for p in wide["placement"]} == set(LAB) - {there}
    assert fleet.job("first")["placement"] == first["placement"]  # it kept its cells
    assert view(fleet)["topology"]["gpuTypes"] == [{"product": A100, "gpus": 12, "nodes": 3}]

    # A node deleted under a running job: the job is queued again and runs elsewhere.
    fleet.request("DELETE", f"/api/v1/jobs/{NAMESPACE}/wide")
    fleet.wait_state("wide", "Cancelled")
    wait_for(
        lambda: all(
            c.get("job") is None for n in set(LAB) - {there} for c in cell_map(fleet)[n]["cells"]
        ),
        "the cancelled job's cells free",
    )
    started = time.monotonic()
    delete_node(alpha, there)
    wait_for(lambda: nodes_are(fleet, *(set(LAB) - {there})), "the deleted node out of the cells")
    moved = wait_for(
        lambda: (
            (j := fleet.job("first"))["state"] == "Running"
            and {p["node"] for p in j["placement"]} != {there}
            and j
        ),
        "the job running on another node",
    )
    assert time.monotonic() - started < 30
    assert {p["node"] for p in moved["placement"]} <= set(LAB) - {there}
    # The Node's absence is reported as its health first (at once), then its leaving
    # the cells (within a second): the job was preempted by the first.
    messages = [e["message"] for e in moved["events"]]
    assert any(m.startswith(f"node {there} of alpha went bad") for m in messages), messages


def test_a_job_asking_for_more_than_40_gib_per_gpu_lands_on_the_80_gb_gpus_only(
    fleet_factory: Any, alpha: ControlPlane
) -> None:
    add_lab_node(alpha, LAB[2], "NVIDIA-A100-SXM4-40GB", "40960")
    fleet: Fleet = fleet_factory([labelled_member(alpha)], quota=QUOTA)
    wait_for(lambda: nodes_are(fleet, *LAB), "the three labelled nodes in the cells", 30)
    types = view(fleet)["topology"]["gpuTypes"]
    assert {t["product"]: t["nodes"] for t in types} == {A100: 2, "NVIDIA-A100-SXM4-40GB": 1}
    terms = [
        {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.memory", "operator": "Gt", "values": ["40960"]}
            ]
        }
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }
    for name in ("big-0", "big-1", "big-2"):
        fleet.submit(submission(name, workers=1, gpus=4, affinity=affinity))
    placed = [fleet.wait_state(name, "Running") for name in ("big-0", "big-1")]
    assert {p["node"] for job in placed for p in job["placement"]} == set(LAB[:2])
    # The 80 GB GPUs are busy: the third waits, though the 40 GB node is free.
    waiting = fleet.wait_state("big-2", "Queued")
    assert waiting["cluster"] is None
    assert "GPU memory > 40960" in str(waiting)
    assert all(c.get("job") is None for c in cell_map(fleet)[LAB[2]]["cells"])
