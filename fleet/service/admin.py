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
(``ClusterRemoved``) once nothing runs there any more.  The stored bad-node
marks of the new config's nodes, and the nodes its backend last reported
bad (:class:`~fleet.clusters.base.FollowsNodes`, which then follows the new
nodes), are marked bad again in the new placer.

A member described by its nodes gets a new node list through
:func:`replace_nodes`, from a PUT of a simulated member whose ``spec.nodes``
alone changed and from a real member's observed Nodes
(:func:`nodes_observed`, its stored document with ``status.nodes``
replaced): the nodes that left (:func:`nodes_left`) go bad in the placer in
force, which preempts their jobs at once; the new placer then holds the
other running jobs again (a job it cannot hold is preempted alone,
``Evicted``, and a fresh placer tried once more); the marks carry over and
the new document is stored with the transitions in one transaction.  A
real member's PUT keeps its stored ``status.nodes``.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import yaml

from fleet.clusters.base import FollowsNodes, MemberCluster, ObservedNode
from fleet.core import events, inventory, quota_change
from fleet.core.inventory import Shortfall
from fleet.core.lifecycle import JobState
from fleet.core.quota import QuotaNodeSpec, QuotaTree
from fleet.core.state import Transition
from fleet.manifests import convert, placers, topology
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
    docstring), the ``--quota-cut-grace`` in force, and the queues' decayed usage."""
    async with loop.db.read() as session:
        bad = await admin_rows.bad_nodes(session)
        cuts = await admin_rows.quota_cuts(session)
        usage, usage_at = await admin_rows.queue_usage(session)
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
    if usage:
        events.apply(loop.state, events.FairUsageRestored(usage, usage_at))
    for cluster in rows:
        if cluster.draining and cluster.name in loop.state.placers:
            events.apply(loop.state, events.ClusterDraining(cluster.name))
    loop.after_iteration = finish_drains


# Member clusters -------------------------------------------------------------------------


class UnknownCluster(KeyError):
    """No member cluster of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "no such member cluster"


class NotHeld(ValueError):
    """Virtual cluster requests a real member's observed nodes cannot hold."""

    def __init__(self, shortfalls: list[topology.Unmet]) -> None:
        super().__init__("; ".join(s.message() for s in shortfalls))
        self.shortfalls = shortfalls


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
    #: the member cluster in force after a PUT (a real member's with its stored nodes)
    model: MemberClusterModel | None = None
    #: (node, why) of the nodes that left a member described by its nodes
    left: tuple[tuple[str, str], ...] = ()
    #: jobs preempted because their cells left
    preempted: tuple[str, ...] = ()


def _running_in(loop: SchedulerLoop, name: str) -> tuple[str, ...]:
    return tuple(sorted(k for k, run in loop.state.running.items() if run.cluster == name))


def document_of(model: MemberClusterModel) -> str:
    """A member cluster as the YAML document the store keeps."""
    return yaml.safe_dump(model.model_dump(mode="json", by_alias=True, exclude_none=True))


def observed_topology(model: MemberClusterModel) -> topology.Topology | None:
    """How a real member's cells read its Nodes (None: a member that reports no node
    list: a simulated one, or one whose physical cells are hand-written)."""
    if model.spec.kubeconfig is None or not model.spec.built:
        return None
    return model.topology_spec()


def with_nodes(model: MemberClusterModel, nodes: Sequence[ObservedNode]) -> MemberClusterModel:
    """``model`` with ``status.nodes`` replaced by what its member observed."""
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    data["status"] = {"nodes": [node.document() for node in nodes]}
    return MemberClusterModel.model_validate(data)


def _with_status(model: MemberClusterModel, stored: MemberClusterModel) -> MemberClusterModel:
    """A real member's new document keeps the nodes observed (the admin writes no status)."""
    data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    data.pop("status", None)
    if stored.status is not None:
        data["status"] = stored.status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return MemberClusterModel.model_validate(data)


def _only_nodes_differ(old: MemberClusterModel, new: MemberClusterModel) -> bool:
    """Whether two simulated members differ in ``spec.nodes`` alone."""

    def rest(model: MemberClusterModel) -> dict[str, Any]:
        data = model.model_dump(mode="json", by_alias=True, exclude_none=True)
        data["spec"].pop("nodes", None)
        return data

    return old.spec.simulated and new.spec.simulated and rest(old) == rest(new)


def nodes_left(old: MemberClusterModel, new: MemberClusterModel) -> list[tuple[str, str]]:
    """``(node, why)`` for every node of ``old``'s cells that ``new`` does not hold the
    same way (:func:`fleet.manifests.topology.node_keys`): removed, relabelled, or its
    GPUs, cpu or memory changed."""
    before = old.topology_nodes([])
    after = {n.name: n for n in new.topology_nodes([])}
    old_keys = topology.node_keys(old.topology_spec(), before)
    new_keys = topology.node_keys(new.topology_spec(), list(after.values()))
    labels = {n.name: n.labels for n in before}
    out: list[tuple[str, str]] = []
    for node, key in old_keys.items():
        if new_keys.get(node) == key:
            continue
        now = after.get(node)
        if now is None:
            out.append((node, REMOVED))
        elif now.labels != labels.get(node):
            out.append((node, RELABELLED))
        else:
            out.append((node, RESIZED))
    return out


#: Why a node left a member's cells (the jobs there are preempted with it).
REMOVED: Final = "removed from the member"
RELABELLED: Final = "relabelled"
RESIZED: Final = "its GPUs, cpu or memory changed"


async def _stored(loop: SchedulerLoop, name: str) -> MemberClusterModel | None:
    """Member cluster ``name`` as the store holds it (None: not there)."""
    async with loop.db.read() as session:
        rows = await configuration.clusters(session)
    row = next((r for r in rows if r.name == name), None)
    return None if row is None else convert.load_clusters(row.document)[0]


async def _marks(
    loop: SchedulerLoop, model: MemberClusterModel
) -> tuple[list[Transition], list[str]]:
    """Mark bad again, in the placer just put in force, the nodes still there that were
    bad: the stored marks, and the nodes the member last reported bad (its backend then
    follows the new cells); the transitions, and the marked nodes no longer there."""
    name = model.name
    async with loop.db.read() as session:
        marks = [row for row in await admin_rows.bad_nodes(session) if row.cluster == name]
    changes: list[Transition] = []
    gone: list[str] = []
    for row in marks:
        try:
            health = events.NodeHealthChanged(name, row.node, False, row.reason)
            changes += _moves(events.apply(loop.state, health))
        except KeyError:
            gone.append(row.node)
    member = loop.members.get(name)
    if isinstance(member, FollowsNodes):
        nodes = sorted(model.cell_config().nodes())
        for node in member.follow(nodes, observed_topology(model)):
            health = events.NodeHealthChanged(name, node, False)
            changes += _moves(events.apply(loop.state, health))
    return changes, gone


def _moves(out: Sequence[events.Outcome]) -> list[Transition]:
    return [o for o in out if isinstance(o, Transition)]


async def put_cluster(
    loop: SchedulerLoop,
    model: MemberClusterModel,
    member: Callable[[str], MemberCluster],
) -> ClusterChange:
    """Add member cluster ``model`` or replace its config; ``member(name)`` makes the
    backend of a new one.

    A real member's virtual cluster requests that the nodes observed in it
    cannot hold are refused (:class:`NotHeld`), unless its stored config
    already could not hold them (its nodes went away meanwhile).

    A replaced config is refused while running jobs would lose their cells,
    except when a simulated member's ``spec.nodes`` alone changed: that is
    :func:`replace_nodes`, as a real member's observed nodes are.  A real
    member's document keeps the nodes stored for it (``status.nodes``).
    """
    name = model.name

    async def work(loop: SchedulerLoop) -> ClusterChange:
        nonlocal model
        created = name not in loop.state.placers
        stored = None if created else await _stored(loop, name)
        if stored is not None and model.spec.kubeconfig is not None:
            model = _with_status(model, stored)
            before = {(s.vc, s.path) for s in stored.shortfalls()}
            new = [s for s in model.shortfalls() if (s.vc, s.path) not in before]
            if model.status is not None and model.status.nodes and new:
                raise NotHeld(new)
        if stored is not None and _only_nodes_differ(stored, model):
            return await replace_nodes(loop, stored, model, keep_draining=False)
        placer = placers.placer(model)
        if created:
            events.apply(loop.state, events.ClusterAdded(placer))
            loop.add_member(name, member(name))
        else:
            try:
                events.apply(loop.state, events.ClusterReplaced(placer))
            except events.ClusterInUse as e:
                raise ClusterConflict(str(e), e.jobs) from None
        loop.vc_sizes[name] = convert.vc_gpus(model)
        changes, gone = await _marks(loop, model)
        document = document_of(model)
        now = loop.clock.now()

        async def save(session: Session) -> None:
            await configuration.put_cluster(session, name, document, now)
            for node in gone:
                await admin_rows.set_node_health(session, name, node, True, "", now)

        await loop.commit(changes, also=[save])
        return ClusterChange(created, False, _running_in(loop, name), model)

    change: ClusterChange = await loop.exclusive(work)
    return change


async def replace_nodes(
    loop: SchedulerLoop,
    old: MemberClusterModel,
    new: MemberClusterModel,
    *,
    keep_draining: bool = True,
) -> ClusterChange:
    """Put ``new`` in force for member ``old``, which differs from it in its nodes only
    (run by the loop: from exclusive work, or for a member's :class:`NodesObserved`).

    Every node of the current cells that ``new`` does not hold the same way
    (:func:`nodes_left`) goes bad in the current placer, which preempts the
    jobs there at once, as a bad node does; then ``new``'s placer holds every
    other running job again where it runs.  A job it cannot hold again (its
    virtual cluster's cells moved) is preempted too, alone (``Evicted``), and
    the new placer is tried once more, which then holds the rest as it did.
    The bad-node marks of the nodes still there carry over, and the new
    document is stored with the transitions in one transaction; the
    preempted jobs are then deleted in the member and queued again once
    their pods stopped.  ``keep_draining``: a draining member stays draining
    (a PUT puts it back in service).
    """
    name = new.name
    placer = placers.placer(new)
    draining = name in loop.state.draining
    before = {k: r.cluster for k, r in loop.state.running.items()}
    left = nodes_left(old, new)
    changes: list[Transition] = []
    for node, why in left:
        try:
            health = events.NodeHealthChanged(name, node, False, why)
            changes += _moves(events.apply(loop.state, health))
        except KeyError:
            continue  # not in the cells in force (never built, or already gone)
    try:
        events.apply(loop.state, events.ClusterReplaced(placer))
    except events.ClusterInUse as e:
        why = f"the cells of {name} changed and no longer hold it"
        for key in e.jobs:
            changes += _moves(events.apply(loop.state, events.Evicted(key, why)))
        try:  # a placer of its own: the refused one holds the jobs it took
            events.apply(loop.state, events.ClusterReplaced(placers.placer(new)))
        except events.ClusterInUse as again:  # the new cells keep the old ones' jobs apart
            await loop.commit(changes, deletes=_stops(before, changes, loop))
            raise ClusterConflict(str(again), again.jobs) from None
    if draining and keep_draining:
        events.apply(loop.state, events.ClusterDraining(name))
    loop.vc_sizes[name] = convert.vc_gpus(new)
    marked, gone = await _marks(loop, new)
    changes += marked
    for node, _ in left:
        loop.failover.book.node_health(name, node, True)  # forgotten, not bad
    deletes = _stops(before, changes, loop)
    document = document_of(new)
    now = loop.clock.now()

    async def save(session: Session) -> None:
        await configuration.put_cluster(session, name, document, now)
        if draining and keep_draining:
            await configuration.set_draining(session, name)
        for node in gone:
            await admin_rows.set_node_health(session, name, node, True, "", now)

    await loop.commit(changes, deletes=deletes, also=[save])
    preempted = tuple(key for key, _ in deletes)
    added = sorted(set(new.cell_config().nodes()) - set(old.cell_config().nodes()))
    log.info(
        "member cluster %s: %d nodes; new: %s; left: %s; preempted: %s",
        name,
        len(new.cell_config().nodes()),
        ", ".join(added) or "none",
        ", ".join(f"{n} ({why})" for n, why in left) or "none",
        ", ".join(preempted) or "none",
    )
    for short in new.shortfalls():
        log.warning("member cluster %s: %s (holds %d)", name, short.message(), short.held)
    return ClusterChange(
        False, name in loop.state.draining, _running_in(loop, name), new, tuple(left), preempted
    )


async def nodes_observed(
    loop: SchedulerLoop, name: str, nodes: Sequence[ObservedNode]
) -> ClusterChange | None:
    """Real member ``name`` observed ``nodes``: its stored document with them as
    ``status.nodes`` is put in force (:func:`replace_nodes`); None when nothing
    changed (or the member is gone, or reads no nodes any more)."""
    if name not in loop.state.placers:
        return None
    old = await _stored(loop, name)
    if old is None or observed_topology(old) is None:
        return None
    new = with_nodes(old, nodes)
    if new.status == old.status:
        return None
    return await replace_nodes(loop, old, new)


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
