"""What a quota tree change would do to the work in flight: a pure preview (``dryRun``).

Theory of operation: :func:`preview` takes the scheduler state and a new,
validated tree with no usage, and replays on that tree what
:func:`fleet.core.events.apply` would do with ``QuotaTreeReplaced``: every
running job is charged to its leaf (the same leaf when it still exists,
else the leaf its namespace now belongs to), pending and preempted jobs
are routed again; then the nodes left over a limit and the newest jobs that
keep each one over (:meth:`~fleet.core.quota.QuotaTree.over_limit_victims`:
the first reclaim victims, and what ``--quota-cut-grace`` would preempt)
are read off.  Nothing of ``state`` changes; the tree given is used up.
Running jobs whose leaf is gone are reported as moved or failed without
asking their placer whether the new leaf's cells can hold them.

:func:`expire_cuts` is the ``--quota-cut-grace`` rule, run by the cycle
first: once a node has been over its limits for the grace period since the
change that cut it (``state.cut_since``, kept across restarts by the shell),
its newest over-limit jobs are preempted until it is within them, whatever
their priority or preemptibility: the administrator asked for the cut.
Each such :class:`~fleet.core.decisions.Preempt` has the cause ``QuotaCut``,
no preemptor, and the quota path from the job's leaf up to the cut node.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fleet.core import wording
from fleet.core.decisions import QUOTA_CUT, Preempt
from fleet.core.jobs import Job
from fleet.core.lifecycle import JobState
from fleet.core.quota import QuotaBlock, QuotaTree
from fleet.core.state import SchedulerState


@dataclass(frozen=True, slots=True)
class Moved:
    """A job whose queue changes (its namespace moved to another leaf)."""

    job: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class Failed:
    """A job no leaf of the new tree takes: it would be failed with ``reason``."""

    job: str
    reason: str


@dataclass(frozen=True, slots=True)
class TreeChangeEffect:
    """What a tree change does right now."""

    #: Nodes over a limit after the change, in tree order.
    over_limit: tuple[QuotaBlock, ...]
    #: node -> the running jobs that keep it over, newest first.
    reclaimable: dict[str, tuple[str, ...]]
    moved: tuple[Moved, ...]
    failed: tuple[Failed, ...]


def route(tree: QuotaTree, job: Job) -> str | None:
    """The leaf ``job`` belongs to under ``tree`` (None: no leaf takes it)."""
    if job.queue_from_namespace:
        return tree.queue_for_namespace(job.namespace)
    return job.queue if tree.has_node(job.queue) and tree.is_leaf(job.queue) else None


def homeless(job: Job) -> str:
    """Why a job no leaf takes is failed."""
    return f"no leaf of the quota tree takes queue {job.queue} or namespace {job.namespace}"


def preview(state: SchedulerState, tree: QuotaTree) -> TreeChangeEffect:
    """What replacing ``state``'s tree with ``tree`` (fresh, no usage) would do now."""
    moved: list[Moved] = []
    failed: list[Failed] = []
    for key, run in state.running.items():
        job = run.job
        if tree.has_node(job.queue) and tree.is_leaf(job.queue):
            leaf: str | None = job.queue
        else:
            leaf = route(tree, job) if job.queue_from_namespace else None
        if leaf is None:
            failed.append(Failed(key, homeless(job)))
            continue
        if leaf != job.queue:
            moved.append(Moved(key, job.queue, leaf))
        for unit in run.units:
            tree.admit(dataclasses.replace(unit.charge, queue=leaf))
    tree.grandfather()
    waiting = [*state.pending(), *state.stopping.values()]
    for job in waiting:
        leaf = route(tree, job)
        if leaf is None:
            failed.append(Failed(job.key, homeless(job)))
        elif leaf != job.queue:
            moved.append(Moved(job.key, job.queue, leaf))
    over = tuple(tree.over_limits())
    reclaimable = {block.node: tuple(tree.over_limit_victims(block.node)) for block in over}
    return TreeChangeEffect(over, reclaimable, tuple(moved), tuple(failed))


def expire_cuts(state: SchedulerState, now: float) -> list[Preempt]:
    """Preempt the over-limit jobs of every node cut at least ``state.cut_grace`` ago."""
    grace = state.cut_grace
    if grace is None or not state.cut_since:
        return []
    out: list[Preempt] = []
    for node, since in sorted(state.cut_since.items()):
        if now - since < grace or not state.tree.has_node(node):
            continue
        why = (
            f"{node} is still over its quota limits {wording.duration(now - since)} after "
            f"a quota change (grace {wording.duration(grace)})"
        )
        for key in state.tree.over_limit_victims(node):
            owner = state.units.get(key)
            if owner is None:
                continue  # its job was stopped with an earlier unit
            unit = next(u for u in owner.units if u.charge.key == key)
            job = owner.job
            path = state.tree.quota_path(job.queue, node)
            if unit.charge.is_growth:
                state.release_unit(owner, unit)
                out.append(
                    Preempt(
                        job.key,
                        job.queue,
                        owner.cluster,
                        unit.pods,
                        why,
                        now,
                        unit=key,
                        cause=QUOTA_CUT,
                        quota_path=path,
                    )
                )
                continue
            pods = tuple(owner.pods)
            state.release(job.key)
            state.move(job.key, JobState.PREEMPTED, why)
            state.stopping[job.key] = job
            out.append(
                Preempt(
                    job.key,
                    job.queue,
                    owner.cluster,
                    pods,
                    why,
                    now,
                    cause=QUOTA_CUT,
                    quota_path=path,
                )
            )
    return out
