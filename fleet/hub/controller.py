"""The hub controller: its watches, doors and writers, started while this replica schedules.

Theory of operation: :func:`setup` adds the hub to the aiohttp application
after the service (``cleanup_ctx`` runs in order, so the service is started
first and stopped last).  It connects to the hub with the kubeconfig the
settings name (:func:`fleet.clusters.kube.client.connect`: no credential
plugin unless ``--allow-kubeconfig-exec``) and runs :class:`Hub` while this
replica schedules: always on SQLite, on the leader on PostgreSQL (a follower
that wins an election starts it, one that loses stops it), so one Fleet at a
time writes on the hub.

:meth:`Hub.start` starts the watches (:class:`fleet.clusters.kube.watches.Watcher`:
list, then watch from the list's resourceVersion with bookmarks, list again
on 410 Gone or any failure) in an order that lets each object find what it
needs: PropagationPolicies first (both groups), then the ElasticQuotaTree,
each waited for (at most :data:`SYNC_WAIT` seconds: a CRD the hub lacks
does not hold the rest up), then every workload kind; then, once those are
listed (or failing: a kind the hub does not serve), the
:class:`~fleet.hub.status.StatusWriter`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final

from aiohttp import web

from fleet.api import keys
from fleet.api.submissions import Submitted, limits_of, parse_submission, stored_models
from fleet.clusters.base import ClusterError
from fleet.clusters.kube.client import KubeClient, connect
from fleet.clusters.kube.kubeconfig import KubeconfigPolicy
from fleet.clusters.kube.watches import Watcher
from fleet.hub import objects
from fleet.hub.config import PolicyDoor, TreeDoor
from fleet.hub.events import Recorder
from fleet.hub.jobs import JobDoor
from fleet.hub.objects import JSON, Resource
from fleet.hub.status import QueueWriter, StatusWriter
from fleet.manifests import convert
from fleet.service import wiring
from fleet.service.settings import Settings

log = logging.getLogger("fleet.hub")

#: Seconds the start waits for each configuration watch's first list.
SYNC_WAIT: Final = 10.0
#: The key of the application's :class:`HubRunner` (tests and benchmarks read it).
HUB: Final = web.AppKey("hub", object)


class Hub:
    """Every watch, door and writer of one hub; see the module docstring."""

    def __init__(self, svc: wiring.Service, client: KubeClient) -> None:
        self.svc = svc
        self.client = client
        self.recorder = Recorder(client, svc.clock)
        self.door = JobDoor(svc, client, self.recorder, self._parse)
        self.door.selected = self._selected
        self.door.owned = lambda namespace: svc.tree.queue_for_namespace(namespace) is not None
        self.policies = PolicyDoor(svc, self.door.retry_refused)
        self.tree = TreeDoor(svc, self.recorder, self.door.retry_refused)
        self.queues = QueueWriter(client, self.recorder)
        self.writer = StatusWriter(svc, self.door, self.recorder, self.queues)
        self.watchers: list[Watcher] = []
        self._writer: asyncio.Task[None] | None = None

    async def _parse(self, body: bytes) -> list[Submitted]:
        svc = self.svc
        return parse_submission(
            body,
            tree=svc.tree,
            clusters=svc.clusters,
            first_seq=0,
            limits=limits_of(svc.settings),
            runtimes=svc.runtimes,
            policies=svc.policies,
        )

    def _selected(self, obj: JSON) -> bool:
        meta = objects.meta(obj)
        labels = meta.get("labels")
        target = convert.Target(
            str(obj.get("apiVersion") or ""),
            str(obj.get("kind") or ""),
            str(meta.get("namespace") or ""),
            str(meta.get("name") or ""),
            labels if isinstance(labels, dict) else {},
        )
        return convert.match_target(target, stored_models(self.svc.policies)) is not None

    def _watcher(self, resource: Resource, sync: object, event: object) -> Watcher:
        async def failed(what: str, error: ClusterError) -> None:
            pass  # the watcher logs the first failure of a run of them

        async def recovered(what: str) -> None:
            pass

        return Watcher(
            self.client,
            self.svc.clock,
            resource.what,
            resource.path,
            (),
            sync=sync,  # type: ignore[arg-type]
            event=event,  # type: ignore[arg-type]
            failed=failed,
            recovered=recovered,
        )

    async def _started(self, watcher: Watcher) -> None:
        self.watchers.append(watcher)
        watcher.start()
        try:
            await asyncio.wait_for(watcher.synced.wait(), SYNC_WAIT)
        except TimeoutError:
            log.warning("hub: %s is not listed yet; going on without it", watcher.what)

    async def start(self) -> None:
        for resource in objects.POLICY_RESOURCES:

            async def policy_sync(items: list[JSON], r: Resource = resource) -> None:
                await self.policies.sync(r, items)

            async def policy_event(kind: str, obj: JSON, r: Resource = resource) -> None:
                await self.policies.event(r, kind, obj)

            await self._started(self._watcher(resource, policy_sync, policy_event))
        await self._started(self._watcher(objects.TREE_RESOURCE, self.tree.sync, self.tree.event))
        jobs = []
        for resource in objects.JOB_RESOURCES:
            sync, event = self.door.watching(resource)
            jobs.append(self._watcher(resource, sync, event))
            self.watchers.append(jobs[-1])
            jobs[-1].start()
        # The writer starts once the jobs are listed (or their kind fails on this hub),
        # so that it finds the objects Fleet made before rather than making them again.
        deadline = asyncio.get_running_loop().time() + SYNC_WAIT
        while asyncio.get_running_loop().time() < deadline and not all(
            w.synced.is_set() or w.failing for w in jobs
        ):
            await asyncio.sleep(0.05)
        self._writer = asyncio.create_task(self.writer.run(), name="fleet-hub-status")
        log.info("hub: following %s", self.client.cluster)

    async def stop(self) -> None:
        for watcher in self.watchers:
            await watcher.stop()
        self.watchers = []
        if self._writer is not None:
            self._writer.cancel()
            await asyncio.gather(self._writer, return_exceptions=True)
            self._writer = None
        await self.door.stop()


async def connect_hub(settings: Settings) -> KubeClient:
    """A client for the hub of ``settings`` (its kubeconfig checked like a member's)."""
    assert settings.hub_kubeconfig is not None
    path = settings.hub_kubeconfig.resolve()
    policy = KubeconfigPolicy(path.parent, allow_exec=settings.allow_kubeconfig_exec)
    return await connect("hub", path, settings.hub_context, policy)


class HubRunner:
    """Starts a :class:`Hub` while this replica schedules and stops it when it no longer does."""

    def __init__(self, svc: wiring.Service, client: KubeClient) -> None:
        self.svc = svc
        self.client = client
        #: the hub that runs (None while this replica does not schedule)
        self.hub: Hub | None = None

    async def leading(self, now: bool) -> None:
        if now and self.hub is None:
            self.hub = Hub(self.svc, self.client)
            await self.hub.start()
        elif not now and self.hub is not None:
            hub, self.hub = self.hub, None
            await hub.stop()


def setup(app: web.Application, settings: Settings) -> None:
    """Run the hub of ``settings`` beside the service of ``app`` (see the module docstring)."""

    async def run_hub(app: web.Application) -> AsyncIterator[None]:
        svc = app[keys.SERVICE]
        client = await connect_hub(settings)
        runner = HubRunner(svc, client)
        app[HUB] = runner
        svc.on_role.append(runner.leading)
        if svc.scheduling:
            await runner.leading(True)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):
                svc.on_role.remove(runner.leading)
            await runner.leading(False)
            await client.close()

    app.cleanup_ctx.append(run_hub)
