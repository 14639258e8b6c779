"""Replay HiveD's algorithm test cases (v1 master) against the CellPlacer.

Every scheduling step of ``algorithm-test-cases.yaml`` is replayed on a fresh
placer built from ``design-hivedscheduler.yaml`` plus the scenario's config
mutations.  An affinity group is one Fleet Job (members -> replica groups,
VC -> queue, leafCellType -> gpu_sku, pinnedCellId -> ``CellPlacer.pin_job``);
HiveD's suggested nodes are emulated with ``CellPlacer.suggest_nodes``.

What must match: the outcome kind (bind / preempt / wait / user error), the
victims (a subset of HiveD's), and for a bind the topology level of the
lowest common cell of the pod's leaves and of its whole group's.  Node names
themselves may differ where they follow from HiveD's list-ordering quirks (H3,
H4).  Steps where Fleet differs on purpose are listed in ``BY_DESIGN`` with
the reason; the test asserts their exact count so the list cannot grow
unnoticed.

The outcome table (scenario, step, outcome) is written to a file, not printed:
``$FLEET_CONFORMANCE_TABLE`` if set, else ``hived-conformance/table.txt`` in
pytest's cache directory (``.pytest_cache/d/``).
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Final

import pytest

from fleet.core.cells.config import load_hived_file_dict
from fleet.core.cells.placer import CellPlacer
from fleet.core.cells.topology import lowest_common
from fleet.core.charges import charge_for
from fleet.core.jobs import Job, Mode, ReplicaGroup
from fleet.core.placement import Fit, NoFit
from fleet.core.resources import Resources
from tests.cells.conftest import REFERENCE, load_yaml

#: Environment variable naming the file the outcome table is written to.
TABLE_ENV: Final = "FLEET_CONFORMANCE_TABLE"

BY_DESIGN: dict[tuple[str, str], str] = {
    ("normalOperations", "pod10"): "a VC without cells of the requested leaf type is not a user "
    "error in Fleet: the guaranteed job may use the shared pool (DESIGN: Cells)",
    (
        "normalOperations",
        "pod11",
    ): "HiveD rejects pods whose spec contradicts their affinity group; "
    "a Fleet Job is built from one spec, so the contradiction cannot be expressed",
    ("normalOperations", "pod13"): "an unknown VC is a queue without a VC here: it uses the shared "
    "pool instead of being a user error",
    ("normalOperations", "pod15"): "Fleet priorities are plain integers (no 0..1000 range)",
    ("suggestedNodes", "pod33@Filtering"): "Fleet has no Filtering/Preempting phases",
    ("statefulPreemption", "pod32"): "HiveD keeps a preempting group's reservation across calls; "
    "Fleet releases victims and binds the preemptor in the same cycle, so nothing is reserved "
    "between fit calls and pod32 may preempt pod28 too",
    ("badNodes", "setBadNode 0.0.2.1"): "Fleet counts doomed cells for all VCs of a chain at once "
    "(2 owed cells, 1 healthy free cell => 1 doomed); HiveD dooms lazily per VC",
    ("badNodes", "delete pod43"): "same aggregate doomed-cell count as above",
    ("badNodes", "setHealthyNode 0.0.2.2"): "same aggregate doomed-cell count as above",
    ("reconfiguration", "*"): "Fleet rebuilds a placer from its own records (restore), not from "
    "pod bind-info annotations: a record on a node the config no longer has is refused, not "
    "ignored, and a VC cell's level is inferred, not read from the annotation",
}

DATA: dict[str, Any] = load_yaml(REFERENCE / "v1-master/algorithm-test-cases.yaml")


def _design() -> dict[str, Any]:
    data: dict[str, Any] = load_yaml(REFERENCE / "v1-master/config/design-hivedscheduler.yaml")
    return data


def _mutate(data: dict[str, Any], scenario: str) -> None:
    vcs = data["virtualClusters"]
    if scenario == "backtrackingCellBinding":
        vcs["VC1"]["virtualCells"][0]["cellNumber"] = 0
        vcs["VC1"]["virtualCells"][3]["cellNumber"] = 3
    elif scenario == "badNodes":
        vcs["VC2"]["virtualCells"][2]["cellType"] = "3-DGX2-V100-NODE.DGX2-V100-NODE"
    elif scenario == "safeRelaxedBuddyAlloc":
        vcs["VC1"]["virtualCells"][0]["cellNumber"] = 4
        vcs["VC1"]["virtualCells"][2]["cellNumber"] = 0
        vcs["VC1"]["virtualCells"][3]["cellNumber"] = 0
        vcs["VC2"]["virtualCells"][2]["cellType"] = "4-DGX2-V100-NODE.2-DGX2-V100-NODE"
        vcs["VC2"]["virtualCells"][2]["cellNumber"] = 1


class Replay:
    def __init__(self, scenario: str) -> None:
        data = _design()
        _mutate(data, scenario)
        self.config = load_hived_file_dict(data)
        self.placer = CellPlacer("hived", self.config, node_restriction=True)
        self.all_nodes = frozenset(self.config.nodes())
        self.scenario = scenario
        self.pods: dict[str, dict[str, Any]] = DATA["pods"]
        self.groups: dict[str, list[dict[str, int]]] = DATA["affinityGroups"]
        self.next_index: dict[tuple[str, int], int] = {}
        self.pod_of: dict[str, str] = {}  # HiveD pod -> Fleet pod name

    def job(self, pod: str) -> Job:
        spec = self.pods[pod]
        members = self.groups[spec["affinityGroup"]]
        groups = tuple(
            ReplicaGroup(
                f"m{i}", m["podNumber"], Resources({"nvidia.com/gpu": m["leafCellNumber"]})
            )
            for i, m in enumerate(members)
        )
        return Job(
            key=spec["affinityGroup"],
            queue=spec["virtualCluster"],
            priority=spec["priority"],
            seq=int(pod[3:]),
            groups=groups,
            gpu_sku=spec["leafCellType"] or None,
        )

    def fleet_pod(self, pod: str) -> str:
        group = self.pods[pod]["affinityGroup"]
        if not self.placer.holds(group):
            # A group that is not placed starts over (HiveD deletes it with its last pod).
            for key in [k for k in self.next_index if k[0] == group]:
                del self.next_index[key]
            for p in [p for p in self.pod_of if self.pods[p]["affinityGroup"] == group]:
                del self.pod_of[p]
        if pod not in self.pod_of:
            spec = self.pods[pod]
            members = self.groups[spec["affinityGroup"]]
            member = next(
                i for i, m in enumerate(members) if m["leafCellNumber"] == spec["leafCellNumber"]
            )
            key = (spec["affinityGroup"], member)
            index = self.next_index.get(key, 0)
            self.next_index[key] = index + 1
            self.pod_of[pod] = f"m{member}-{index}"
        return self.pod_of[pod]

    def suggested(self, value: Any) -> frozenset[str]:
        if value is None:
            return self.all_nodes
        if isinstance(value, list):
            return frozenset(value)
        text = str(value)
        if "appended" in text or ("minus" not in text and "without" not in text):
            return self.all_nodes
        return self.all_nodes - {"0.0.3.1"}

    def level_of(self, cells: list[tuple[str, int]]) -> int:
        leaves = [self.placer.topo.leaf_at[c] for c in cells]
        common = lowest_common(leaves)
        return common.level if common is not None else 1 + max(c.top.level for c in leaves)

    def group_level_expected(self, group: str) -> int | None:
        binds = DATA["expectedBindInfos"]
        cells = [
            (binds[p]["node"], i)
            for p, spec in self.pods.items()
            if spec["affinityGroup"] == group and p in binds and p in self.pod_of
            for i in binds[p]["leafCellIsolation"]
        ]
        if not cells:
            return None
        return self.level_of(cells)

    def schedule(self, step: dict[str, Any]) -> str | None:
        """Run one schedule step; return a mismatch description or None."""
        pod = step["schedule"]
        spec = self.pods[pod]
        expect = step.get("expect", {})
        job = self.job(pod)
        if spec["pinnedCellId"]:
            self.placer.pin_job(job.key, spec["pinnedCellId"])
        mode = Mode.GUARANTEED if spec["priority"] >= 0 else Mode.OPPORTUNISTIC
        self.placer.suggest_nodes(self.suggested(step.get("suggestedNodes")))
        try:
            name = self.fleet_pod(pod)
            if self.placer.holds(job.key):
                placed = {p.pod: p for p in self.placer.placement_of(job.key)}
                got = placed[name]
                return self.check_bind(pod, job.key, [(got.node, i) for i in got.gpus], expect)
            fit = self.placer.fit(job, job.pods, mode)
            if "bind" in expect or (not expect and step.get("add")):
                if not isinstance(fit, Fit) or fit.victims:
                    return f"expected bind, got {fit}"
                mine = next(p for p in fit.pods if p.pod == name)
                problem = self.check_bind(pod, None, [(mine.node, i) for i in mine.gpus], expect)
                if problem is None and step.get("add"):
                    self.placer.bind(job, charge_for(job, mode), fit)
                    self.placer.check_invariants()
                    problem = self.check_group(job.key)
                return problem
            if isinstance(fit, Fit):
                return f"expected no bind, got {fit.pods}"
            full = self.placer.fit(job, job.pods, mode, preempt=True)
            preempting = "Preempting" in expect.get("groupState", {}).values()
            if "preempt" in expect or preempting:
                allowed = {self.pods[p]["affinityGroup"] for p in expect.get("preempt", [])}
                if preempting:  # the group in Preempting state: any running victims
                    allowed = {i.key for i in self.placer.running()}
                if not isinstance(full, Fit) or not full.victims:
                    return f"expected preemption of {sorted(allowed)}, got {full}"
                if not set(full.victims) <= allowed:
                    return f"victims {full.victims} not within {sorted(allowed)}"
                return None
            if isinstance(full, Fit):
                return f"expected wait, got preemption {full.victims}"
            for group, state in expect.get("groupState", {}).items():
                if state == "Allocated" and not self.placer.holds(group):
                    return f"{group} should still be allocated"
            return None
        finally:
            self.placer.suggest_nodes(None)

    def check_bind(
        self, pod: str, key: str | None, cells: list[tuple[str, int]], expect: dict[str, Any]
    ) -> str | None:
        want = expect.get("bind") or DATA["expectedBindInfos"].get(pod)
        if want is None:
            return None
        expected = self.level_of([(want["node"], i) for i in want["leafCellIsolation"]])
        got = self.level_of(cells)
        if expected != got:
            return f"{pod}: level {got} ({cells[:2]}...) != HiveD's {expected} on {want['node']}"
        return None

    def check_group(self, key: str) -> str | None:
        expected = self.group_level_expected(key)
        if expected is None:
            return None
        placed = self.placer.placement_of(key)
        listed = {
            self.fleet_pod(p)
            for p, spec in self.pods.items()
            if spec["affinityGroup"] == key and p in DATA["expectedBindInfos"] and p in self.pod_of
        }
        cells = [(p.node, i) for p in placed if p.pod in listed for i in p.gpus]
        got = self.level_of(cells)
        if got != expected:
            return f"group {key}: level {got} != HiveD's {expected}"
        return None

    def release_pods(self, pods: list[str]) -> None:
        for pod in pods:
            self.placer.release(self.pods[pod]["affinityGroup"])
        self.placer.check_invariants()

    def doomed(self, vc: str) -> int:
        return self.placer.doomed_cells().get(vc, 0)

    def unbound(self, vc: str) -> int:
        return self.placer.alloc.vc_owed[vc]["3-DGX2-V100-NODE"][5]


def run_scenario(scenario: dict[str, Any]) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Replay one scenario: (rows of the outcome table, mismatches)."""
    name = scenario["name"]
    rows: list[tuple[str, str, str]] = []
    problems: list[str] = []
    if (name, "*") in BY_DESIGN:
        return [(name, "*", "by design")], []
    replay = Replay(name)
    for step in scenario["steps"]:
        label, problem = _step(replay, name, step)
        if label is None:
            continue
        if (name, label) in BY_DESIGN:
            rows.append((name, label, "by design"))
            continue
        rows.append((name, label, "ok" if problem is None else "MISMATCH"))
        if problem is not None:
            problems.append(f"{name} {label}: {problem}")
    return rows, problems


def _step(replay: Replay, name: str, step: dict[str, Any]) -> tuple[str | None, str | None]:
    expect = step.get("expect", {})
    if "schedule" in step:
        pod = step["schedule"]
        label = pod if step.get("phase") != "Filtering" else f"{pod}@Filtering"
        if (name, label) in BY_DESIGN:
            return label, None
        return label, replay.schedule(step)
    if "userError" in step:
        pods = step["userError"]
        label = pods[0]
        if (name, label) in BY_DESIGN:
            return label, None
        fits = []
        for pod in pods:
            spec = replay.pods[pod]
            job = replay.job(pod)
            if spec["pinnedCellId"]:
                replay.placer.pin_job(job.key, spec["pinnedCellId"])
            fits.append(replay.placer.fit(job, job.pods, Mode.GUARANTEED, preempt=True))
        if not any(isinstance(f, NoFit) for f in fits):
            return label, f"expected a user error, got {fits}"
        return label, None
    if step.get("deleteAllocatedInReverseOrder"):
        for info in reversed(replay.placer.running()):
            replay.placer.release(info.key)
        replay.placer.check_invariants()
        if replay.placer.running() or replay.placer.allocated():
            return "deleteAll", "cells still allocated"
        return "deleteAll", None
    if "deleteAllocated" in step:
        replay.release_pods(step["deleteAllocated"])
        label = "delete " + ",".join(step["deleteAllocated"])
        return label, _state(replay, expect)
    if "deleteUnallocated" in step:
        # Fleet never keeps preempting groups between calls: nothing to delete.
        return "deleteUnallocated", None if not replay.placer.holds("group11") else "group11 held"
    if "setBadNode" in step:
        replay.placer.set_node_health(step["setBadNode"], False)
        replay.placer.check_invariants()
        return f"setBadNode {step['setBadNode']}", _state(replay, expect)
    if "setHealthyNode" in step:
        replay.placer.set_node_health(step["setHealthyNode"], True)
        replay.placer.check_invariants()
        return f"setHealthyNode {step['setHealthyNode']}", _state(replay, expect)
    if expect:
        return "check", _state(replay, expect)
    return None, None


def _state(replay: Replay, expect: dict[str, Any]) -> str | None:
    for cells in expect.get("allHealthy", []):
        vc = cells[6:-1]
        if replay.doomed(vc):
            return f"{vc} has {replay.doomed(vc)} doomed cells"
    for key in ("everyFreeCellBad", "allBad"):
        for cells in expect.get(key, []):
            vc = cells[6:-1]
            if replay.doomed(vc) != replay.unbound(vc):
                return f"{vc}: {replay.doomed(vc)} doomed of {replay.unbound(vc)} free cells"
    for group, exists in expect.get("groupsExist", {}).items():
        if replay.placer.holds(group) != exists and exists:
            return f"{group} should exist"
    return None


def render_table(rows: list[tuple[str, str, str]]) -> str:
    """The outcome table: one line per step."""
    lines = ["HiveD conformance (scenario, step, outcome):"]
    lines += [f"  {scenario:<26} {step:<28} {outcome}" for scenario, step, outcome in rows]
    return "\n".join(lines) + "\n"


def table_path(config: pytest.Config, tmp_path: Path) -> Path:
    """Where the table goes: $FLEET_CONFORMANCE_TABLE, else pytest's cache directory."""
    chosen = os.environ.get(TABLE_ENV)
    if chosen:
        return Path(chosen)
    cache: pytest.Cache | None = getattr(config, "cache", None)
    folder = cache.mkdir("hived-conformance") if cache is not None else tmp_path
    return folder / "table.txt"


def test_hived_algorithm_conformance(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    rows: list[tuple[str, str, str]] = []
    problems: list[str] = []
    for scenario in DATA["scenarios"]:
        if "steps" not in scenario:
            scenario = {**scenario, "steps": []}
        r, p = run_scenario(scenario)
        rows.extend(r)
        problems.extend(p)
    table = table_path(request.config, tmp_path)
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text(render_table(rows), encoding="utf-8")
    assert problems == [], f"outcome table: {table}"
    by_design = [r for r in rows if r[2] == "by design"]
    assert len(by_design) == len(BY_DESIGN) == 10
    checked = [r for r in rows if r[2] == "ok"]
    assert len(checked) >= 45


def test_invalid_initial_assignment_fails_construction() -> None:
    data = copy.deepcopy(_design())
    vc1 = data["virtualClusters"]["VC1"]["virtualCells"]
    vc1[0]["cellType"] = "CT1-NODE"
    vc1[1]["cellType"] = "CT1-NODE.CT1"
    vc1[1]["cellNumber"] = 2
    with pytest.raises(ValueError, match="insufficient physical cells"):
        load_hived_file_dict(data)
