"""Fleet as the scheduler of its pods: bind each to its planned node, or say why not.

Theory of operation: :func:`bind` writes the planned replica and its GPU
(leaf-cell) indices into the pod's annotations — HiveD's leaf-cell isolation:
a device plugin exposes exactly those GPUs — and then binds the pod to the
planned node through its ``binding`` subresource, as kube-scheduler does.
:class:`Teller` posts one Warning Event (``FailedScheduling``) on a pod that
Fleet will not bind, saying why; once per pod.
"""

from __future__ import annotations

import datetime
import logging
from typing import Any

from fleet.clusters.base import ClusterError
from fleet.clusters.kube import objects
from fleet.clusters.kube.client import KubeClient
from fleet.core.placement import PodPlacement

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
