"""Wiring the service together: database, configuration, placers, members, loop.

Theory of operation: :func:`start` opens the database (migrating it), takes
the quota tree and the member clusters from it — or, on the very first start,
from the files the settings name, storing them as version 1 — builds one cell
placer and one member backend per cluster, and starts the scheduler loop,
which rebuilds the core's state from the jobs in the database.  :func:`stop`
undoes it in reverse.  The API (:mod:`fleet.api.app`) calls both from its
``cleanup_ctx``; tests call them directly on a virtual clock.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from fleet import admin
from fleet.clock import Clock
from fleet.clusters.base import MemberCluster
from fleet.clusters.kube.cluster import KubeCluster
from fleet.clusters.sim import SimulatedCluster
from fleet.core.cells.placer import CellPlacer
from fleet.core.placement import Placer
from fleet.core.quota import QuotaTree
from fleet.intake import Intake
from fleet.loop import SchedulerLoop
from fleet.manifests import convert
from fleet.manifests.models import MemberClusterModel
from fleet.settings import Settings
from fleet.store import configuration
from fleet.store.database import Database, open_database

log = logging.getLogger("fleet.service")


class ConfigurationError(Exception):
    """The stored or shipped configuration cannot be used; the message says why."""


@dataclass(slots=True)
class Service:
    """A running service: what the API handlers need."""

    settings: Settings
    clock: Clock
    db: Database
    tree: QuotaTree
    tree_document: str
    clusters: list[MemberClusterModel]
    loop: SchedulerLoop
    intake: Intake


async def _configuration(db: Database, settings: Settings, clock: Clock) -> tuple[str, str]:
    """The quota tree and cluster documents in force, storing the shipped ones on first start."""
    async with db.write() as session:
        tree_row = await configuration.current_tree(session)
        if tree_row is None:
            text = settings.quota.read_text(encoding="utf-8")
            await configuration.save_tree(session, text, clock.now(), author="fleet serve --quota")
            log.info("quota tree loaded from %s (version 1)", settings.quota)
            tree_text = text
        else:
            tree_text = tree_row.document
            log.info("quota tree version %d from the database", tree_row.version)
        rows = await configuration.clusters(session)
        if not rows:
            text = settings.clusters.read_text(encoding="utf-8")
            for cluster in convert.load_clusters(text):
                await configuration.put_cluster(session, cluster.name, _dump(cluster), clock.now())
            log.info("member clusters loaded from %s", settings.clusters)
            clusters_text = text
        else:
            clusters_text = "\n---\n".join(row.document for row in rows)
    return tree_text, clusters_text


def _dump(cluster: MemberClusterModel) -> str:
    return yaml.safe_dump(cluster.model_dump(mode="json", by_alias=True, exclude_none=True))


def clusters_document(svc: Service) -> str:
    """The member clusters in force as one multi-document YAML text."""
    return "---\n".join(_dump(cluster) for cluster in svc.clusters)


#: Virtual cluster -> the GPUs it is guaranteed in a cluster (kept here for callers).
vc_gpus = convert.vc_gpus


def member_backend(cluster: MemberClusterModel, clock: Clock) -> MemberCluster:
    """The backend of a member: simulated, or a Kubernetes cluster from its kubeconfig."""
    kubeconfig = cluster.spec.kubeconfig
    if kubeconfig is None:
        return SimulatedCluster(cluster.name, clock)
    nodes = sorted(cluster.cell_config().nodes())
    return KubeCluster(cluster.name, clock, Path(kubeconfig.path), kubeconfig.context, nodes)


async def start_member(member: MemberCluster) -> None:
    """Connect a member's backend (a Kubernetes member starts its client and checks)."""
    if isinstance(member, KubeCluster):
        await member.start()


def _members(
    clusters: Sequence[MemberClusterModel], clock: Clock
) -> tuple[dict[str, Placer], dict[str, MemberCluster]]:
    placers: dict[str, Placer] = {}
    members: dict[str, MemberCluster] = {}
    for cluster in clusters:
        placers[cluster.name] = CellPlacer(cluster.name, cluster.cell_config())
        members[cluster.name] = member_backend(cluster, clock)
    return placers, members


async def start(settings: Settings, clock: Clock, *, threaded: bool = True) -> Service:
    """Open, configure and start everything; see the module docstring."""
    db = await open_database(settings.database_url)
    members: dict[str, MemberCluster] = {}
    try:
        tree_text, clusters_text = await _configuration(db, settings, clock)
        tree, warnings = convert.load_quota(tree_text)
        for warning in warnings:
            log.warning("quota tree: %s", warning)
        clusters = convert.load_clusters(clusters_text)
        placers, members = _members(clusters, clock)
        for member in members.values():
            await start_member(member)
        loop = SchedulerLoop(
            db,
            clock,
            tree,
            placers,
            members,
            interval=settings.schedule_interval,
            threaded=threaded,
            vc_sizes={c.name: vc_gpus(c) for c in clusters},
        )
        loop.tree_document = tree_text
        await loop.start(functools.partial(admin.restore, grace=settings.quota_cut_grace))
        submissions = Intake(db, clock, loop.submitted)
    except BaseException:
        for member in members.values():
            await member.close()
        await db.close()
        raise
    log.info(
        "scheduling %d queues on %d member clusters (%s)",
        len(tree.leaves()),
        len(clusters),
        ", ".join(c.name for c in clusters),
    )
    return Service(settings, clock, db, tree, tree_text, clusters, loop, submissions)


async def stop(service: Service) -> None:
    await service.intake.close()
    await service.loop.stop()
    for member in service.loop.members.values():
        await member.close()
    await service.db.close()
