"""The policies as tree texts: ``fleet-no-memory`` turns every fairSharing's memory off."""

from __future__ import annotations

import pytest
import yaml

from fleet.sim import policies

TREE = """\
apiVersion: scheduling.sigs.k8s.io/v1beta1
kind: ElasticQuotaTree
metadata: {name: lab}
spec:
  root:
    name: root
    fairSharing: {halfLife: 24h, weight: 2}
    max: {nvidia.com/gpu: 16}
    children:
      - name: team-a
        fairSharing: {weight: 3}
        min: {nvidia.com/gpu: 8}
        children:
          - name: a1
            fairSharing: {halfLife: 1h}
            min: {nvidia.com/gpu: 4}
          - name: a2
            min: {nvidia.com/gpu: 4}
      - name: team-b
        min: {nvidia.com/gpu: 8}
---
apiVersion: v1
kind: Note
spec:
  root: {name: root, fairSharing: {halfLife: 24h}}
"""


def nodes(tree: dict[str, object]) -> dict[str, dict[str, object]]:
    out = {str(tree["name"]): tree}
    for child in tree.get("children") or []:  # type: ignore[attr-defined]
        out.update(nodes(child))
    return out


def test_fleet_no_memory_sets_every_half_life_to_zero_and_keeps_the_weights() -> None:
    text = policies.tree_text("fleet-no-memory", TREE)
    tree_doc, other = yaml.safe_load_all(text)
    got = nodes(tree_doc["spec"]["root"])
    assert got["root"]["fairSharing"] == {"halfLife": "0s", "weight": 2}
    assert got["team-a"]["fairSharing"] == {"weight": 3, "halfLife": "0s"}
    assert got["a1"]["fairSharing"] == {"halfLife": "0s"}
    assert "fairSharing" not in got["a2"] and "fairSharing" not in got["team-b"]
    assert {k: v for k, v in got["team-b"].items()} == {
        "name": "team-b",
        "min": {"nvidia.com/gpu": 8},
    }
    assert got["team-a"]["min"] == {"nvidia.com/gpu": 8} and got["root"]["max"] == {
        "nvidia.com/gpu": 16
    }
    assert "halfLife: 0s\n" in text
    assert other == {
        "apiVersion": "v1",
        "kind": "Note",
        "spec": {"root": {"name": "root", "fairSharing": {"halfLife": "24h"}}},
    }


def test_fleet_no_memory_changes_nothing_in_a_tree_without_fair_sharing() -> None:
    plain = TREE.replace("fairSharing", "labels")
    assert list(yaml.safe_load_all(policies.tree_text("fleet-no-memory", plain))) == list(
        yaml.safe_load_all(plain)
    )


def test_fleet_no_memory_is_a_known_policy_with_the_cell_allocator() -> None:
    assert policies.check(["fleet", "fleet-no-memory"]) == ["fleet", "fleet-no-memory"]
    with pytest.raises(
        policies.PolicyError, match="known: fleet, capacity, private, fleet-no-memory"
    ):
        policies.check(["fair"])


def test_capacity_runs_without_fair_share_memory_as_yarn_capacity_scheduler_does() -> None:
    assert policies.tree_text("capacity", TREE) == policies.tree_text("fleet-no-memory", TREE)
    assert policies.tree_text("fleet", TREE) == TREE
