"""What Fleet writes on the hub's objects: their status and Events, bounded in flight.

Theory of operation: :class:`Recorder` is the one writer of the hub's
objects' ``status`` (a JSON patch of the ``status`` subresource that puts
the whole status in place: a merge patch would keep a resource that left a
queue's ``used``) and of core ``v1`` Events about them
(``involvedObject`` the object with its uid, ``source.component: fleet``,
as ``kubectl describe`` lists them).  At most :data:`IN_FLIGHT` writes are in
flight at once, so a burst of thousands of jobs does not open thousands of
requests to the hub.  A write that fails is logged and dropped: a status is
written again on the job's next change (and the writer's periodic pass), an
Event is a notice, not a record (Fleet's own event log is the record).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Final

from fleet.clock import Clock
from fleet.clusters.base import ClusterError
from fleet.clusters.kube.client import AlreadyExists, KubeClient, NotFound
from fleet.hub import objects
from fleet.hub.objects import JSON, Resource

log = logging.getLogger("fleet.hub")

#: Writes to the hub in flight at once.
IN_FLIGHT: Final = 32
#: Longest Event message (the API server's own bound is 1 KiB for notes).
MAX_MESSAGE: Final = 1024


class Recorder:
    """Writes statuses and Events on the hub; see the module docstring."""

    def __init__(self, client: KubeClient, clock: Clock, *, in_flight: int = IN_FLIGHT) -> None:
        self.client = client
        self.clock = clock
        self._slots = asyncio.Semaphore(in_flight)
        self._instance = socket.gethostname()
        #: writes done, and writes that failed (for the benchmark's log)
        self.writes = 0
        self.failures = 0

    async def status(self, resource: Resource, obj: JSON, status: JSON) -> bool:
        """Replace ``obj``'s status; False when the write failed."""
        meta = objects.meta(obj)
        path = resource.object_path(str(meta.get("namespace")), str(meta.get("name")))
        return await self._write(
            "PATCH",
            f"{path}/status",
            [{"op": "add", "path": "/status", "value": status}],
            "application/json-patch+json",
        )

    async def event(
        self, resource: Resource, obj: JSON, kind: str, reason: str, message: str
    ) -> bool:
        """Record Event ``reason`` (``kind`` Normal or Warning) about ``obj``."""
        meta = objects.meta(obj)
        namespace = str(meta.get("namespace") or "default")
        now = objects.rfc3339(self.clock.now())
        body: JSON = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "name": meta.get("name"),
                "namespace": namespace,
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:MAX_MESSAGE],
            "type": kind,
            "source": {"component": "fleet"},
            "reportingComponent": "fleet",
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        return await self._write(
            "POST", f"/api/v1/namespaces/{namespace}/events", body, "application/json"
        )

    async def create(self, resource: Resource, body: JSON) -> bool:
        """Create ``body`` on the hub; False when it was not (an object of its name
        exists, its namespace does not, or the write failed)."""
        meta = objects.meta(body)
        namespace = str(meta.get("namespace") or "")
        path = resource.collection_path(namespace)
        async with self._slots:
            try:
                await self.client.request("POST", path, body=body)
            except (AlreadyExists, NotFound) as e:
                log.info("hub: %s/%s not shown on the hub: %s", namespace, meta.get("name"), e)
                return False
            except ClusterError as e:
                self.failures += 1
                log.warning("hub: creating %s/%s failed: %s", namespace, meta.get("name"), e)
                return False
        self.writes += 1
        return True

    async def refused(self, resource: Resource, obj: JSON, why: str) -> None:
        """Fleet refused ``obj``: the condition ``Invalid`` and a Warning Event."""
        await self.status(resource, obj, objects.invalid_status(why))
        await self.event(resource, obj, "Warning", "InvalidSpec", why)

    async def _write(self, method: str, path: str, body: object, content_type: str) -> bool:
        async with self._slots:
            try:
                await self.client.request(method, path, body=body, content_type=content_type)
            except ClusterError as e:
                self.failures += 1
                log.warning("hub: %s %s failed: %s", method, path, e)
                return False
        self.writes += 1
        return True
