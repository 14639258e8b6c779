"""Fleet as the scheduler of its pods: bind each to its planned node, or say why not.

Theory of operation: :class:`PodBinder` keeps Fleet's pods in one member
(:class:`~.pods.PodIndex`) and binds each pending one of a job dispatched
there to its planned replica (:func:`planned_replica`: the kind reads the
pod's role and index), waiting while other pods still hold its GPUs.
:func:`bind` writes the planned replica and its GPU
(leaf-cell) indices into the pod's annotations — HiveD's leaf-cell isolation:
a device plugin exposes exactly those GPUs — and then binds the pod to the
planned node through its ``binding`` subresource, as kube-scheduler does.
:class:`Teller` posts one Warning Event (``FailedScheduling``) on a pod that
Fleet will not bind, saying why; once per pod.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from fleet.clusters.base import ClusterError, DispatchedJob
from fleet.clusters.kube import objects
from fleet.clusters.kube.client import AlreadyExists, KubeClient, NotFound
from fleet.clusters.kube.pods import Ident, PodIndex, ident, uid_of
from fleet.core.placement import PodPlacement
from fleet.manifests.kinds import registry

log = logging.getLogger("fleet.clusters.kube")

JSON = dict[str, Any]


async def bind(client: KubeClient, pod: JSON, place: PodPlacement) -> None:
    """Annotate ``pod`` with ``place``'s replica and GPUs, then bind it to ``place.node``."""
    meta = objects.meta(pod)
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    gpus = ",".join(str(g) for g in place.gpus)
    annotations = {objects.GPU_ANNOTATION: gpus, objects.REPLICA_ANNOTATION: place.pod}
    path = f"/api/v1/namespaces/{namespace}/pods/{name}"
    await client.request(
        "PATCH",
        path,
        body={"metadata": {"annotations": annotations}},
        content_type="application/merge-patch+json",
    )
    await client.request("POST", f"{path}/binding", body=objects.binding(name, place.node))
    log.info(
        "%s: bound %s/%s (%s) to %s, GPUs [%s]",
        client.cluster,
        namespace,
        name,
        place.pod,
        place.node,
        gpus,
    )


class Teller:
    """Tells a pod, once, why Fleet does not bind it."""

    def __init__(self) -> None:
        self._told: set[str] = set()

    async def tell(self, client: KubeClient, pod: JSON, why: str) -> None:
        uid = str(objects.meta(pod).get("uid"))
        if uid in self._told:
            return
        self._told.add(uid)
        namespace = objects.meta(pod).get("namespace")
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        event = objects.pod_event(pod, "FailedScheduling", why, now)
        try:
            await client.request("POST", f"/api/v1/namespaces/{namespace}/events", body=event)
        except ClusterError as e:
            log.warning("%s: could not post an event on a pod: %s", client.cluster, e)

    def forget(self, pod: JSON) -> None:
        self._told.discard(str(objects.meta(pod).get("uid")))


class Bindable(Protocol):
    """What the binder needs of a job dispatched to the member."""

    key: str
    uid: str | None
    job: DispatchedJob | None
    places: dict[str, PodPlacement]
    claims: dict[str, str]


class PodBinder:
    """Fleet's pods in one member, each bound to its planned node once its job is known.

    ``lookup`` gives the job that a pod's uid label names, when it is one
    dispatched to this member and neither ended nor being deleted.  A pod whose
    planned GPUs other pods still hold waits (deferred) until one of them ends
    or goes; a pod Fleet will not bind gets a Warning Event saying why
    (:class:`Teller`).
    """

    def __init__(self, member: str, lookup: Callable[[str], Bindable | None]) -> None:
        self.member = member
        self.pods = PodIndex()
        self._lookup = lookup
        self._teller = Teller()
        #: pods whose planned GPUs other pods still held when they were to be bound
        self._deferred: set[Ident] = set()

    async def replace(self, client: KubeClient | None, items: list[JSON]) -> None:
        """Every pod as listed; the pending ones are bound."""
        self.pods.replace(items)
        for pod in self.pods.pending():
            await self.bind(client, pod)

    async def put(self, client: KubeClient | None, pod: JSON) -> None:
        """A pod added or changed: bound when pending; one that ended may free GPUs."""
        self.pods.put(pod)
        if objects.pending(pod):
            await self.bind(client, pod)
        elif objects.ended(pod):
            await self.bind_deferred(client)

    def remove(self, pod: JSON) -> None:
        self.pods.remove(ident(pod))
        self._teller.forget(pod)

    async def bind_deferred(self, client: KubeClient | None) -> None:
        """Try again the pods that waited for GPUs other pods held (some may be free now)."""
        deferred, self._deferred = self._deferred, set()
        for key in sorted(deferred):
            pod = self.pods.get(key)
            if pod is not None and objects.pending(pod):
                await self.bind(client, pod)

    async def bind_uid(self, client: KubeClient | None, uid: str) -> None:
        """Bind the pods of job ``uid`` that wait (created before the job was known here)."""
        for _, pod in self.pods.of_uid(uid):
            if objects.pending(pod):
                await self.bind(client, pod)

    async def bind(self, client: KubeClient | None, pod: JSON) -> None:
        if client is None:
            return
        wanted = self._lookup(uid_of(pod) or "")
        if wanted is None:
            why = "the pod belongs to no job that Fleet admitted to this cluster"
            await self._teller.tell(client, pod, why)
            return
        others = self.pods.of_uid(wanted.uid or "")
        replica = planned_replica(wanted.job, wanted.places, wanted.claims, pod, others)
        place = wanted.places.get(replica or "")
        if place is None:
            why = f"job {wanted.key} has no planned replica {replica or '(unlabelled)'}"
            await self._teller.tell(client, pod, why)
            return
        holders = self.pods.holding(place.node, place.gpus, wanted.uid or "")
        if holders:
            # The cells are Fleet's again, but the GPUs are not free until the pods
            # that held them are gone (a preempted or cancelled job's pods end first).
            self._deferred.add(ident(pod))
            held = ", ".join("/".join(k) for k in holders[:3])
            why = f"waiting for GPUs {list(place.gpus)} of node {place.node}, still held by {held}"
            await self._teller.tell(client, pod, why)
            return
        try:
            await bind(client, pod, place)
        except (NotFound, AlreadyExists):
            return  # gone, or bound meanwhile
        except ClusterError as e:
            where = "/".join(ident(pod))
            log.warning("%s: binding pod %s failed: %s", self.member, where, e)


def planned_replica(
    job: DispatchedJob | None,
    places: Mapping[str, PodPlacement],
    claims: dict[str, str],
    pod: JSON,
    others: Iterable[tuple[object, JSON]],
) -> str | None:
    """The planned pod (``Worker-3``) that a member pod of ``job`` is.

    The kind reads the pod's role and index; roles match without regard to
    case (the training operator lowercases them).  A pod without an index
    (a non-indexed batch Job's) claims the first planned pod of its role
    that no other live pod of the job (``others``) holds or claimed (``claims``:
    pod uid -> planned pod, updated here), and keeps it: a pod
    holds the replica Fleet annotated it with, and Fleet's claim counts at
    once, before the member's answer to the binding comes back as an event.
    A pod that ended holds none: a Job's next pod, or the one that replaces
    a failed pod, takes its place.
    """
    if job is None:
        return None
    found = registry.of(job.manifest).replica(pod)
    if found is None:
        return None
    role, index = found
    roles = {p.rsplit("-", 1)[0].lower(): p.rsplit("-", 1)[0] for p in places}
    planned = roles.get(role.lower())
    if planned is None:
        return f"{role}-{index}" if index is not None else role
    if index is not None:
        return f"{planned}-{index}"

    def held_by(one: JSON) -> object:
        claimed = claims.get(str(objects.meta(one).get("uid")))
        return claimed or objects.annotations_of(one).get(objects.REPLICA_ANNOTATION)

    mine = held_by(pod)
    if isinstance(mine, str) and mine in places and mine.startswith(f"{planned}-"):
        return mine
    me = objects.meta(pod).get("uid")
    held = {
        held_by(other)
        for _, other in others
        if objects.meta(other).get("uid") != me and not objects.ended(other)
    }
    free = [p for p in places if p.rsplit("-", 1)[0] == planned and p not in held]
    if not free:
        return None
    chosen = min(free, key=_pod_order)
    claims[str(me)] = chosen
    return chosen


def _pod_order(pod: str) -> tuple[str, int]:
    role, _, index = pod.rpartition("-")
    return role, int(index)
