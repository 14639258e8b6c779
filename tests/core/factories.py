"""Builders with defaults so that a test shows only what matters (Kueue's MakeWorkload idea)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from fleet.core import events
from fleet.core.capacity import CapacityPlacer
from fleet.core.decisions import Preempt
from fleet.core.jobs import Job, ReplicaGroup
from fleet.core.lifecycle import JobState
from fleet.core.quota import MaxRuntimeAction, QuotaNodeSpec, QuotaTree
from fleet.core.quota_rules import RUNNING_JOBS
from fleet.core.resources import MAX_JOBS, Resources
from fleet.core.state import SchedulerState

_seq = itertools.count(1)


def make_job(
    name: str = "job",
    *,
    queue: str = "team-a",
    namespace: str = "default",
    pods: int = 1,
    masters: int = 0,
    gpus: int = 0,
    cpu: str | None = None,
    memory: str | None = None,
    priority: int = 10,
    seq: int | None = None,
    gang: bool = True,
    min_members: int = 0,
    preemptible: bool = True,
    sku: str | None = None,
    clusters: frozenset[str] | None = None,
    user: str = "",
    deadline: float | None = None,
) -> Job:
    per_pod: dict[str, str | int] = {}
    if gpus:
        per_pod["nvidia.com/gpu"] = gpus
    if cpu is not None:
        per_pod["cpu"] = cpu
    if memory is not None:
        per_pod["memory"] = memory
    groups = []
    if masters:
        groups.append(ReplicaGroup("Master", masters, Resources.parse(per_pod)))
    if pods - masters > 0:
        groups.append(ReplicaGroup("Worker", pods - masters, Resources.parse(per_pod)))
    return Job(
        key=f"{namespace}/{name}",
        queue=queue,
        priority=priority,
        seq=next(_seq) if seq is None else seq,
        groups=tuple(groups),
        min_members=min_members,
        gang=gang,
        preemptible=preemptible,
        gpu_sku=sku,
        clusters=clusters,
        user=user,
        active_deadline=deadline,
    )


def make_node(spec: Mapping[str, Any], path: str = "spec.root") -> QuotaNodeSpec:
    """``{"name": "a", "min": {"cpu": 10}, "max": {...}, "children": [...]}`` to a node."""
    children = tuple(
        make_node(child, f"{path}.children[{i}]")
        for i, child in enumerate(spec.get("children", ()))
    )
    return QuotaNodeSpec(
        name=spec["name"],
        min=Resources.parse(spec.get("min", {})),
        max=Resources.parse(spec["max"]) if "max" in spec else None,
        namespaces=tuple(spec.get("namespaces", ())),
        children=children,
        path=path,
        preempt_min_runtime=spec.get("preemptMinRuntime"),
        reclaim_min_runtime=spec.get("reclaimMinRuntime"),
        fair_half_life=spec.get("fairSharing", {}).get("halfLife"),
        fair_weight=spec.get("fairSharing", {}).get("weight"),
        per_user=_per_user(spec.get("limits", {}).get("perUser")),
        max_runtime=spec.get("maxRuntime"),
        max_runtime_action=MaxRuntimeAction(spec["maxRuntimeAction"])
        if "maxRuntimeAction" in spec
        else None,
    )


def _per_user(given: Mapping[str, Any] | None) -> Resources | None:
    """``{"runningJobs": 4, "nvidia.com/gpu": 16}`` as the core keeps it."""
    if given is None:
        return None
    return Resources.limits(
        {(MAX_JOBS if r == RUNNING_JOBS else r): int(v) for r, v in given.items()}
    )


def make_tree(spec: Mapping[str, Any]) -> QuotaTree:
    return QuotaTree.build(make_node(spec))


def make_nodes(count: int, prefix: str = "node", **capacity: str | int) -> dict[str, Resources]:
    cap = {("nvidia.com/gpu" if k == "gpus" else k): v for k, v in capacity.items()}
    return {f"{prefix}-{i}": Resources.parse(cap) for i in range(count)}


def make_state(
    tree: Mapping[str, Any],
    clusters: Mapping[str, Mapping[str, Resources]],
    *,
    strict_fifo: tuple[str, ...] = (),
) -> SchedulerState:
    placers = {name: CapacityPlacer(name, nodes) for name, nodes in clusters.items()}
    return SchedulerState(make_tree(tree), placers, strict_fifo=strict_fifo)


def submit(state: SchedulerState, *jobs: Job) -> None:
    """Queue ``jobs`` through the core's event entry point."""
    for job in jobs:
        events.apply(state, events.Submitted(job))


def finish(state: SchedulerState, key: str, *, succeeded: bool = True) -> None:
    """A running job ended (dispatched first if the shell had not said so yet)."""
    if state.phase.get(key) is JobState.ADMITTED:
        events.apply(state, events.Dispatched(key))
    events.apply(state, events.Finished(key, succeeded))


def cancel(state: SchedulerState, key: str) -> None:
    events.apply(state, events.Cancelled(key))


def confirm_stops(state: SchedulerState, decisions: Iterable[object]) -> None:
    """The shell's part after a cycle: every whole-job preemption has stopped."""
    for d in decisions:
        if isinstance(d, Preempt) and not d.unit:
            events.apply(state, events.Stopped(d.job))
