"""Wiring the service together: database, configuration, placers, members, loop.

Theory of operation: :func:`start` opens the database (migrating it), takes
the quota tree and the member clusters from it — or, on the very first start,
from the files the settings name, storing them as version 1 (replicas that
start together on PostgreSQL store them once, under the store's lock:
:func:`fleet.store.configuration.lock_first_start`; it refuses to
start on a member whose kubeconfig lies outside ``--kubeconfig-dir`` or gets
credentials from a plugin that is not allowed: :mod:`fleet.clusters.kube.kubeconfig`,
checked again whenever a member connects) — builds one cell placer
(:mod:`fleet.manifests.placers`) and one member backend per cluster, and
starts the scheduler loop, which rebuilds the core's state from the jobs in
the database.  A real member described by its nodes reports them to the
loop, which builds its cells again (:func:`nodes_observed`, set as the
loop's :attr:`~fleet.service.loop.SchedulerLoop.on_nodes`) and shows the new
document in :attr:`Service.clusters`.  :func:`stop` undoes it in reverse.  The API
(:mod:`fleet.api.app`) calls both from its ``cleanup_ctx``; tests call them
directly on a virtual clock.

On PostgreSQL any number of replicas run on one database and one of them
leads (:mod:`fleet.service.leadership`, decision 0021): every replica opens the
database, takes submissions (which also go to the leader's inbox) and waits
in the election with an idle loop; the one that wins builds the placers,
the members and the loop from the configuration the database holds *then*,
restores the state exactly as a restart does, and starts the loop (whose
writes are fenced by its term) and the :class:`~fleet.service.leadership.JobFeed`;
losing the lease stops them again.  Followers read the tree and the
clusters (and the registered training runtimes) again after every election
round, so they check submissions against what the leader uses.  Training
runtimes (:func:`register_runtimes`, from an administrator's submission) are
stored and taken by the replica that registered them at once; so are
standing PropagationPolicies, stored in the intake's transaction (from any
submission that holds policies, or from the hub: :func:`put_policies`),
taken once it commits (:func:`policies_stored`) and deleted with
:func:`delete_policy`.  Every replica reads both at start, again when it is
elected and, as a follower, after every election round (:func:`take_stored`).  On SQLite
there is one replica: the loop starts at once, without election or fencing,
as it always did.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleet.clock import Clock
from fleet.clusters.base import MemberCluster, NodesObserved
from fleet.clusters.kube import kubeconfig
from fleet.clusters.kube.cluster import KubeCluster
from fleet.clusters.kube.kubeconfig import KubeconfigPolicy
from fleet.clusters.sim import SimulatedCluster
from fleet.core.jobs import Job
from fleet.core.placement import Placer
from fleet.core.quota import QuotaTree
from fleet.manifests import convert
from fleet.manifests import placers as placer_builder
from fleet.manifests.kinds import registry
from fleet.manifests.models import MemberClusterModel
from fleet.service import admin
from fleet.service.intake import Intake, NewPolicy
from fleet.service.leadership import JobFeed, Leadership
from fleet.service.loop import SchedulerLoop
from fleet.service.settings import Settings
from fleet.store import configuration, leases
from fleet.store import jobs as job_rows
from fleet.store.database import Database, Fenced, Session, open_database, redact_url

log = logging.getLogger("fleet.service.wiring")


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
    #: the election on PostgreSQL; None on SQLite (one replica, which always schedules)
    leadership: Leadership | None = None
    #: what other replicas store, handed to the loop while this replica leads
    feed: JobFeed | None = None
    #: called with True once this replica's loop runs, with False when it stops
    on_role: list[Callable[[bool], Awaitable[None]]] = field(default_factory=list)
    #: the cluster documents a follower last read
    stored_clusters: str = ""
    #: a leader's loop has been restored and runs (PostgreSQL)
    loop_runs: bool = False
    #: the registered training runtimes (a TrainJob's pod sets come from one), by key;
    #: replaced, never changed in place, when runtimes are registered
    runtimes: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the standing PropagationPolicies (plain documents) by ``namespace/name``;
    #: replaced, never changed in place, when one is stored or deleted
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def role(self) -> str:
        """``single`` (SQLite), ``leader`` or ``follower``."""
        return "single" if self.leadership is None else self.leadership.role

    @property
    def scheduling(self) -> bool:
        """Whether this replica's scheduler loop runs (a new leader's once it is restored)."""
        return self.leadership is None or (self.leadership.leading and self.loop_runs)


async def _configuration(db: Database, settings: Settings, clock: Clock) -> tuple[str, str]:
    """The quota tree and cluster documents in force, storing the shipped ones on first start."""
    async with db.write() as session:
        if db.dialect == "postgresql":  # replicas starting together store them once
            await configuration.lock_first_start(session)
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
            shipped = convert.load_clusters(text)
            await _check_shipped(shipped, settings)
            for cluster in shipped:
                await configuration.put_cluster(session, cluster.name, _dump(cluster), clock.now())
            log.info("member clusters loaded from %s", settings.clusters)
            clusters_text = text
        else:
            clusters_text = "\n---\n".join(row.document for row in rows)
    return tree_text, clusters_text


_dump = admin.document_of


async def nodes_observed(svc: Service, loop: SchedulerLoop, observed: NodesObserved) -> None:
    """A real member's nodes changed: its cells are built again from them
    (:func:`fleet.service.admin.nodes_observed`) and the service shows them."""
    change = await admin.nodes_observed(loop, observed.cluster, observed.nodes)
    if change is not None and change.model is not None:
        model = change.model
        svc.clusters = [model if c.name == model.name else c for c in svc.clusters]


def clusters_document(svc: Service) -> str:
    """The member clusters in force as one multi-document YAML text."""
    return "---\n".join(_dump(cluster) for cluster in svc.clusters)


#: Virtual cluster -> the GPUs it is guaranteed in a cluster (kept here for callers).
vc_gpus = convert.vc_gpus


def kubeconfig_policy(settings: Settings) -> KubeconfigPolicy:
    """Where member kubeconfigs must lie and whether their credential plugins may run."""
    return KubeconfigPolicy(settings.kubeconfig_dir, settings.allow_kubeconfig_exec)


def member_backend(
    cluster: MemberClusterModel, clock: Clock, policy: KubeconfigPolicy
) -> MemberCluster:
    """The backend of a member: simulated, or a Kubernetes cluster from its kubeconfig."""
    ref = cluster.spec.kubeconfig
    if ref is None:
        return SimulatedCluster(cluster.name, clock)
    nodes = sorted(cluster.cell_config().nodes())
    kinds = [k for k in registry.KINDS if cluster.runs(k.api_version, k.kind)]
    return KubeCluster(
        cluster.name,
        clock,
        Path(ref.path),
        ref.context,
        nodes,
        policy=policy,
        kinds=kinds,
        topology=admin.observed_topology(cluster),
    )


async def check_kubeconfig(cluster: MemberClusterModel, policy: KubeconfigPolicy) -> None:
    """Refuse a member whose kubeconfig is outside the directory or runs a plugin.

    Raises :class:`~fleet.clusters.kube.kubeconfig.KubeconfigError` (an
    :class:`~fleet.clusters.kube.kubeconfig.Unreadable` one too); a simulated
    member passes.
    """
    ref = cluster.spec.kubeconfig
    if ref is not None:
        await asyncio.to_thread(kubeconfig.read, ref.path, policy, cluster.name)


async def _check_shipped(clusters: Sequence[MemberClusterModel], settings: Settings) -> None:
    """Refuse to start on ``--clusters`` members whose kubeconfig Fleet does not use.

    A file that cannot be read yet is let through (a Secret may be mounted
    later): the member stays not ready until it can be read, and is checked
    again then.
    """
    policy = kubeconfig_policy(settings)
    refused = []
    for cluster in clusters:
        try:
            await check_kubeconfig(cluster, policy)
        except kubeconfig.Unreadable:
            continue
        except kubeconfig.KubeconfigError as e:
            refused.append(f"member cluster {cluster.name}: spec.kubeconfig.path: {e}")
    if refused:
        raise ConfigurationError(f"{settings.clusters}: " + "; ".join(refused))


async def start_member(member: MemberCluster) -> None:
    """Connect a member's backend (a Kubernetes member starts its client and checks)."""
    if isinstance(member, KubeCluster):
        await member.start()


def _members(
    clusters: Sequence[MemberClusterModel], clock: Clock, policy: KubeconfigPolicy
) -> tuple[dict[str, Placer], dict[str, MemberCluster]]:
    members = {cluster.name: member_backend(cluster, clock, policy) for cluster in clusters}
    return placer_builder.placers(clusters), members


async def start(settings: Settings, clock: Clock) -> Service:
    """Open, configure and start everything; see the module docstring."""
    db = await open_database(settings.database_url)
    if db.dialect == "postgresql":
        try:
            return await _start_replica(db, settings, clock)
        except BaseException:
            await db.close()
            raise
    members: dict[str, MemberCluster] = {}
    try:
        tree_text, clusters_text = await _configuration(db, settings, clock)
        tree, clusters, loop = await _start_loop(db, settings, clock, tree_text, clusters_text)
        members = loop.members
        submissions = Intake(db, clock, loop.submitted)
    except BaseException:
        for member in members.values():
            await member.close()
        await db.close()
        raise
    svc = Service(settings, clock, db, tree, tree_text, clusters, loop, submissions)
    submissions.on_policies = functools.partial(policies_stored, svc)
    loop.follow_nodes(functools.partial(nodes_observed, svc))
    await take_stored(svc)
    return svc


async def stored_runtimes(db: Database) -> dict[str, dict[str, Any]]:
    """The registered training runtimes, by key."""
    async with db.read() as session:
        rows = await configuration.training_runtimes(session)
    return {row.key: dict(json.loads(row.document)) for row in rows}


async def stored_policies(db: Database) -> dict[str, dict[str, Any]]:
    """The standing PropagationPolicies, by ``namespace/name``."""
    async with db.read() as session:
        rows = await configuration.stored_policies(session)
    return {f"{row.namespace}/{row.name}": dict(json.loads(row.document)) for row in rows}


async def take_stored(svc: Service) -> None:
    """Take the training runtimes and policies the database holds now (each mapping
    replaced only when it changed, so that what was read from it stays valid)."""
    runtimes = await stored_runtimes(svc.db)
    if runtimes != svc.runtimes:
        svc.runtimes = runtimes
    policies = await stored_policies(svc.db)
    if policies != svc.policies:
        svc.policies = policies


async def put_policies(svc: Service, policies: Sequence[dict[str, Any]], author: str = "") -> None:
    """Store PropagationPolicies (plain documents, replacing those of the same namespace
    and name) through the intake, as a submission of policies alone stores them, then
    govern jobs with them at once.

    Each document must read as a PropagationPolicy (a ``ValueError`` otherwise,
    and nothing is stored).
    """
    if not policies:
        return
    new: list[NewPolicy] = []
    for document in policies:
        found = convert.policy_models([document])
        if not found:
            raise ValueError(f"not a PropagationPolicy: {str(document)[:200]}")
        new.append(NewPolicy(found[0].namespace, found[0].metadata.name, document, author))
    await svc.intake.accept([], policies=new)


def policies_stored(svc: Service, stored: dict[str, dict[str, Any]]) -> None:
    """The intake stored ``stored`` (documents by ``namespace/name``): govern jobs with
    them from now on (the mapping is replaced, never changed in place)."""
    svc.policies = {**svc.policies, **stored}
    log.info("policies stored: %s", ", ".join(stored))


async def delete_policy(svc: Service, namespace: str, name: str) -> bool:
    """Delete the stored policy ``namespace/name``; False when there is none."""
    async with svc.db.write() as session:
        found = await configuration.delete_policy(session, namespace, name)
    key = f"{namespace}/{name}"
    if key in svc.policies:
        svc.policies = {k: v for k, v in svc.policies.items() if k != key}
    if found:
        log.info("policy deleted: %s", key)
    return found


async def register_runtimes(
    svc: Service, runtimes: Sequence[tuple[str, dict[str, Any]]], author: str = ""
) -> None:
    """Store training runtimes ``(key, document)`` (replacing those of the same key), then
    check submissions with them."""
    if not runtimes:
        return
    async with svc.db.write() as session:
        for key, document in runtimes:
            text = json.dumps(document, separators=(",", ":"), sort_keys=True)
            await configuration.put_training_runtime(session, key, text, svc.clock.now(), author)
    svc.runtimes = {**svc.runtimes, **{key: document for key, document in runtimes}}
    log.info("training runtimes registered: %s", ", ".join(key for key, _ in runtimes))


async def _start_loop(
    db: Database,
    settings: Settings,
    clock: Clock,
    tree_text: str,
    clusters_text: str,
) -> tuple[QuotaTree, list[MemberClusterModel], SchedulerLoop]:
    """Build the placers, members and loop of this configuration; restore and start it."""
    tree, warnings = convert.load_quota(tree_text)
    for warning in warnings:
        log.warning("quota tree: %s", warning)
    clusters = convert.load_clusters(clusters_text)
    placers, members = _members(clusters, clock, kubeconfig_policy(settings))
    try:
        for member in members.values():
            await start_member(member)
        loop = SchedulerLoop(
            db,
            clock,
            tree,
            placers,
            members,
            interval=settings.schedule_interval,
            vc_sizes={c.name: vc_gpus(c) for c in clusters},
        )
        loop.tree_document = tree_text
        await loop.start(functools.partial(admin.restore, grace=settings.quota_cut_grace))
    except BaseException:
        for member in members.values():
            await member.close()
        raise
    log.info(
        "scheduling %d queues on %d member clusters (%s)",
        len(tree.leaves()),
        len(clusters),
        ", ".join(c.name for c in clusters),
    )
    return tree, clusters, loop


# Replicas on PostgreSQL -------------------------------------------------------------------


def advertised(settings: Settings) -> str:
    """The base URL other replicas reach this one at (``--advertise-url``, or host and port)."""
    if settings.advertise_url:
        return settings.advertise_url.rstrip("/")
    host = settings.host
    if host in ("0.0.0.0", "::", ""):
        try:
            host = socket.gethostbyname(socket.gethostname())
        except OSError:
            host = socket.gethostname()
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.port}"


async def _start_replica(db: Database, settings: Settings, clock: Clock) -> Service:
    """A replica on PostgreSQL: it serves at once and schedules once it leads."""
    tree_text, clusters_text = await _configuration(db, settings, clock)
    tree, _ = convert.load_quota(tree_text)
    clusters = convert.load_clusters(clusters_text)
    idle = _idle_loop(db, clock, tree, settings)
    holder: list[Service] = []

    def tell_loop(jobs: Sequence[Job]) -> None:
        # The leader's own submissions go straight to its loop (the inbox has them too).
        if holder and holder[0].scheduling:
            holder[0].loop.submitted(jobs)

    async def inbox(session: Session, job_ids: list[int]) -> None:
        # The leader's loop is told after the commit; the transaction then holds
        # the lease, so the commit lands in its term and a later leader sees the
        # jobs when it restores.  Any other submission goes to the leader's inbox.
        if not job_ids:
            return
        if svc.scheduling and await leadership.holds(session):
            return
        await leases.post(session, job_ids)

    intake = Intake(db, clock, tell_loop, also=inbox)
    svc = Service(settings, clock, db, tree, tree_text, clusters, idle, intake)
    svc.stored_clusters = clusters_text
    intake.on_policies = functools.partial(policies_stored, svc)
    await take_stored(svc)
    holder.append(svc)
    identity = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    svc.leadership = leadership = Leadership(
        db,
        identity=identity,
        address=advertised(settings),
        lease=settings.leader_lease_seconds,
        renew=settings.leader_renew_seconds,
        lead=functools.partial(_lead, svc),
        follow=functools.partial(_follow, svc),
        following=functools.partial(refresh_configuration, svc),
    )
    await svc.leadership.start()
    log.info("replica %s (%s) joined the election", identity, redact_url(svc.leadership.address))
    return svc


async def _lead(svc: Service, term: int) -> None:
    """Won the election: restore the state from the database and run the loop, fenced."""
    leadership = svc.leadership
    if leadership is None:
        raise ConfigurationError("only replicas on PostgreSQL take part in an election")
    async with svc.db.read() as session:
        tree_text, clusters_text = await _stored_configuration(session)
    fenced = svc.db.fenced(leadership.fence)
    tree, clusters, loop = await _start_loop(
        fenced, svc.settings, svc.clock, tree_text, clusters_text
    )
    svc.tree, svc.tree_document, svc.clusters, svc.loop = tree, tree_text, clusters, loop
    loop.follow_nodes(functools.partial(nodes_observed, svc))
    await take_stored(svc)
    svc.loop_runs = True
    for hook in svc.on_role:  # telemetry first: before the loop's first iteration
        await hook(True)
    feed = JobFeed(svc.db, loop)
    svc.feed = feed
    await feed.start()
    log.info("term %d: the loop runs", term)


async def _follow(svc: Service) -> None:
    """Lost the lease (or stopping): stop the feed, the loop and the members at once."""
    loop = svc.loop
    svc.loop_runs = False
    await loop.stop()
    loop.abandon(Fenced("this replica no longer leads the scheduler; retry"))
    if svc.feed is not None:
        await svc.feed.stop()
        svc.feed = None
    for member in loop.members.values():
        await member.close()
    for hook in svc.on_role:
        await hook(False)
    # A follower publishes no view of its own: an idle loop stands in until it leads.
    svc.loop = _idle_loop(svc.db, svc.clock, svc.tree, svc.settings)


def _idle_loop(db: Database, clock: Clock, tree: QuotaTree, settings: Settings) -> SchedulerLoop:
    """What stands in for the loop on a follower: never started, it refuses exclusive work."""
    idle = SchedulerLoop(db, clock, tree, {}, {}, interval=settings.schedule_interval)
    idle.abandon(Fenced("this replica does not lead the scheduler; retry in a moment"))
    return idle


async def _stored_configuration(session: Session) -> tuple[str, str]:
    """The tree and cluster documents the database holds now."""
    tree_row = await configuration.current_tree(session)
    rows = await configuration.clusters(session)
    if tree_row is None or not rows:
        raise ConfigurationError("the database holds no quota tree or no member clusters")
    return tree_row.document, "\n---\n".join(row.document for row in rows)


async def refresh_configuration(svc: Service) -> None:
    """A follower: take the tree, clusters, training runtimes and policies stored, to
    check submissions with."""
    async with svc.db.read() as session:
        tree_text, clusters_text = await _stored_configuration(session)
    if tree_text != svc.tree_document:
        svc.tree, _ = convert.load_quota(tree_text)
        svc.tree_document = tree_text
    if clusters_text != svc.stored_clusters:
        svc.clusters = convert.load_clusters(clusters_text)
        svc.stored_clusters = clusters_text
    await take_stored(svc)


def without_status(document: str) -> str:
    """A tree document without the ``status`` Fleet writes (``GET /api/v1/quota-tree``
    shows one): a written status is ignored, as Kubernetes ignores it in a change of
    ``spec``, and the document is stored as written when it has none."""
    try:
        found = yaml.safe_load(document)
    except yaml.YAMLError:
        return document
    if not isinstance(found, dict) or "status" not in found:
        return document
    return yaml.safe_dump({k: v for k, v in found.items() if k != "status"}, sort_keys=False)


async def change_tree(
    svc: Service, document: str, author: str, *, dry_run: bool = False
) -> tuple[admin.TreeChangeResult, list[str]]:
    """Validate the ElasticQuotaTree ``document`` in full, then apply it (or preview
    it with ``dry_run``): the change and the warnings.  Raises
    :class:`~fleet.manifests.errors.SpecError` (nothing changes) when it is refused.
    ``PUT /api/v1/quota-tree`` and the hub's ElasticQuotaTree both come here; a root of
    ``capacity: auto`` is given the members' healthy capacity by the core, as at start
    (:mod:`fleet.core.inventory`)."""
    tree, warnings = convert.load_quota(document)
    document = without_status(document)
    result = await admin.change_tree(svc.loop, tree.to_spec(), document, author, dry_run=dry_run)
    if not dry_run:
        svc.tree = tree
        svc.tree_document = document
    return result, warnings


async def cancel(svc: Service, job_id: int, key: str) -> None:
    """Store the request to cancel job ``key`` and hand it to the loop that runs.

    A follower stores it as the leader's loop does (a ``cancel`` intent); the
    leader's :class:`~fleet.service.leadership.JobFeed` hands it over.
    """
    if svc.leadership is None:
        await svc.loop.cancel(job_id, key)
        return
    async with svc.db.write() as session:
        (intent,) = await job_rows.insert_intents(
            session, [(job_id, "cancel", "")], svc.clock.now()
        )
        await leases.notify(session)
    feed = svc.feed
    if svc.scheduling and feed is not None:
        feed.told(intent)
        svc.loop.cancel_stored(intent, key)


async def stop(service: Service) -> None:
    if service.leadership is not None:
        await service.loop.stop()  # at once, as on SQLite (its last records still land)
        await service.leadership.stop()  # then the members, and the lease is handed back
    await service.intake.close()
    await service.loop.stop()
    for member in service.loop.members.values():
        await member.close()
    await service.db.close()
