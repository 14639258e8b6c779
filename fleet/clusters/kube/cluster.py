"""A real member cluster: Fleet's jobs of every kind, their pods and the Nodes.

Theory of operation: :class:`KubeCluster` implements
:class:`~fleet.clusters.base.MemberCluster` over one :class:`KubeClient`
(from the member's own kubeconfig).  It keeps what Fleet wants there — the
jobs dispatched to it, by key, each with its uid, kind and placement — and
watches (:mod:`.watches`) of what is there: Fleet's objects of each workload
kind the member runs (:mod:`fleet.manifests.kinds`, by the uid label), the
pods that name Fleet's scheduler (:mod:`.pods`), and the Nodes
(:mod:`.nodes`).  A job's name is unique in its namespace across kinds, so
one object name in a member is one job.

* **Create** creates the object under its deterministic name
  (:func:`.objects.member_objects`), after the objects its kind needs first
  (a TrainJob's runtime: each created, or patched to the wanted content when
  there, only while the object is not there yet), which are then made owned
  by it, so that the member's garbage collector deletes them with it; when
  the name is taken, the object there is read: with the job's uid label,
  nothing is done (a restart after "decided" finds it); with another
  uid label, :class:`~fleet.clusters.base.ClusterConflict`, and the object is
  left alone, unless it is an ended (Succeeded or Failed) or deleted copy of an
  earlier run of the same name: that one is deleted and the creation retried,
  since Fleet frees a name once its job ended.  A job of a kind the member
  does not run is :class:`~fleet.clusters.base.ClusterRejected`.  A member that
  does not answer does not fail the job: the creation is retried with
  backoff, and the member's readiness (below) drives the failover clock.
* **Binding** (:class:`.binder.PodBinder`, which keeps the member's pods).
  A pending pod with the uid label of a job dispatched here is matched to
  its planned replica (its kind reads the pod's role and index from the
  controller's labels; a pod without an index claims its role's first
  planned pod that no live pod holds) and bound to the planned node with
  its GPU indices.  A pod that names Fleet's scheduler but belongs to no
  such job stays pending, with a Warning Event saying why.
* **Status.**  The object's phase, as its kind reads it, gives
  :class:`~fleet.clusters.base.JobStarted` (Running),
  :class:`~fleet.clusters.base.JobRestarting` (Restarting, and back) and
  :class:`~fleet.clusters.base.JobFinished` (Succeeded or Failed).
* **Delete** removes the object and its pods (gracefully: the kubelets
  and the garbage collector finish it; a pod bound to a Node that is no
  longer there has no kubelet to finish it and is deleted at once, as the
  member's pod garbage collector would later); :class:`~fleet.clusters.base.JobStopped`
  is reported once neither the object nor any pod of that uid is left.
  Deletions that fail are retried with backoff.
* **Health.**  The member is *ready* when its kubeconfig passes the
  checks of :mod:`.kubeconfig` (else it stays not ready with a fixed
  message, its file never loaded), it answers, accepts Fleet's
  credentials, serves the CRD of every kind it runs, and every watch works; a change
  is reported as :class:`~fleet.clusters.base.MemberReadiness` (the core
  then admits nothing new there).  A node of the cell config is healthy
  when its Node exists, is Ready and is not cordoned; a change is reported
  as :class:`~fleet.clusters.base.NodeHealth` (nothing while the member is
  not ready).  :mod:`.readiness` keeps this and reports it.
* **Nodes.**  A member described by its Nodes' labels (``topology``)
  reports the Nodes its topology counts as
  :class:`~fleet.clusters.base.NodesObserved` (after the first list, then
  on changes, at most once a second); when the loop has built its cells
  again it tells :meth:`KubeCluster.follow` the new cell config's nodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from fleet.clock import Clock
from fleet.clusters.base import (
    ClusterConflict,
    ClusterError,
    ClusterHealth,
    ClusterRejected,
    ClusterUnavailable,
    DispatchedJob,
    JobFinished,
    JobRestarting,
    JobStarted,
    JobStopped,
    MemberCluster,
    MemberEvent,
    QueueWatch,
    member_object_name,
    split_key,
)
from fleet.clusters.kube import binder, calls, objects
from fleet.clusters.kube.client import (
    AlreadyExists,
    KubeClient,
    NotFound,
    Refused,
    connect,
)
from fleet.clusters.kube.kubeconfig import KubeconfigPolicy
from fleet.clusters.kube.nodes import NodeTracker
from fleet.clusters.kube.pods import Ident, ident, uid_of
from fleet.clusters.kube.readiness import Readiness
from fleet.clusters.kube.watches import Watcher
from fleet.core.placement import PodPlacement
from fleet.manifests.kinds import registry
from fleet.manifests.kinds.base import Kind, Phase
from fleet.manifests.topology import Topology

log = logging.getLogger("fleet.clusters.kube")

#: Seconds between two checks that the member answers and serves the CRD.
PROBE_INTERVAL: Final = 2.0
#: Seconds :meth:`KubeCluster.start` waits for the first lists of a ready member.
SYNC_TIMEOUT: Final = 10.0

JSON = dict[str, Any]

#: Delete options of a pod whose Node is gone (no kubelet will confirm it stopped).
_AT_ONCE: Final = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}


@dataclass(slots=True)
class _Wanted:
    """A job Fleet dispatched to (or deletes from) this member, and what the member said."""

    key: str
    uid: str | None
    kind: Kind | None  # None: only deleted here, its kind not known yet (every kind's goes)
    job: DispatchedJob | None = None  # None: only deleted here, not dispatched by this process
    places: dict[str, PodPlacement] = field(default_factory=dict)  # replica -> placement
    created: bool = False
    started: bool = False
    ended: bool = False
    restarting: bool = False
    deleting: bool = False
    out_of_date: bool = False  # the member's object does not have ``job``'s pods yet
    claims: dict[str, str] = field(default_factory=dict)  # pod uid -> replica (no index)


class KubeCluster:
    """A member cluster behind a kube-apiserver; see the module docstring."""

    def __init__(
        self,
        name: str,
        clock: Clock,
        kubeconfig: Path,
        context: str | None,
        nodes: Sequence[str],
        *,
        policy: KubeconfigPolicy,
        topology: Topology | None = None,
        scheduler: str = objects.SCHEDULER_NAME,
        kinds: Sequence[Kind] = registry.KINDS,
        probe_interval: float = PROBE_INTERVAL,
        backoff: tuple[float, float] = (0.2, 5.0),
    ) -> None:
        self._name = name
        self._clock = clock
        self._kubeconfig = kubeconfig
        self._context = context
        self._policy = policy
        self._scheduler = scheduler
        self._kinds = tuple(kinds)
        self._probe_interval = probe_interval
        self._backoff = backoff
        self._client: KubeClient | None = None
        self._events: asyncio.Queue[MemberEvent | None] = asyncio.Queue()
        self._wanted: dict[str, _Wanted] = {}
        self._by_uid: dict[str, str] = {}  # uid -> key
        self._by_ident: dict[Ident, str] = {}  # (namespace, object name) -> key
        self._jobs: dict[Ident, JSON] = {}  # Fleet's objects in the member, of every kind
        self._listed: set[str] = set()  # the kinds whose objects were listed
        self._binder = binder.PodBinder(name, self._bindable)
        self._health = Readiness(name, clock, NodeTracker(nodes), self._emit, topology)
        self._watchers: list[Watcher] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._retry = asyncio.Event()
        self._closed = False

    @property
    def name(self) -> str:
        return self._name

    # Start and stop ------------------------------------------------------------------

    async def start(self) -> None:
        """Read the kubeconfig, check the member once, start the watches and the probe."""
        try:
            self._client = await connect(self._name, self._kubeconfig, self._context, self._policy)
        except ClusterError as e:
            self._health.probed(e.message)
            return
        await self._probe()
        client = self._client
        watches: list[tuple[str, str, list[tuple[str, str]], Any, Any]] = [
            (
                kind.name,
                f"{kind.api_path}/{kind.plural}",
                [("labelSelector", objects.UID_LABEL)],
                functools.partial(self._sync_jobs, kind),
                functools.partial(self._job_event, kind),
            )
            for kind in self._kinds
        ]
        watches += [
            (
                "pods",
                "/api/v1/pods",
                [("fieldSelector", f"spec.schedulerName={self._scheduler}")],
                self._sync_pods,
                self._pod_event,
            ),
            ("nodes", "/api/v1/nodes", [], self._health.sync_nodes, self._health.node_event),
        ]
        for what, path, query, sync, event in watches:
            watcher = Watcher(
                client,
                self._clock,
                what,
                path,
                query,
                sync=sync,
                event=event,
                failed=self._health.watch_failed,
                recovered=self._health.watch_recovered,
                backoff=self._backoff,
            )
            self._watchers.append(watcher)
            watcher.start()
        if self._health.probe_error is None:
            # Let the first lists arrive, so that what is there is known before acting.
            synced = [asyncio.create_task(w.synced.wait()) for w in self._watchers]
            _, late = await asyncio.wait(synced, timeout=SYNC_TIMEOUT)
            for task in late:
                task.cancel()
        self._tasks.append(asyncio.create_task(self._probe_loop(), name=f"probe {self._name}"))
        self._tasks.append(asyncio.create_task(self._retry_loop(), name=f"retry {self._name}"))

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for watcher in self._watchers:
            await watcher.stop()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._health.close()
        if self._client is not None:
            await self._client.close()
        self._events.put_nowait(None)

    def watch(self) -> QueueWatch:
        return QueueWatch(self._events)

    def status_of(self, key: str) -> Mapping[str, Any] | None:
        """The status of job ``key``'s object as last watched (the watch keeps the objects)."""
        try:
            obj = self._jobs.get(self._where(key))
        except ValueError:
            return None
        status = obj.get("status") if obj is not None else None
        return status if isinstance(status, Mapping) else None

    async def health(self) -> ClusterHealth:
        if self._closed:
            return ClusterHealth(False, "closed")
        return self._health.health()

    def follow(self, nodes: Sequence[str], topology: Topology | None) -> list[str]:
        """The cell config's nodes are now ``nodes``; the bad ones among them
        (:class:`~fleet.clusters.base.FollowsNodes`)."""
        return self._health.follow(list(nodes), topology)

    # Create and delete ---------------------------------------------------------------

    async def create(self, job: DispatchedJob) -> None:
        """Create ``job``'s object; see the module docstring."""
        if job.cluster != self._name:
            raise ValueError(f"job {job.key} is dispatched to {job.cluster}, not to {self._name}")
        kind = registry.of(job.manifest)
        if kind not in self._kinds:
            raise ClusterRejected(self._name, f"the member does not run {kind.name} jobs")
        wanted = self._wanted.get(job.key)
        if wanted is not None and wanted.uid != job.uid and wanted.ended and not wanted.deleting:
            self._forget(job.key)  # an ended earlier run of the name: replaced below
            wanted = None
        if wanted is not None and wanted.uid != job.uid:
            raise ClusterConflict(
                self._name, f"job {job.key} is here with uid {wanted.uid}, not {job.uid}"
            )
        if wanted is None:
            wanted = _Wanted(job.key, job.uid, kind, job, {p.pod: p for p in job.pods})
            self._remember(wanted)
        if wanted.created:
            return
        try:
            await self._create(wanted, job)
        except (ClusterConflict, ClusterRejected):
            self._forget(job.key)
            raise
        except ClusterError as e:
            log.warning("%s: creating %s failed, retrying: %s", self._name, job.key, e)
            self._retry.set()
            return
        await self._binder.bind_uid(self._client, job.uid)

    async def resize(self, job: DispatchedJob) -> None:
        """Give ``job``'s object its new pods (counts, node affinity, placement)."""
        wanted = self._wanted.get(job.key)
        if wanted is None or wanted.uid != job.uid or wanted.deleting or wanted.ended:
            return
        wanted.job = job
        wanted.places = {p.pod: p for p in job.pods}
        if not wanted.created:
            return  # the creation, done or retried, uses the new pods
        wanted.out_of_date = True
        try:
            await self._update(wanted, job)
        except ClusterError as e:
            log.warning("%s: resizing %s failed, retrying: %s", self._name, job.key, e)
            self._retry.set()
            return
        await self._binder.bind_uid(self._client, job.uid)

    async def delete(self, key: str) -> bool:
        """Delete job ``key``'s object and its pods; see the module docstring."""
        split_key(key)
        wanted = self._wanted.get(key)
        if wanted is None:
            # Not dispatched by this process (a restart, a purge): delete what is there.
            here = self._jobs.get(self._where(key))
            if here is None and len(self._listed) == len(self._kinds):
                return False
            uid = uid_of(here) if here is not None else None
            kind = _kind_of(here) if here is not None else None
            wanted = _Wanted(key, uid, kind, created=True)
            self._remember(wanted)
        if wanted.deleting:
            return True
        wanted.deleting = True
        await self._try_delete(wanted)
        if wanted.ended:
            self._forget(key)
            return False
        await self._check_stopped(key)
        return True

    # Internals: acting -----------------------------------------------------------------

    def _where(self, key: str) -> Ident:
        return split_key(key)[0], member_object_name(key)

    def _remember(self, wanted: _Wanted) -> None:
        self._wanted[wanted.key] = wanted
        self._by_ident[self._where(wanted.key)] = wanted.key
        if wanted.uid is not None:
            self._by_uid[wanted.uid] = wanted.key

    def _forget(self, key: str) -> None:
        wanted = self._wanted.pop(key, None)
        if wanted is None:
            return
        self._by_ident.pop(self._where(key), None)
        if wanted.uid is not None and self._by_uid.get(wanted.uid) == key:
            del self._by_uid[wanted.uid]

    def _path(self, kind: Kind, namespace: str) -> str:
        return f"{kind.api_path}/namespaces/{namespace}/{kind.plural}"

    def _client_or_raise(self) -> KubeClient:
        if self._client is None:
            raise Refused(self._name, self._health.probe_error or "no client")
        return self._client

    async def _create(self, wanted: _Wanted, job: DispatchedJob) -> None:
        client = self._client_or_raise()
        namespace, name = self._where(job.key)
        kind = registry.of(job.manifest)
        path = self._path(kind, namespace)
        body, dependencies = objects.member_objects(job, self._scheduler)
        found: JSON | None = None
        if dependencies:  # they go first, and only for an object not there yet
            with contextlib.suppress(NotFound):
                found = await client.request("GET", f"{path}/{name}")
            if found is None:
                for dependency in dependencies:
                    await calls.ensure(client, dependency)
        if found is None:
            # Create first (one round trip when the name is free, as it nearly always
            # is); a name taken is read and judged below.
            try:
                found = await client.request("POST", path, body=body)
            except AlreadyExists:
                found = await client.request("GET", f"{path}/{name}")
            else:
                log.info(
                    "%s: created %s %s/%s for %s", self._name, kind.kind, namespace, name, job.key
                )
        found = _stamped(found, kind)
        uid = uid_of(found)
        if uid is not None and uid != job.uid and _replaceable(found):
            # An earlier run of this name that ended (or is going): delete it, then
            # create this run when the retry finds the name free.
            if not objects.meta(found).get("deletionTimestamp"):
                await calls.delete(client, f"{path}/{name}")
                log.info(
                    "%s: deleted the ended %s %s/%s of an earlier run of %s",
                    self._name,
                    kind.kind,
                    namespace,
                    name,
                    job.key,
                )
            raise ClusterUnavailable(
                self._name, f"{kind.kind} {namespace}/{name} of an earlier run is being deleted"
            )
        if uid != job.uid:
            raise ClusterConflict(
                self._name,
                f"{kind.kind} {namespace}/{name} exists with uid label {uid!r}, not {job.uid}; "
                "it is left as it is",
            )
        for dependency in dependencies:
            await calls.own(client, dependency, found)
        wanted.created = True
        self._jobs[(namespace, name)] = found
        self._job_changed(found)
        placed = objects.annotations_of(found).get(objects.PLACEMENT_ANNOTATION)
        if placed != objects.placement_text(job.pods):  # it grew or shrank meanwhile
            wanted.out_of_date = True
            await self._update(wanted, job)

    async def _update(self, wanted: _Wanted, job: DispatchedJob) -> None:
        """Patch the object to ``job``'s pods: counts, templates, placement."""
        client = self._client_or_raise()
        namespace, name = self._where(job.key)
        kind = registry.of(job.manifest)
        path = f"{self._path(kind, namespace)}/{name}"
        body = objects.member_object(job, self._scheduler)
        patch = {
            "metadata": {
                "annotations": {
                    objects.PLACEMENT_ANNOTATION: body["metadata"]["annotations"][
                        objects.PLACEMENT_ANNOTATION
                    ]
                }
            },
            **kind.resize_patch(body["spec"]),
        }
        found = await client.request(
            "PATCH", path, body=patch, content_type="application/merge-patch+json"
        )
        wanted.out_of_date = False
        self._jobs[(namespace, name)] = _stamped(found, kind)
        log.info(
            "%s: %s %s/%s now has %d pods", self._name, kind.kind, namespace, name, len(job.pods)
        )

    async def _try_delete(self, wanted: _Wanted) -> None:
        try:
            await self._delete(wanted)
        except ClusterError as e:
            log.warning("%s: deleting %s failed, retrying: %s", self._name, wanted.key, e)
            self._retry.set()

    async def _delete(self, wanted: _Wanted) -> None:
        client = self._client_or_raise()
        namespace, name = self._where(wanted.key)
        for kind in self._kinds if wanted.kind is None else (wanted.kind,):
            await calls.delete(client, f"{self._path(kind, namespace)}/{name}")
        for (ns, pod), obj in self._binder.pods.of_uid(wanted.uid) if wanted.uid else ():
            node = obj.get("spec", {}).get("nodeName")
            if node and not self._health.nodes.exists(str(node)):
                # No kubelet will finish it: gone at once, as the pod garbage collector does.
                with contextlib.suppress(NotFound):
                    await client.request(
                        "DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}", body=_AT_ONCE
                    )
                continue
            if objects.meta(obj).get("deletionTimestamp"):
                continue
            with contextlib.suppress(NotFound):
                await client.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}")

    async def _check_stopped(self, key: str) -> None:
        wanted = self._wanted.get(key)
        if wanted is None or not wanted.deleting:
            return
        if self._where(key) in self._jobs:
            return
        if wanted.uid is not None and self._binder.pods.has_uid(wanted.uid):
            return
        self._forget(key)
        if not wanted.ended:
            self._emit(JobStopped(self._name, key, wanted.uid or "", self._clock.now()))

    def _emit(self, event: MemberEvent) -> None:
        if not self._closed:
            self._events.put_nowait(event)

    async def _retry_loop(self) -> None:
        """Redo creations and deletions that failed, with backoff, while there are any."""
        delay = self._backoff[0]
        while True:
            await self._retry.wait()
            self._retry.clear()
            await self._clock.sleep(delay)
            failed = False
            for key, wanted in sorted(self._wanted.items()):
                try:
                    if wanted.deleting:
                        await self._delete(wanted)
                        await self._check_stopped(key)
                    elif not wanted.created and wanted.job is not None:
                        await self._create(wanted, wanted.job)
                        await self._binder.bind_uid(self._client, wanted.job.uid)
                    elif wanted.out_of_date and wanted.job is not None:
                        await self._update(wanted, wanted.job)
                        await self._binder.bind_uid(self._client, wanted.job.uid)
                except (ClusterConflict, ClusterRejected) as e:
                    log.warning("%s: %s: %s", self._name, key, e)
                    if not wanted.deleting:
                        self._forget(key)
                        reason = f"the member refuses it: {e.message}"
                        now = self._clock.now()
                        uid = wanted.uid or ""
                        self._emit(JobFinished(self._name, key, uid, now, False, reason))
                except ClusterError:
                    failed = True
            if failed:
                delay = min(delay * 2, self._backoff[1])
                self._retry.set()
            else:
                delay = self._backoff[0]

    # Internals: Fleet's objects ------------------------------------------------------

    async def _sync_jobs(self, kind: Kind, items: list[JSON]) -> None:
        old = {where for where, obj in self._jobs.items() if _kind_of(obj) is kind}
        for where in old:
            del self._jobs[where]
        listed = [_stamped(o, kind) for o in items]
        self._jobs.update((ident(o), o) for o in listed)
        self._listed.add(kind.name)
        for obj in listed:
            self._job_changed(obj)
        for gone in sorted(old - {ident(o) for o in listed}):
            await self._job_gone(gone)

    async def _job_event(self, of: Kind, kind: str, obj: JSON) -> None:
        obj = _stamped(obj, of)
        where = ident(obj)
        if kind == "DELETED":
            self._jobs.pop(where, None)
            await self._job_gone(where)
        else:
            self._jobs[where] = obj
            self._job_changed(obj)

    def _job_changed(self, obj: JSON) -> None:
        key = self._by_ident.get(ident(obj))
        wanted = self._wanted.get(key) if key is not None else None
        if wanted is None or wanted.uid != uid_of(obj) or wanted.deleting or wanted.ended:
            return
        wanted.created = True
        now = self._clock.now()
        uid = wanted.uid or ""
        found, message = objects.phase(obj)
        if found in (Phase.RUNNING, Phase.RESTARTING) and not wanted.started:
            wanted.started = True
            self._emit(JobStarted(self._name, wanted.key, uid, now))
        restarting = found is Phase.RESTARTING
        if restarting != wanted.restarting:
            wanted.restarting = restarting
            self._emit(JobRestarting(self._name, wanted.key, uid, now, restarting, message))
        if found in (Phase.SUCCEEDED, Phase.FAILED):
            wanted.ended = True
            succeeded = found is Phase.SUCCEEDED
            reason = "" if succeeded else f"{_kind_of(obj).kind} failed: {message}".rstrip(": ")
            self._emit(JobFinished(self._name, wanted.key, uid, now, succeeded, reason))

    async def _job_gone(self, where: Ident) -> None:
        key = self._by_ident.get(where)
        wanted = self._wanted.get(key) if key is not None else None
        if key is None or wanted is None:
            return
        if wanted.deleting:
            await self._check_stopped(key)
        elif wanted.created and not wanted.ended:
            wanted.ended = True
            kind = wanted.kind.kind if wanted.kind is not None else "object"
            reason = f"the {kind} was deleted in the member"
            now = self._clock.now()
            self._emit(JobFinished(self._name, key, wanted.uid or "", now, False, reason))

    # Internals: pods -----------------------------------------------------------------

    async def _sync_pods(self, items: list[JSON]) -> None:
        await self._binder.replace(self._client, items)
        for key in sorted(k for k, w in self._wanted.items() if w.deleting):
            await self._check_stopped(key)

    async def _pod_event(self, kind: str, obj: JSON) -> None:
        if kind == "DELETED":
            self._binder.remove(obj)
            key = self._by_uid.get(uid_of(obj) or "")
            if key is not None:
                await self._check_stopped(key)
            await self._binder.bind_deferred(self._client)
            return
        await self._binder.put(self._client, obj)

    def _bindable(self, uid: str) -> _Wanted | None:
        """The job a pod of job uid ``uid`` is bound for (None: no job of this member's)."""
        key = self._by_uid.get(uid)
        wanted = self._wanted.get(key) if key is not None else None
        if wanted is None or wanted.job is None or wanted.deleting or wanted.ended:
            return None
        return wanted

    # Internals: readiness (fleet.clusters.kube.readiness) ------------------------------

    async def _probe(self) -> None:
        """Check that the member answers, takes Fleet's credentials and serves every kind."""
        client = self._client
        if client is None:
            return
        self._health.probed(await calls.probe(client, self._name, self._kinds))

    async def _probe_loop(self) -> None:
        while True:
            await self._clock.sleep(self._probe_interval)
            await self._probe()


if TYPE_CHECKING:
    # mypy checks that a Kubernetes cluster is a member cluster.
    _MEMBER: type[MemberCluster] = KubeCluster


def _stamped(obj: JSON, kind: Kind) -> JSON:
    """``obj`` with its kind's ``apiVersion`` and ``kind`` (lists leave them out of items)."""
    if obj.get("apiVersion") == kind.api_version and obj.get("kind") == kind.kind:
        return obj
    return {**obj, "apiVersion": kind.api_version, "kind": kind.kind}


def _kind_of(obj: JSON) -> Kind:
    """The kind of an object :func:`_stamped` marked."""
    return registry.of(obj)


def _replaceable(found: JSON) -> bool:
    """Whether Fleet's object ``found`` (of another run) may make way for a new run of
    its name: it ended (Succeeded or Failed) or is being deleted."""
    done = objects.phase(found)[0] in (Phase.SUCCEEDED, Phase.FAILED)
    return done or bool(objects.meta(found).get("deletionTimestamp"))
