"""The fleet of policies/clusters/labelled.yaml, end to end over HTTP: three members
described by their nodes' labels (A100 40GB, A100 80GB and H100 nodes in racks),
virtual clusters as requests, jobs asking for GPUs by memory and product
(policies/jobs/gpu-attributes.yaml), and a node removed under a running gang."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import yaml

from fleet.api import keys
from fleet.service.settings import POLICIES
from tests.admin.conftest import YAML, Api

CLUSTERS = POLICIES / "clusters" / "labelled.yaml"
A100_40 = "NVIDIA-A100-SXM4-40GB"
A100_80 = "NVIDIA-A100-SXM4-80GB"
H100 = "NVIDIA-H100-80GB-HBM3"


def cell_map(listing: dict[str, Any]) -> list[str]:
    """One line per node: its GPU type, health and the job on each GPU (``.`` free)."""
    lines = []
    for node in listing["nodes"]:
        gpus = " ".join((c.get("job") or ".").rsplit("/", 1)[-1] for c in node["cells"])
        health = "" if node["healthy"] else f"  BAD: {node['reason']}"
        lines.append(f"{node['name']:>12} {node['gpuType']:<22} {gpus}{health}")
    return lines


async def cell_maps(api: Api) -> dict[str, list[str]]:
    out = {}
    for name in ("a100-40", "a100-80", "h100"):
        found = await api.call("GET", f"/api/v1/clusters/{name}/cells", status=200)
        out[name] = cell_map(found)
    return out


async def placed(api: Api, name: str) -> tuple[str, str, set[str]]:
    job = await api.call("GET", f"/api/v1/jobs/team-b/{name}", status=200)
    return job["state"], job.get("cluster") or "", {p["node"] for p in job.get("placement", [])}


async def test_members_built_from_labels_place_jobs_by_gpu_attributes_and_follow_a_removed_node(
    api_with: Callable[..., Awaitable[Api]],
) -> None:
    api = await api_with(clusters=CLUSTERS, quota=POLICIES / "quota" / "labelled-tree.yaml")
    await api.settle()
    listing = await api.call("GET", "/api/v1/clusters", status=200)
    built = {c["name"]: c["topology"] for c in listing["items"]}
    assert {name: t["nodes"] for name, t in built.items()} == {
        "a100-40": 4,
        "a100-80": 4,
        "h100": 4,
    }
    assert all(not t["shortfalls"] for t in built.values())
    before = await cell_maps(api)
    assert all(line.count(".") == 8 for lines in before.values() for line in lines)

    jobs = (POLICIES / "jobs" / "gpu-attributes.yaml").read_text(encoding="utf-8")
    await api.call("POST", "/api/v1/submissions", data=jobs, headers=YAML, status=201)
    await api.settle()
    # > 40 GiB per GPU: the 80 GB A100s (the first matching type), never the 40 GB ones.
    state, cluster, nodes = await placed(api, "big-memory")
    assert (state, cluster, len(nodes)) == ("Running", "a100-80", 2)
    # A100s of either memory, not Hopper: the first A100 type.
    assert (await placed(api, "any-a100"))[:2] == ("Running", "a100-40")
    detail = await api.call("GET", "/api/v1/jobs/team-b/big-memory", status=200)
    assert detail["gpuTypes"] == [A100_80, H100]  # what its terms accept, in order
    assert (detail["gpuTerms"], detail["gpuType"]) == ("GPU memory > 40960", A100_80)
    tree = api.client.app[keys.SERVICE].loop.state.tree
    used = tree.used("team-b")
    assert used[f"gpu.fleet.io/{A100_80}"] == 16 and used[f"gpu.fleet.io/{A100_40}"] == 4
    assert used[f"gpu.fleet.io/{H100}"] == 0
    running = await cell_maps(api)

    # A node of the running gang leaves its member: the gang is preempted, queued
    # again, and runs on the member's other nodes; no GPU is held twice.
    gone = sorted(nodes)[0]
    doc = next(
        d for d in yaml.safe_load_all(CLUSTERS.read_text()) if d["metadata"]["name"] == "a100-80"
    )
    doc["spec"]["nodes"] = [n for n in doc["spec"]["nodes"] if n["name"] != gone]
    await api.call(
        "PUT", "/api/v1/clusters/a100-80", data=yaml.safe_dump(doc), headers=YAML, status=200
    )
    await api.settle()
    # Its run there failed over (as on a node gone bad), so it runs on the other type
    # its terms accept, and is charged for that one now.
    state, cluster, moved = await placed(api, "big-memory")
    after = await cell_maps(api)
    assert (state, cluster, len(moved)) == ("Running", "h100", 2)
    assert not any(line.lstrip().startswith(gone) for line in after["a100-80"])
    assert len(after["a100-80"]) == 3 and all("big-memory" not in x for x in after["a100-80"])
    held = [line for line in after["h100"] if "big-memory" in line]
    assert len(held) == 2 and all(line.count("big-memory") == 8 for line in held)
    used = tree.used("team-b")
    assert used[f"gpu.fleet.io/{H100}"] == 16 and used[f"gpu.fleet.io/{A100_80}"] == 0
    job = await api.call("GET", "/api/v1/jobs/team-b/big-memory", status=200)
    assert job["gpuType"] == H100
    assert any(f"node {gone}" in str(e) and "removed" in str(e) for e in job["events"]), job

    for title, maps in (("before", before), ("running", running), ("after", after)):
        print(f"== cell maps {title}")
        for name, lines in maps.items():
            print(f"-- {name}")
            print("\n".join(lines))
