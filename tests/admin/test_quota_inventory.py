"""Quota against inventory over HTTP: the over-promise report, its metric, ``capacity: auto``."""

from __future__ import annotations

import copy
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from fleet.service.settings import POLICIES
from tests.admin.conftest import YAML, Api

#: The example members (policies/clusters/example.yaml): 48 GPUs (32 A100, 16 H100),
#: 768 cpu, 6Ti.  The auto tree's guarantees fit them.
AUTO = yaml.safe_load((POLICIES / "quota" / "auto-tree.yaml").read_text(encoding="utf-8"))
CLUSTERS = list(yaml.safe_load_all((POLICIES / "clusters" / "example.yaml").read_text()))
JSON = {"Accept": "application/json"}
GPU = "nvidia.com/gpu"


def auto_tree(**mins: dict[str, Any]) -> dict[str, Any]:
    """The auto example with some nodes' ``min`` replaced."""
    doc = copy.deepcopy(AUTO)
    stack = [doc["spec"]["root"]]
    while stack:
        n = stack.pop()
        if n["name"] in mins:
            n["min"] = mins[n["name"]]
        stack.extend(n.get("children") or [])
    return doc


def dump(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc, sort_keys=False)


async def status(api: Api) -> dict[str, Any]:
    await api.settle()  # the view of the iteration that made the change
    tree: dict[str, Any] = await api.call("GET", "/api/v1/quota-tree", headers=JSON, status=200)
    return dict(tree["status"])


async def overpromised_metric(api: Api) -> dict[str, float]:
    await api.settle()
    resp = await api.client.get("/metrics")
    text = await resp.text()
    return {
        s.labels["resource"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "fleet_quota_overpromised"
    }


async def test_a_tree_that_promises_more_than_exists_is_reported_not_refused(api: Api) -> None:
    greedy = auto_tree(platform={GPU: 24, "gpu.fleet.io/V100": 4}, **{"team-c": {GPU: 24}})
    # research 32 + platform 24 = 56 GPUs of 48; 4 V100 of none.
    shortfalls = [
        {"resource": "gpu.fleet.io/V100", "promised": "4", "held": "0", "short": "4"},
        {"resource": GPU, "promised": "56", "held": "48", "short": "8"},
    ]
    dry = await api.call(
        "PUT", "/api/v1/quota-tree?dryRun=All", data=dump(greedy), headers=YAML, status=200
    )
    assert dry["dryRun"] is True and dry["overpromised"] == shortfalls
    assert (await overpromised_metric(api)).get(GPU) == 0.0  # nothing applied yet
    done = await api.call("PUT", "/api/v1/quota-tree", data=dump(greedy), headers=YAML, status=200)
    assert done["version"] == 2 and done["overpromised"] == shortfalls
    await api.settle()
    found = await status(api)
    assert found["overpromised"] == shortfalls
    assert found["capacity"] == "auto" and found["held"][GPU] == "48"
    metric = await overpromised_metric(api)
    assert metric[GPU] == 8.0 and metric["gpu.fleet.io/V100"] == 4.0 and metric["cpu"] == 0.0
    # The stored tree is what the administrator wrote: capacity: auto, no figures.
    text = await api.call("GET", "/api/v1/quota-tree", status=200)
    assert yaml.safe_load(text)["spec"]["root"] == greedy["spec"]["root"]
    # A PATCH answers the report too.
    patched = await api.call(
        "PATCH",
        "/api/v1/quota-tree/nodes/platform?dryRun=All",
        json={"min": {"gpu.fleet.io/V100": None}},
        status=200,
    )
    assert patched["dryRun"] is True and patched["overpromised"] == shortfalls[1:]


async def test_an_explicit_root_is_compared_too(api: Api) -> None:
    doc = yaml.safe_load((POLICIES / "quota" / "team-tree.yaml").read_text(encoding="utf-8"))
    doc["spec"]["root"]["min"][GPU] = doc["spec"]["root"]["max"][GPU] = 56
    dry = await api.call(
        "PUT", "/api/v1/quota-tree?dryRun=All", data=dump(doc), headers=YAML, status=200
    )
    assert {"resource": GPU, "promised": "56", "held": "48", "short": "8"} in dry["overpromised"]


async def test_an_auto_root_follows_the_member_clusters(api: Api) -> None:
    await api.call("PUT", "/api/v1/quota-tree", data=dump(AUTO), headers=YAML, status=200)
    found = await status(api)
    assert found["root"]["min"][GPU] == "48" and found["root"]["max"][GPU] == "48"
    assert found["root"]["max"]["gpu.fleet.io/H100"] == "16"
    assert found["overpromised"] == []
    queues = await api.call("GET", "/api/v1/queues", status=200)
    assert queues["items"][0]["min"][GPU] == "48"

    edge = copy.deepcopy(next(c for c in CLUSTERS if c["metadata"]["name"] == "edge"))
    edge["metadata"]["name"] = "edge-2"
    await api.call("PUT", "/api/v1/clusters/edge-2", data=dump(edge), headers=YAML, status=201)
    found = await status(api)
    assert found["root"]["min"][GPU] == "56" and found["root"]["max"]["gpu.fleet.io/A100"] == "40"

    await api.call(
        "PUT",
        "/api/v1/clusters/west/nodes/west-node-0/health",
        json={"healthy": False, "reason": "broken"},
        status=200,
    )
    found = await status(api)
    assert found["root"]["min"][GPU] == "48" and found["held"]["gpu.fleet.io/H100"] == "8"
    # team-b is guaranteed 8 H100s: still held.
    assert found["overpromised"] == []

    await api.call("DELETE", "/api/v1/clusters/west", status=202)  # draining: not held
    found = await status(api)
    assert found["root"]["min"][GPU] == "40"
    short = {s["resource"]: s for s in found["overpromised"]}
    assert sorted(short) == ["gpu.fleet.io/H100", "memory", GPU]  # 640 cpu still held
    assert short["gpu.fleet.io/H100"] == {
        "resource": "gpu.fleet.io/H100",
        "promised": "8",
        "held": "0",
        "short": "8",
    }
    assert short[GPU]["short"] == "8" and short["memory"]["held"] == "5Ti"


async def test_capacity_errors_name_their_field(api: Api) -> None:
    both = copy.deepcopy(AUTO)
    both["spec"]["root"]["min"] = {GPU: 48}
    low = copy.deepcopy(AUTO)
    low["spec"]["root"]["children"][0]["capacity"] = "auto"
    typo = copy.deepcopy(AUTO)
    typo["spec"]["root"]["capacity"] = "automatic"
    for doc, path in (
        (both, "spec.root.min"),
        (low, "spec.root.children[0].capacity"),
        (typo, "spec.root.capacity"),
    ):
        problem = await api.call(
            "PUT", "/api/v1/quota-tree", data=dump(doc), headers=YAML, status=422
        )
        assert [e["path"] for e in problem["errors"]] == [path], problem
