"""Administration carried out by the scheduler loop: quota tree changes and node health.

Theory of operation: the loop is the one writer of the core's state, so an
administrator's change runs *inside* a loop iteration
(:meth:`fleet.service.loop.SchedulerLoop.exclusive`): it reads the state, applies
one core event (``QuotaTreeReplaced``, ``NodeHealthChanged``), and writes the
new tree version (with author and diff) or the node's health mark, the
job transitions that followed and the deletion intents for the pods that
must stop, all in one transaction; only then are the pods deleted in their
members.  A dry run computes :func:`fleet.core.quota_change.preview` and
changes nothing.  Either way the answer says what the new tree promises
beyond the members' healthy capacity (:func:`fleet.core.inventory.overpromised`,
against the inventory the state keeps), and a root of ``capacity: auto`` is
given that capacity as its ``min`` and ``max``; the core gives it the new
figures whenever a cluster or node change below moves the capacity.  At
start, :func:`restore` marks the stored bad nodes in the placers again and
gives the core the stored times of quota cuts and the clusters being
drained, so a restart neither revives a bad node, nor resets the
``--quota-cut-grace`` clock, nor forgets a drain.

Member clusters: a PUT adds a cluster (``ClusterAdded``, a new simulated
member) or replaces its cell config (``ClusterReplaced``, refused with the
jobs named unless every running placement exists in the new config); a
DELETE drains it (``ClusterDraining``: nothing new is admitted there) and
:func:`finish_drains`, run after every iteration, removes it
(``ClusterRemoved``) once nothing runs there any more.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleet.clusters.base import MemberCluster
from fleet.core import events, inventory, quota_change
from fleet.core.inventory import Shortfall
from fleet.core.lifecycle import JobState
from fleet.core.quota import QuotaNodeSpec, QuotaTree
from fleet.core.state import Transition
from fleet.manifests import placers
from fleet.manifests.models import MemberClusterModel
from fleet.service.loop import SchedulerLoop
from fleet.store import admin as admin_rows
from fleet.store import configuration
from fleet.store.database import Session

log = logging.getLogger("fleet.service.admin")


class UnknownNode(KeyError):
    """No such member cluster or node."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such node"


@dataclass(frozen=True, slots=True)
class TreeChangeResult:
    """What a tree change did (or, for a dry run, would do)."""

    #: the new version; None for a dry run
    version: int | None
    effect: quota_change.TreeChangeEffect
    #: running jobs stopped because no leaf takes them any more
    stopped: tuple[str, ...] = ()
    #: what the tree promises beyond the members' healthy capacity (:mod:`fleet.core.inventory`)
    overpromised: tuple[Shortfall, ...] = ()


def diff(old: str, new: str) -> str:
    """The unified diff between two tree documents ("" when equal)."""
    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile="previous",
        tofile="new",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _stops(
    before: dict[str, str], changes: Sequence[Transition], loop: SchedulerLoop
) -> list[tuple[str, str]]:
    """(job, cluster) for every job that held cells before and holds none now."""
    return [
        (t.job, before[t.job])
        for t in changes
        if t.job in before and t.job not in loop.state.running
    ]


async def change_tree(
    loop: SchedulerLoop, root: QuotaNodeSpec, document: str, author: str, *, dry_run: bool
) -> TreeChangeResult:
    """Replace the quota tree with the validated ``root`` (its YAML ``document``)."""

    async def work(loop: SchedulerLoop) -> TreeChangeResult:
        held = loop.state.inventory
        tree = QuotaTree.build(inventory.with_capacity(root, held))
        short = inventory.overpromised(inventory.spec_guarantees(root), held)
        effect = quota_change.preview(loop.state, tree)
        if dry_run:
            return TreeChangeResult(None, effect, overpromised=short)
        before = {k: r.cluster for k, r in loop.state.running.items()}
        out = events.apply(loop.state, events.QuotaTreeReplaced(root))
        changes = [o for o in out if isinstance(o, Transition)]
        deletes = _stops(before, changes, loop)
        version: list[int] = []
        cuts = dict(loop.state.cut_since)
        change = diff(loop.tree_document, document)
        now = loop.clock.now()

        async def save(session: Session) -> None:
            version.append(await configuration.save_tree(session, document, now, author, change))
            await admin_rows.replace_quota_cuts(session, cuts)

        await loop.commit(changes, deletes=deletes, also=[save])
        loop.tree_document = document
        return TreeChangeResult(version[0], effect, tuple(key for key, _ in deletes), short)

    result: TreeChangeResult = await loop.exclusive(work)
    return result


async def set_node_health(
    loop: SchedulerLoop, cluster: str, node: str, healthy: bool, reason: str
) -> list[str]:
    """Mark ``node`` of ``cluster`` bad or healthy; the jobs preempted because of it."""

    async def work(loop: SchedulerLoop) -> list[str]:
        before = {k: r.cluster for k, r in loop.state.running.items()}
        try:
            out = events.apply(loop.state, events.NodeHealthChanged(cluster, node, healthy, reason))
        except KeyError as e:
            raise UnknownNode(str(e.args[0]) if e.args else f"no node {node}") from None
        changes = [o for o in out if isinstance(o, Transition)]
        deletes = [
            (t.job, before[t.job])
            for t in changes
            if t.new is JobState.PREEMPTED and t.job in before
        ]
        now = loop.clock.now()

        async def save(session: Session) -> None:
            await admin_rows.set_node_health(session, cluster, node, healthy, reason, now)

        await loop.commit(changes, deletes=deletes, also=[save])
        return [key for key, _ in deletes]

    preempted: list[str] = await loop.exclusive(work)
    return preempted


async def restore(loop: SchedulerLoop, *, grace: float | None = None) -> None:
    """After the state is rebuilt: stored bad nodes and quota cut times (see the
    docstring), and the ``--quota-cut-grace`` in force."""
    async with loop.db.read() as session:
        bad = await admin_rows.bad_nodes(session)
        cuts = await admin_rows.quota_cuts(session)
        rows = await configuration.clusters(session)
    for row in bad:
        if row.cluster in loop.state.placers:
            try:
                events.apply(
                    loop.state, events.NodeHealthChanged(row.cluster, row.node, False, row.reason)
                )
            except KeyError:
                continue  # the cluster's config no longer has the node
    events.apply(loop.state, events.QuotaCutsRestored(grace, cuts))
    for cluster in rows:
        if cluster.draining and cluster.name in loop.state.placers:
            events.apply(loop.state, events.ClusterDraining(cluster.name))
    loop.after_iteration = finish_drains


# Member clusters -------------------------------------------------------------------------


class UnknownCluster(KeyError):
    """No member cluster of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such member cluster"


class ClusterConflict(Exception):
    """A new cell config that running jobs forbid; ``jobs`` names them."""

    def __init__(self, message: str, jobs: list[str]) -> None:
        super().__init__(message)
        self.jobs = jobs


@dataclass(frozen=True, slots=True)
class ClusterChange:
    """What a cluster PUT or DELETE did."""

    created: bool
    draining: bool
    #: jobs running there now
    running: tuple[str, ...]


def _running_in(loop: SchedulerLoop, name: str) -> tuple[str, ...]:
    return tuple(sorted(k for k, run in loop.state.running.items() if run.cluster == name))


async def put_cluster(
    loop: SchedulerLoop,
    model: MemberClusterModel,
    document: str,
    member: Callable[[str], MemberCluster],
    vc_sizes: dict[str, int],
) -> ClusterChange:
    """Add member cluster ``model`` or replace its config (refused while running jobs
    would lose their cells); ``member(name)`` makes the backend of a new one."""
    name = model.name

    async def work(loop: SchedulerLoop) -> ClusterChange:
        placer = placers.placer(model)
        created = name not in loop.state.placers
        if created:
            events.apply(loop.state, events.ClusterAdded(placer))
            loop.add_member(name, member(name))
        else:
            try:
                events.apply(loop.state, events.ClusterReplaced(placer))
            except events.ClusterInUse as e:
                raise ClusterConflict(str(e), e.jobs) from None
        loop.vc_sizes[name] = dict(vc_sizes)
        async with loop.db.read() as session:
            marks = [row for row in await admin_rows.bad_nodes(session) if row.cluster == name]
        gone: list[str] = []
        for row in marks:  # the new config's nodes keep their marks
            try:
                events.apply(
                    loop.state, events.NodeHealthChanged(name, row.node, False, row.reason)
                )
            except KeyError:
                gone.append(row.node)
        now = loop.clock.now()

        async def save(session: Session) -> None:
            await configuration.put_cluster(session, name, document, now)
            for node in gone:
                await admin_rows.set_node_health(session, name, node, True, "", now)

        await loop.commit([], also=[save])
        return ClusterChange(created, False, _running_in(loop, name))

    change: ClusterChange = await loop.exclusive(work)
    return change


async def drain_cluster(loop: SchedulerLoop, name: str) -> ClusterChange:
    """Admit nothing new to ``name``; it is removed once its running jobs have ended."""

    async def work(loop: SchedulerLoop) -> ClusterChange:
        try:
            events.apply(loop.state, events.ClusterDraining(name))
        except KeyError:
            raise UnknownCluster(f"no member cluster {name[:60]!r}") from None

        async def save(session: Session) -> None:
            await configuration.set_draining(session, name)

        await loop.commit([], also=[save])
        return ClusterChange(False, True, _running_in(loop, name))

    change: ClusterChange = await loop.exclusive(work)
    return change


async def finish_drains(loop: SchedulerLoop) -> None:
    """Remove every draining cluster that runs nothing any more (after each iteration)."""
    for name in sorted(loop.state.draining):
        if _running_in(loop, name):
            continue
        events.apply(loop.state, events.ClusterRemoved(name))
        member = loop.remove_member(name)
        if member is not None:
            await member.close()

        async def save(session: Session, name: str = name) -> None:
            await configuration.delete_cluster(session, name)
            await admin_rows.forget_cluster_nodes(session, name)

        await loop.commit([], also=[save])
        log.info("member cluster %s drained and removed", name)
