"""A real member cluster: PyTorchJobs, their pods and the Nodes of one Kubernetes cluster.

Theory of operation: :class:`KubeCluster` implements
:class:`~fleet.clusters.base.MemberCluster` over one :class:`KubeClient`
(from the member's own kubeconfig).  It keeps what Fleet wants there — the
jobs dispatched to it, by key, each with its uid and placement — and three
watches (:mod:`.watches`) of what is there: Fleet's PyTorchJobs (by the uid
label), the pods that name Fleet's scheduler, and the Nodes.

* **Create** looks the PyTorchJob up by its deterministic name: absent, it
  is created (:func:`.objects.pytorchjob`); present with the job's uid label,
  nothing is done (a restart after "decided" finds it); present with another
  uid, :class:`~fleet.clusters.base.ClusterConflict`, and the object is left
  alone.  A member that does not answer does not fail the job: the creation
  is retried with backoff, and the member's readiness (below) drives the
  failover clock.
* **Binding.**  Fleet is the scheduler of those pods: a pending pod with the
  uid label of a job dispatched here is matched to its planned replica
  (``training.kubeflow.org/replica-type`` and ``-index``), gets the GPU
  indices in an annotation, and is bound to the planned node through its
  ``binding`` subresource.  A pod that names Fleet's scheduler but belongs to
  no such job stays pending, with a Warning Event saying why.
* **Status.**  The PyTorchJob's conditions give
  :class:`~fleet.clusters.base.JobStarted` (Running),
  :class:`~fleet.clusters.base.JobRestarting` (Restarting, and back) and
  :class:`~fleet.clusters.base.JobFinished` (Succeeded or Failed).
* **Delete** removes the PyTorchJob and its pods (gracefully: the kubelets
  and the garbage collector finish it); :class:`~fleet.clusters.base.JobStopped`
  is reported once neither the object nor any pod of that uid is left.
  Deletions that fail are retried with backoff.
* **Health.**  The member is *ready* when it answers, accepts Fleet's
  credentials, serves the PyTorchJob CRD, and every watch works; a change
  is reported as :class:`~fleet.clusters.base.MemberReadiness`.  While it is
  not ready every node of its cell config is reported bad, so nothing is
  placed there; when ready, a node of the cell config is healthy when its
  Node exists, is Ready and is not cordoned.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from fleet.clock import Clock
from fleet.clusters.base import (
    ClusterConflict,
    ClusterError,
    ClusterHealth,
    ClusterRejected,
    DispatchedJob,
    JobFinished,
    JobRestarting,
    JobStarted,
    JobStopped,
    MemberCluster,
    MemberEvent,
    MemberReadiness,
    NodeHealth,
    member_object_name,
    split_key,
)
from fleet.clusters.kube import objects
from fleet.clusters.kube.client import (
    AlreadyExists,
    KubeClient,
    NotFound,
    Refused,
    connect,
)
from fleet.clusters.kube.watches import Watcher
from fleet.core.placement import PodPlacement

log = logging.getLogger("fleet.clusters.kube")

#: Seconds between two checks that the member answers and serves the CRD.
PROBE_INTERVAL: Final = 2.0
GROUP_PATH: Final = "/apis/kubeflow.org/v1"
#: Seconds :meth:`KubeCluster.start` waits for the first lists of a ready member.
SYNC_TIMEOUT: Final = 10.0

JSON = dict[str, Any]


@dataclass(slots=True)
class _Wanted:
    """A job Fleet dispatched to this member, and what the member said of it."""

    job: DispatchedJob
    places: dict[str, PodPlacement] = field(default_factory=dict)  # replica -> PodPlacement
    created: bool = False
    started: bool = False
    ended: bool = False
    restarting: bool = False
    deleting: bool = False


class _Watch:
    """Reads the member's event queue; ends at the closing mark, leaving it for other readers."""

    def __init__(self, events: asyncio.Queue[MemberEvent | None]) -> None:
        self._events = events

    def __aiter__(self) -> _Watch:
        return self

    async def __anext__(self) -> MemberEvent:
        event = await self._events.get()
        if event is None:
            self._events.put_nowait(None)
            raise StopAsyncIteration
        return event


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
        scheduler: str = objects.SCHEDULER_NAME,
        probe_interval: float = PROBE_INTERVAL,
        backoff: tuple[float, float] = (0.2, 5.0),
    ) -> None:
        self._name = name
        self._clock = clock
        self._kubeconfig = kubeconfig
        self._context = context
        self._config_nodes = tuple(nodes)
        self._scheduler = scheduler
        self._probe_interval = probe_interval
        self._backoff = backoff
        self._client: KubeClient | None = None
        self._events: asyncio.Queue[MemberEvent | None] = asyncio.Queue()
        self._wanted: dict[str, _Wanted] = {}
        self._by_uid: dict[str, str] = {}
        self._jobs: dict[tuple[str, str], JSON] = {}  # (namespace, name) -> PyTorchJob
        self._pods: dict[tuple[str, str], JSON] = {}
        self._nodes: dict[str, JSON] = {}
        self._synced: set[str] = set()
        self._reported_nodes: dict[str, bool] = dict.fromkeys(self._config_nodes, True)
        self._told: set[str] = set()  # uids of pods told why they wait
        self._probe_error: str | None = "not contacted yet"
        self._watch_errors: dict[str, str] = {}
        self._ready: bool | None = None
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
            self._client = await connect(self._name, self._kubeconfig, self._context)
        except ClusterError as e:
            self._probe_error = e.message
            await self._readiness()
            return
        await self._probe()
        client = self._client
        fleet_jobs = [("labelSelector", objects.UID_LABEL)]
        ours = [("fieldSelector", f"spec.schedulerName={self._scheduler}")]
        for what, path, query, sync, event in (
            (
                "pytorchjobs",
                f"{GROUP_PATH}/{objects.PLURAL}",
                fleet_jobs,
                self._sync_jobs,
                self._job_event,
            ),
            ("pods", "/api/v1/pods", ours, self._sync_pods, self._pod_event),
            ("nodes", "/api/v1/nodes", [], self._sync_nodes, self._node_event),
        ):
            watcher = Watcher(
                client,
                self._clock,
                what,
                path,
                query,
                sync=sync,
                event=event,
                failed=self._watch_failed,
                recovered=self._watch_recovered,
                backoff=self._backoff,
            )
            self._watchers.append(watcher)
            watcher.start()
        if self._probe_error is None:
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
        if self._client is not None:
            await self._client.close()
        self._events.put_nowait(None)

    def watch(self) -> _Watch:
        return _Watch(self._events)

    async def health(self) -> ClusterHealth:
        if self._closed:
            return ClusterHealth(False, "closed")
        reason = self._not_ready_reason()
        if reason:
            return ClusterHealth(False, reason)
        ready = sum(1 for n in self._config_nodes if self._reported_nodes.get(n, False))
        return ClusterHealth(
            True,
            f"ready: {ready}/{len(self._config_nodes)} nodes healthy, {len(self._wanted)} jobs",
        )

    # Create and delete ---------------------------------------------------------------

    async def create(self, job: DispatchedJob) -> None:
        """Create ``job``'s PyTorchJob; see the module docstring."""
        if job.cluster != self._name:
            raise ValueError(f"job {job.key} is dispatched to {job.cluster}, not to {self._name}")
        wanted = self._wanted.get(job.key)
        if wanted is not None and wanted.job.uid != job.uid:
            raise ClusterConflict(
                self._name, f"job {job.key} is here with uid {wanted.job.uid}, not {job.uid}"
            )
        if wanted is None:
            wanted = _Wanted(job, {p.pod: p for p in job.pods})
            self._wanted[job.key] = wanted
            self._by_uid[job.uid] = job.key
        if wanted.created:
            return
        try:
            await self._create(wanted)
        except (ClusterConflict, ClusterRejected):
            self._forget(job.key)
            raise
        except ClusterError as e:
            log.warning("%s: creating %s failed, retrying: %s", self._name, job.key, e)
            self._retry.set()
            return
        await self._bind_waiting()

    async def delete(self, key: str) -> bool:
        """Delete job ``key``'s PyTorchJob and its pods; see the module docstring."""
        split_key(key)
        wanted = self._wanted.get(key)
        if wanted is None:
            # Not dispatched by this process (a restart): delete what is there.
            here = self._jobs.get(self._where(key))
            uid = objects.labels(here).get(objects.UID_LABEL) if here is not None else None
            if here is None and "pytorchjobs" in self._synced:
                return False
            placeholder = DispatchedJob(
                key, str(uid or "unknown"), self._name, "", (_nowhere(),), {}
            )
            wanted = _Wanted(placeholder, created=True)
            self._wanted[key] = wanted
            if uid:
                self._by_uid[str(uid)] = key
        if wanted.deleting:
            return True
        wanted.deleting = True
        if wanted.ended:
            await self._try_delete(wanted)
            self._forget(key)
            return False
        await self._try_delete(wanted)
        await self._check_stopped(key)
        return True

    # Internals: acting -----------------------------------------------------------------

    def _where(self, key: str) -> tuple[str, str]:
        return split_key(key)[0], member_object_name(key)

    def _client_or_raise(self) -> KubeClient:
        if self._client is None:
            raise Refused(self._name, self._probe_error or "no client")
        return self._client

    async def _create(self, wanted: _Wanted) -> None:
        client = self._client_or_raise()
        job = wanted.job
        namespace, name = self._where(job.key)
        path = f"{GROUP_PATH}/namespaces/{namespace}/{objects.PLURAL}"
        try:
            found = await client.request("GET", f"{path}/{name}")
        except NotFound:
            found = None
        if found is None:
            try:
                found = await client.request(
                    "POST", path, body=objects.pytorchjob(job, self._scheduler)
                )
            except AlreadyExists:
                found = await client.request("GET", f"{path}/{name}")
            else:
                log.info(
                    "%s: created PyTorchJob %s/%s for %s", self._name, namespace, name, job.key
                )
        uid = objects.labels(found).get(objects.UID_LABEL)
        if uid != job.uid:
            raise ClusterConflict(
                self._name,
                f"PyTorchJob {namespace}/{name} exists with uid label {uid!r}, not {job.uid}; "
                "it is left as it is",
            )
        wanted.created = True
        self._jobs[(namespace, name)] = found
        await self._job_changed(found)

    async def _try_delete(self, wanted: _Wanted) -> None:
        try:
            await self._delete(wanted)
        except ClusterError as e:
            log.warning("%s: deleting %s failed, retrying: %s", self._name, wanted.job.key, e)
            self._retry.set()

    async def _delete(self, wanted: _Wanted) -> None:
        client = self._client_or_raise()
        namespace, name = self._where(wanted.job.key)
        path = f"{GROUP_PATH}/namespaces/{namespace}/{objects.PLURAL}/{name}"
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        with contextlib.suppress(NotFound):
            await client.request("DELETE", path, body=body)
        for (ns, pod), obj in sorted(self._pods.items()):
            if objects.labels(obj).get(objects.UID_LABEL) != wanted.job.uid:
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
        uid = wanted.job.uid
        if any(objects.labels(p).get(objects.UID_LABEL) == uid for p in self._pods.values()):
            return
        self._forget(key)
        if not wanted.ended:
            self._emit(JobStopped(self._name, key, uid, self._clock.now()))

    def _forget(self, key: str) -> None:
        wanted = self._wanted.pop(key, None)
        if wanted is not None and self._by_uid.get(wanted.job.uid) == key:
            del self._by_uid[wanted.job.uid]

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
                    elif not wanted.created:
                        await self._create(wanted)
                except (ClusterConflict, ClusterRejected) as e:
                    log.warning("%s: %s: %s", self._name, key, e)
                    if not wanted.deleting:
                        self._forget(key)
                        reason = f"the member refuses it: {e.message}"
                        self._emit(
                            JobFinished(
                                self._name, key, wanted.job.uid, self._clock.now(), False, reason
                            )
                        )
                except ClusterError:
                    failed = True
            if failed:
                delay = min(delay * 2, self._backoff[1])
                self._retry.set()
            else:
                delay = self._backoff[0]
                await self._bind_waiting()

    # Internals: PyTorchJobs ----------------------------------------------------------

    async def _sync_jobs(self, items: list[JSON]) -> None:
        old = set(self._jobs)
        self._jobs = {_ident(o): o for o in items}
        self._synced.add("pytorchjobs")
        for obj in items:
            await self._job_changed(obj)
        for ident in sorted(old - set(self._jobs)):
            await self._job_gone(ident)

    async def _job_event(self, kind: str, obj: JSON) -> None:
        ident = _ident(obj)
        if kind == "DELETED":
            self._jobs.pop(ident, None)
            await self._job_gone(ident)
        else:
            self._jobs[ident] = obj
            await self._job_changed(obj)

    def _wanted_for(self, obj: JSON) -> _Wanted | None:
        key = self._by_uid.get(str(objects.labels(obj).get(objects.UID_LABEL)))
        wanted = self._wanted.get(key) if key is not None else None
        if wanted is None or _ident(obj) != self._where(wanted.job.key):
            return None
        return wanted

    async def _job_changed(self, obj: JSON) -> None:
        wanted = self._wanted_for(obj)
        if wanted is None or wanted.deleting or wanted.ended:
            return
        wanted.created = True
        job = wanted.job
        now = self._clock.now()
        found, message = objects.phase(obj)
        if found in (objects.Phase.RUNNING, objects.Phase.RESTARTING) and not wanted.started:
            wanted.started = True
            self._emit(JobStarted(self._name, job.key, job.uid, now))
        restarting = found is objects.Phase.RESTARTING
        if restarting != wanted.restarting:
            wanted.restarting = restarting
            self._emit(JobRestarting(self._name, job.key, job.uid, now, restarting, message))
        if found in (objects.Phase.SUCCEEDED, objects.Phase.FAILED):
            wanted.ended = True
            succeeded = found is objects.Phase.SUCCEEDED
            reason = "" if succeeded else f"PyTorchJob failed: {message}".rstrip(": ")
            self._emit(JobFinished(self._name, job.key, job.uid, now, succeeded, reason))

    async def _job_gone(self, ident: tuple[str, str]) -> None:
        for key, wanted in sorted(self._wanted.items()):
            if self._where(key) != ident:
                continue
            if wanted.deleting:
                await self._check_stopped(key)
            elif wanted.created and not wanted.ended:
                wanted.ended = True
                reason = "the PyTorchJob was deleted in the member"
                self._emit(
                    JobFinished(self._name, key, wanted.job.uid, self._clock.now(), False, reason)
                )

    # Internals: pods -----------------------------------------------------------------

    async def _sync_pods(self, items: list[JSON]) -> None:
        self._pods = {_ident(o): o for o in items}
        self._synced.add("pods")
        await self._bind_waiting()
        for key in sorted(k for k, w in self._wanted.items() if w.deleting):
            await self._check_stopped(key)

    async def _pod_event(self, kind: str, obj: JSON) -> None:
        ident = _ident(obj)
        if kind == "DELETED":
            self._pods.pop(ident, None)
            key = self._by_uid.get(str(objects.labels(obj).get(objects.UID_LABEL)))
            if key is not None:
                await self._check_stopped(key)
            return
        self._pods[ident] = obj
        if objects.pending(obj):
            await self._bind(obj)

    async def _bind_waiting(self) -> None:
        for _, pod in sorted(self._pods.items()):
            if objects.pending(pod):
                await self._bind(pod)

    async def _bind(self, pod: JSON) -> None:
        client = self._client
        if client is None:
            return
        meta = objects.meta(pod)
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        uid = objects.labels(pod).get(objects.UID_LABEL)
        key = self._by_uid.get(str(uid)) if uid else None
        wanted = self._wanted.get(key) if key is not None else None
        replica = objects.replica_name(pod)
        if wanted is None or wanted.deleting or wanted.ended:
            await self._tell(pod, "the pod belongs to no job that Fleet admitted to this cluster")
            return
        place = wanted.places.get(replica or "")
        if place is None:
            await self._tell(
                pod, f"job {wanted.job.key} has no planned replica {replica or '(unlabelled)'}"
            )
            return
        gpus = ",".join(str(g) for g in place.gpus)
        patch = {
            "metadata": {
                "annotations": {objects.GPU_ANNOTATION: gpus, objects.REPLICA_ANNOTATION: place.pod}
            }
        }
        pod_path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        try:
            await client.request(
                "PATCH", pod_path, body=patch, content_type="application/merge-patch+json"
            )
            await client.request(
                "POST", f"{pod_path}/binding", body=objects.binding(name, place.node)
            )
        except (NotFound, AlreadyExists):
            return  # gone, or bound meanwhile
        except ClusterError as e:
            log.warning("%s: binding pod %s/%s failed: %s", self._name, namespace, name, e)
            return
        log.info(
            "%s: bound %s/%s (%s of %s) to %s GPUs [%s]",
            self._name,
            namespace,
            name,
            place.pod,
            wanted.job.key,
            place.node,
            gpus,
        )

    async def _tell(self, pod: JSON, why: str) -> None:
        """A Warning Event on ``pod`` saying why it waits (once per pod)."""
        uid = str(objects.meta(pod).get("uid"))
        if uid in self._told or self._client is None:
            return
        self._told.add(uid)
        namespace = objects.meta(pod).get("namespace")
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = objects.pod_event(pod, "FailedScheduling", why, now)
        try:
            await self._client.request("POST", f"/api/v1/namespaces/{namespace}/events", body=event)
        except ClusterError as e:
            log.warning("%s: could not post an event on a pod: %s", self._name, e)

    # Internals: nodes and readiness ----------------------------------------------------

    async def _sync_nodes(self, items: list[JSON]) -> None:
        self._nodes = {str(objects.meta(o).get("name")): o for o in items}
        self._synced.add("nodes")
        self._report_nodes()

    async def _node_event(self, kind: str, obj: JSON) -> None:
        name = str(objects.meta(obj).get("name"))
        if kind == "DELETED":
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = obj
        self._report_nodes()

    def _node_ok(self, node: str) -> bool:
        if self._not_ready_reason() or "nodes" not in self._synced:
            return False
        obj = self._nodes.get(node)
        return obj is not None and objects.node_health(obj)[0]

    def _report_nodes(self) -> None:
        if not self._not_ready_reason() and "nodes" not in self._synced:
            return  # ready, but the Nodes are not listed yet: nothing to say
        now = self._clock.now()
        for node in self._config_nodes:
            ok = self._node_ok(node)
            if self._reported_nodes.get(node) != ok:
                self._reported_nodes[node] = ok
                self._emit(NodeHealth(self._name, node, ok, now))

    def node_problems(self) -> dict[str, str]:
        """Nodes of the cell config that cannot take pods now, and why."""
        out: dict[str, str] = {}
        for node in self._config_nodes:
            obj = self._nodes.get(node)
            if obj is None:
                out[node] = "no such Node in the member"
            else:
                ok, why = objects.node_health(obj)
                if not ok:
                    out[node] = why
        return out

    def _not_ready_reason(self) -> str:
        if self._probe_error:
            return self._probe_error
        for what, error in sorted(self._watch_errors.items()):
            return f"watch of {what} failing (retrying with backoff): {error}"
        return ""

    async def _readiness(self) -> None:
        reason = self._not_ready_reason()
        ready = not reason
        if ready != self._ready:
            self._ready = ready
            if ready:
                log.info("%s: ready", self._name)
            else:
                log.warning("%s: not ready: %s", self._name, reason)
            self._emit(MemberReadiness(self._name, ready, reason, self._clock.now()))
        self._report_nodes()

    async def _watch_failed(self, what: str, error: ClusterError) -> None:
        self._watch_errors[what] = error.message
        await self._readiness()

    async def _watch_recovered(self, what: str) -> None:
        self._watch_errors.pop(what, None)
        await self._readiness()

    async def _probe(self) -> None:
        """Check that the member answers, takes Fleet's credentials and serves the CRD."""
        client = self._client
        if client is None:
            return
        try:
            group = await client.request("GET", GROUP_PATH)
            plurals = {r.get("name") for r in group.get("resources") or [] if isinstance(r, dict)}
            if objects.PLURAL not in plurals:
                raise NotFound(self._name, f"GET {GROUP_PATH}: no {objects.PLURAL} resource", 404)
            await client.request("GET", f"{GROUP_PATH}/{objects.PLURAL}", query=[("limit", "1")])
        except NotFound as e:
            self._probe_error = (
                "the PyTorchJob CRD (pytorchjobs.kubeflow.org, version v1) "
                f"is not installed ({e.message})"
            )
        except Refused as e:
            self._probe_error = f"the member refuses Fleet's credentials or rights: {e.message}"
        except ClusterError as e:
            self._probe_error = f"unreachable: {e.message}"
        else:
            self._probe_error = None
        await self._readiness()

    async def _probe_loop(self) -> None:
        while True:
            await self._clock.sleep(self._probe_interval)
            await self._probe()


def _ident(obj: JSON) -> tuple[str, str]:
    meta = objects.meta(obj)
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _nowhere() -> PodPlacement:
    return PodPlacement("unknown-0", "unknown")


if TYPE_CHECKING:
    # mypy checks that a Kubernetes cluster is a member cluster.
    _MEMBER: type[MemberCluster] = KubeCluster
